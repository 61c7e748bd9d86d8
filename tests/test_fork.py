"""Forking a cluster (``Simulator.fork`` / ``EngineState.forked``): a copy taken mid-episode,
advanced with the original's decisions, equals the original request for request; K copies
advanced in one batched call equal K separate runs; different decisions diverge only through
them."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched_gym import ClusterConfig, EngineConfig, GatewayConfig, Simulator, SimulatorBatch
from llmsched_gym.engine.fields import RECORDS, SPACES, constants
from llmsched_gym.envs.core import ExternalCeilings
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import make_scenario
from llmsched_gym.workloads.synthetic import ArrivalSpec, LengthSpec, PrefixSpec, WorkloadSpec, generate

FIELDS = ("instance", "decode_instance", "dispatch_t", "first_token_t", "finish_t", "end_t", "outcome", "prefix_hit",
          "preemptions", "generated", "transfer_s")


def _workload(seed, rate, n, groups):
    prefix = {"prefix": PrefixSpec(system_prompt_groups=groups, system_prompt_tokens=LengthSpec("fixed", 512),
                                   session_share=0.3)} if groups else {}
    w = generate(WorkloadSpec(arrival=ArrivalSpec("poisson", rate), input=LengthSpec("gaussian", 600, 300, 16, 3000),
                              output=LengthSpec("gaussian", 120, 80, 1, 600), num_requests=n, name="t", **prefix), seed)
    w.priority = np.where(np.arange(len(w)) % 3 == 0, -1, 0)
    return w


def _assert_same(a: Simulator, b: Simulator) -> None:
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(a.table, f), getattr(b.table, f), err_msg=f)


def _configs(instances, kv, seqs, budget, router, flow, cpu_gb, prefill, evict, preemption, timeout=None):
    prefill = min(prefill, instances - 1)
    cluster = ClusterConfig(instances=instances, kv_blocks=kv, cpu_kv_gb=cpu_gb, prefill_instances=prefill,
                            engine=EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=budget,
                                                preemption=preemption))
    gateway = GatewayConfig(router=router, flow_control=flow, ttl_s=5.0,
                            eviction=evict and flow is not None and not prefill, pd="pd-always" if prefill else None,
                            client_timeout_s=timeout if flow is None and not prefill else None)
    return cluster, gateway


CONFIGS = dict(
    seed=st.integers(0, 10_000), instances=st.integers(1, 4), kv=st.integers(150, 900), rate=st.floats(10, 80),
    seqs=st.integers(2, 64), budget=st.sampled_from([256, 2048]), groups=st.sampled_from([0, 3]),
    router=st.sampled_from(["jsq", "round-robin", "random", "least-tokens", "llm-d", "lmetric", "sglang-cache-aware",
                            "bailian", "aibrix", "preble"]),
    flow=st.sampled_from([None, "soft-reflective-ceiling", "static-usage-limit"]),
    cpu_gb=st.sampled_from([0.0, 0.05]), prefill=st.sampled_from([0, 0, 1]), evict=st.booleans(),
    preemption=st.sampled_from(["recompute", "restart"]), fork_at=st.floats(0.05, 2.0),
    timeout=st.sampled_from([None, 1.5]))


def _hashed(x, units, cpu=False):
    """Force the hashed prefix-cache layout (probing, backward-shift deletion) on small tables."""
    from llmsched_gym.engine import state as ST

    blocks = int(x.cpu_blocks * (x.instances if x.cpu_shared else 1) if cpu else x.kv_blocks)
    return (ST._pow2_at_least(2 * max(min(units[4], blocks), 4)), False) if blocks else (0, False)


@settings(max_examples=40, deadline=None)
@given(**CONFIGS, hashed=st.booleans())
def test_fork_mid_episode_reproduces_the_original(seed, instances, kv, rate, seqs, budget, groups, router, flow,
                                                  cpu_gb, prefill, evict, preemption, fork_at, timeout, hashed):
    """The original runs as slot 1 of a batch (its indices offset), its copies at slots 0..2
    of a state of their own: pointers are re-based, and every copy ends as the original."""
    with pytest.MonkeyPatch.context() as mp:
        if hashed:
            from llmsched_gym.engine import state as ST

            mp.setattr(ST, "_table_size", _hashed)
        _fork_and_compare(seed, instances, kv, rate, seqs, budget, groups, router, flow, cpu_gb, prefill, evict,
                          preemption, fork_at, timeout)


def _fork_and_compare(seed, instances, kv, rate, seqs, budget, groups, router, flow, cpu_gb, prefill, evict,
                      preemption, fork_at, timeout):
    if prefill and router in ("random", "bailian", "aibrix", "preble", "sglang-cache-aware"):
        router = "jsq"  # P/D needs a compiled router that knows the pools; these are covered aggregated
    cluster, gateway = _configs(instances, kv, seqs, budget, router, flow, cpu_gb, prefill, evict, preemption, timeout)
    other = Simulator(_workload(seed + 1, rate, 30, groups), cluster, gateway, seed=seed + 1, batch=False)
    original = Simulator(_workload(seed, rate, 70, groups), cluster, gateway, seed=seed, batch=False)
    SimulatorBatch([other, original])
    original.advance(fork_at)
    copies = original.fork(3)
    copies.run()
    original.run()
    for sim in copies.sims:
        _assert_same(sim, original)
        assert sim.table.counts() == original.table.counts()


@pytest.mark.parametrize("hashed", [True, False])
def test_fork_of_a_busy_cluster_reuses_its_slots(monkeypatch, hashed):
    """Chatbot's prefix sharing on small hashed tables (collisions, evictions, backward shifts)
    or direct ones, and a CPU tier: copies forked twice into the same slots (the second fork
    over the first's leftovers, which met more keys) equal the original."""
    import llmsched_gym as g
    from llmsched_gym.engine import state as ST

    if hashed:
        monkeypatch.setattr(ST, "_table_size", _hashed)
    w = g.make_scenario("chatbot", qps=30, duration_s=20).build_workload(0)
    cluster = ClusterConfig(instances=2, kv_blocks=1500, cpu_kv_gb=0.5)
    original = Simulator(w, cluster, GatewayConfig(router="llm-d"), seed=0)
    original.advance(5.0)
    copies = original.fork(2)
    copies.run()
    original.advance(12.0)
    original.state.fork(0, [])  # nothing to copy: a no-op
    copies.state.fork(0, [1], source=original.state)  # over a finished copy's tables
    second = copies.sims[1]
    original.run()
    SimulatorBatch.advance_clusters(copies.state, {1: second}, [1], np.inf)
    _assert_same(copies.sims[0], Simulator(w, cluster, GatewayConfig(router="llm-d"), seed=0).run())
    _assert_same(second, original)


@settings(max_examples=15, deadline=None)
@given(**CONFIGS)
def test_k_forks_in_one_call_equal_k_separate_runs(seed, instances, kv, rate, seqs, budget, groups, router, flow,
                                                   cpu_gb, prefill, evict, preemption, fork_at, timeout):
    """Copies given different usage limits (external ceilings) diverge; each equals the same
    copy advanced alone."""
    if prefill and router in ("random", "bailian", "aibrix", "preble", "sglang-cache-aware"):
        router = "jsq"
    cluster, gateway = _configs(instances, kv, seqs, budget, router, None, cpu_gb, prefill, False, preemption)
    gateway.flow_control = ExternalCeilings(np.ones(2))  # the kernel reads the ceilings each copy is given
    original = Simulator(_workload(seed, rate, 70, groups), cluster, gateway, seed=seed)
    original.advance(fork_at)
    ceilings = [np.array([1.0, 0.9]), np.array([1.0, 0.6]), np.array([0.8, 0.3])]
    together = original.fork(3)
    for sim, ceil in zip(together.sims, ceilings):
        sim.set_ceilings(ceil[:len(sim.band_priorities)])
    together.run()
    for sim, ceil in zip(together.sims, ceilings):
        alone = original.fork(1).sims[0]
        alone.set_ceilings(ceil[:len(alone.band_priorities)])
        alone.run()
        _assert_same(sim, alone)


def test_forks_with_other_decisions_diverge_only_through_them():
    """An external router's copies: the same decisions give the original's results, another
    decision for one request changes that copy alone."""
    w = _workload(3, 40, 40, 3)
    cluster, gateway = ClusterConfig(instances=3, kv_blocks=600), GatewayConfig(router="external")
    original = Simulator(w, cluster, gateway, seed=3)
    decide = lambda r: (7 * r + 1) % 3  # noqa: E731
    while original.advance(0.3) == "route":
        original.route(decide(original.pending_route))
    batch = original.fork(2)
    same, other = batch.sims
    first = True
    for sim in (original, same, other):
        while (status := sim.advance()) == "route":
            r = sim.pending_route
            sim.route((decide(r) + 1) % 3 if sim is other and first else decide(r))
            first = first and sim is not other
        assert status in ("done", "horizon")
    _assert_same(same, original)
    assert not all(np.array_equal(getattr(other.table, f), getattr(original.table, f), equal_nan=True)
                   for f in FIELDS)


def test_fork_rejects_a_bad_count():
    sim = Simulator(_workload(0, 20, 10, 0), ClusterConfig(instances=2, kv_blocks=300), GatewayConfig(router="jsq"))
    for k in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="fork count"):
            sim.fork(k)


