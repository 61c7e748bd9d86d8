"""A compiled router's route-time state (round-robin's pointer, LMetric's detector window,
Preble's TPOT window) and books follow every dispatch, whoever chose the instance: a run
routed from outside with the router's own choices (``EngineState.suggest``) reproduces the
compiled run request for request, also after a copy is handed back to the compiled router
mid-run; and asking ``suggest`` changes nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import llmsched_gym as g
from llmsched_gym.engine.api import ROUTER_PY, compiled_form
from llmsched_gym.gateway.policy import list_policies, make_policy

FIELDS = ("instance", "dispatch_t", "first_token_t", "finish_t", "outcome", "prefix_hit", "preemptions")
#: every router that runs inside the engine
COMPILED = [n for n, f in list_policies("routing").items() if "compiled_form" in getattr(f, "__dict__", {})]


def _scenario(**kw):
    """Busy enough for LMetric's detector to flag classes (306 of 370 decisions differ
    from ``lmetric-no-detector`` here)."""
    sc = g.make_scenario("chatbot", qps=60, **kw)
    sc.horizon_s = 6.0
    return sc


def _state_snapshot(state):
    return [a.copy() for a in state.arrays()[:-1]] + [copy.deepcopy(state.rngs[0].bit_generator.state)]


def _routed_outside(sc, router, seed=5, hand_back_s=3.0, probe=False):
    """``router``'s run with every decision taken outside the engine (its own choice, asked
    with ``suggest`` from the cluster's generator), handed back to the compiled router at
    ``hand_back_s`` in a fork; ``probe``: also ask ``suggest`` (on a copy of the generator)
    twice per decision and check it changes no array. Returns the fork's request slots."""
    sim = sc.simulator(seed, router=router)
    sim.take_over_routing()
    sim.router = None  # no Python router hears anything: the engine's books only
    st = sim.state
    k = 0
    while sim.advance(hand_back_s) == "route":
        r = sim.r0 + sim.pending_route
        k += 1
        if probe and k <= 40:
            before = _state_snapshot(st)
            assert st.suggest(sim.c, r) == st.suggest(sim.c, r)
            for a, b in zip(before, _state_snapshot(st)):
                np.testing.assert_array_equal(a, b) if isinstance(a, np.ndarray) else None
                assert isinstance(a, np.ndarray) or a == b
        sim.route(st.suggest(sim.c, r, sim.rng))
    copies = st.forked(sim.c, 1)
    form = compiled_form(make_policy(router, "routing"), ROUTER_PY)
    copies.set_policy(0, "router", form.code, form.params)
    copies.advance(np.ones(1, bool), np.full(1, 1e9))
    return copies


def _assert_same(copies, heuristic):
    r0, n = int(copies.req_off[0]), len(heuristic.workload)
    rq = copies.requests
    for name, got in (("instance", rq.instance), ("dispatch_t", rq.dispatch), ("first_token_t", rq.first),
                      ("finish_t", rq.finish), ("outcome", rq.outcome)):
        np.testing.assert_array_equal(got[r0:r0 + n], getattr(heuristic.table, name), err_msg=name)


def test_every_compiled_router_is_covered():
    assert {"round-robin", "lmetric", "preble", "llm-d", "least-tokens", "sglang-cache-aware"} <= set(COMPILED)


@pytest.mark.parametrize("router", COMPILED)
def test_routed_outside_with_the_routers_choices_reproduces_it(router):
    sc = _scenario()
    heuristic = sc.simulator(5, router=router).run()
    assert np.count_nonzero(~np.isnan(heuristic.table.dispatch_t)) > 300
    _assert_same(_routed_outside(sc, router, probe=router in ("lmetric", "preble", "round-robin", "jsq")),
                 heuristic)


@pytest.mark.parametrize("router", ["round-robin", "lmetric", "preble"])
def test_pd_cluster_routed_outside_reproduces_the_router(router):
    sc = _scenario(prefill_instances=1)
    heuristic = sc.simulator(5, router=router).run()
    _assert_same(_routed_outside(sc, router), heuristic)


def test_lmetric_detector_state_follows_decisions_taken_outside():
    """The hand-back differs from the heuristic if the detector window missed the decisions
    taken outside: the window holds every routed arrival of its last seconds."""
    sc = _scenario()
    sim = sc.simulator(5, router="lmetric")
    sim.take_over_routing()
    sim.router = None
    routed = 0
    while sim.advance(2.0) == "route":
        sim.route(0)  # not LMetric's choice: the window records the arrival all the same
        routed += 1
    assert routed > 30
    assert sim.state.clusters.win_len[sim.c] == routed  # the window (60 s) holds them all


def test_suggest_needs_a_compiled_books_router():
    sim = _scenario().simulator(5, router="external")
    assert sim.advance() == "route"
    with pytest.raises(ValueError, match="no compiled router"):
        sim.state.suggest(sim.c, sim.r0 + sim.pending_route)