def test_field_table_covers_every_array_and_constant():
    """Every state array is a record of the table, every pointer names a known space, and
    the generated constants are dense per record."""
    sim = Simulator(_workload(0, 20, 10, 3), ClusterConfig(instances=2, kv_blocks=300), GatewayConfig(router="llm-d"))
    arrays = {name for name, v in vars(sim.state).items() if isinstance(v, np.ndarray) and not name.endswith("_off")}
    assert arrays == {rec.array for rec in RECORDS}
    consts = constants()
    for rec in RECORDS:
        assert set(rec.spaces) <= set(SPACES)
        assert [consts[f.name] for f in rec.fields] == list(range(len(rec.fields)))
        for f in rec.fields:
            assert f.points_to in (None, "self", *SPACES)


def test_named_views_are_the_state_rows():
    """``state.clusters.now`` is the CF_NOW row of ``clu_f``: reads and writes go to the state."""
    from llmsched_gym.engine.layout import CF_NOW, CI_NSERVE, II_TOTAL, RF_ARRIVAL

    sim = Simulator(_workload(0, 20, 10, 0), ClusterConfig(instances=2, kv_blocks=300), GatewayConfig(router="jsq"))
    state = sim.state
    sim.advance(0.2)
    assert state.clusters.now[0] == state.clu_f[CF_NOW, 0] == sim.now
    np.testing.assert_array_equal(state.requests.arrival, state.req_f[RF_ARRIVAL])
    state.instances.total[1] = 123
    assert state.inst_i[II_TOTAL, 1] == 123
    state.clusters.nserve[0] = 1
    assert state.clu_i[CI_NSERVE, 0] == 1
    with pytest.raises(AttributeError, match="no engine field 'nope'"):
        _ = state.clusters.nope
    with pytest.raises(AttributeError, match="assign into"):
        state.clusters.now = 3.0


def test_replace_future_adds_copies_of_arrived_requests_and_nothing_else():
    """A planner's sampled future (``EngineState.replace_future``, in a fork with room): the
    copy sees exactly the given arrivals, each with the content of the request it copies; a
    copy left alone still reproduces the original (LMetric's detector window included)."""
    w = _workload(5, 30, 60, 3)
    cluster, gateway = ClusterConfig(instances=3, kv_blocks=600), GatewayConfig(router="lmetric")
    original = Simulator(w, cluster, gateway, seed=5)
    original.advance(0.6)
    state, c = original.state, original.c
    ptr, now = int(state.clusters.ptr[c]), original.now
    copies = state.forked(c, 2, room=4)
    like = np.array([0, 2, 2])
    times = now + np.array([0.05, 0.1, 0.3])
    for bad_like, bad_times, match in (([ptr], times[:1], "only arrived"), (like, times[::-1], "ascending")):
        with pytest.raises(ValueError, match=match):
            copies.replace_future(1, bad_times, np.array(bad_like))
    assert copies.replace_future(1, times, like) == 3
    copies.advance(np.ones(2, bool), np.full(2, now + 30.0))
    original.run()
    req, n = copies.requests, len(w)
    r0, r1 = int(copies.req_off[0]), int(copies.req_off[1])
    np.testing.assert_array_equal(req.first[r0:r0 + n], original.table.first_token_t)
    assert int(copies.clusters.ptr[1]) == ptr + 3 and int(copies.clusters.req1[1]) == r1 + ptr + 3
    new = slice(r1 + ptr, r1 + ptr + 3)
    np.testing.assert_array_equal(req.arrival[new], times)
    for field in ("input", "output", "priority", "unit0", "unit1"):
        np.testing.assert_array_equal(getattr(req, field)[new], getattr(req, field)[r1 + like], err_msg=field)
    assert (req.outcome[new] == 1).all() and (req.first[new] > times).all()
    np.testing.assert_array_equal(req.first[r1:r1 + ptr] >= 0, original.table.first_token_t[:ptr] >= 0)


def test_a_copy_s_view_calls_its_own_simulator():
    """The view's callables are the copy's own (weak, so a view never keeps its simulator
    alive): a copy keeps working once the simulation it was forked from is gone."""
    sim = make_scenario("codegen", qps=8, horizon_s=5.0).simulator(0)
    sim.advance(2.0)
    arrived = sim.view.arrivals_since(0.0).copy()
    copies = sim.bound_copies(sim.state.forked(sim.c, 2))
    del sim
    gc.collect()
    for c in copies:
        np.testing.assert_array_equal(c.view.arrivals_since(0.0), arrived)
