"""The lookahead planner (baselines/lookahead.py) on forked clusters: offered only the base
heuristic's choice it routes exactly as the heuristic; offered every instance, its copies
see the future and it does no worse than the heuristic on the environment's cost."""

from __future__ import annotations

import numpy as np
import pytest

import llmsched_gym as g
from baselines import lookahead, planning
from baselines.lookahead import LookaheadPlanner
from llmsched_gym.autoscaling import run_autoscaled
from llmsched_gym.engine.api import ROUTER_PY, compiled_form
from llmsched_gym.envs.core import episode_cost, make_setup
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation import evaluate
from llmsched_gym.gateway.policy import make_policy

FIELDS = ("instance", "dispatch_t", "first_token_t", "finish_t", "outcome", "prefix_hit", "preemptions")


def _scenario(name="codegen", horizon_s=15.0, **kw):
    sc = g.make_scenario(name, **kw)
    sc.horizon_s = horizon_s
    return sc


@pytest.mark.parametrize("base, mode", [("jsq", "oracle"), ("lmetric-no-detector", "oracle"),
                                        ("least-tokens", "oracle"), ("lmetric-no-detector", "mpc")])
def test_only_the_base_choice_reproduces_the_heuristic(base, mode):
    sc = _scenario(qps=12)
    heuristic = sc.simulator(3, router=base).run()
    planner = make_policy(f"lookahead:candidates=base,base={base},horizon_s=0.5,mode={mode}", "gateway")
    planned = planner.run(sc, 3)
    assert planner.decisions == np.count_nonzero(~np.isnan(heuristic.table.dispatch_t)) > 100
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(planned.table, f), getattr(heuristic.table, f), err_msg=f)


def test_oracle_is_no_worse_than_its_base():
    sc = _scenario("chatbot", horizon_s=8.0, qps=40, instances=4)
    setup = make_setup("routing", scenario=sc)
    base = sc.simulator(0, router="lmetric-no-detector").run()
    oracle = make_policy("lookahead:horizon_s=1", "gateway").run(sc, 0)
    assert oracle.arrived == base.arrived > 200  # the same arrivals, routed differently
    assert episode_cost(oracle, setup) < episode_cost(base, setup)


def test_runs_through_the_harness():
    table = evaluate("codegen", "lmetric-no-detector;gateway=lookahead:candidates=base+label=plan", seeds=[1],
                     qps=10, overrides={"duration_s": 10}, workers=1)
    rows = {r["policy"]: r for r in table.filter(class_="all")}
    assert rows["plan"]["ttft_mean"] == rows["lmetric-no-detector"]["ttft_mean"]
    assert rows["plan"]["decisions"] > 50 and rows["plan"]["decisions_per_s"] > 0  # the planner's rate, per cell
    assert "decisions" not in rows["lmetric-no-detector"]


@pytest.mark.parametrize("spec, match", [
    ("lookahead:mode=replay", "mode='replay'"),
    ("lookahead:mode=mpc,samples=0", "samples"),
    ("lookahead:candidates=some", "candidates"),
    ("lookahead:horizon_s=0", "horizon_s"),
    ("lookahead:base=lookahead", "base=.lookahead. is invalid"),
    ("lookahead:decision=scaling", "decision"),
    ("lookahead:decision=autoscaling,base_scaler=no-such-scaler", "base_scaler"),
    ("lookahead:decision=flow,base_flow=none", "base_flow='none' is invalid with decision=flow"),
    ("lookahead:base_admission=external", "base_admission"),
    ("lookahead:grid=2", "grid"),
    ("lookahead:base_flow=no-such-limit", "base_flow"),
])
def test_bad_parameters(spec, match):
    with pytest.raises(ConfigError, match=match):
        make_policy(spec, "gateway")


@pytest.mark.parametrize("flow", ["soft-reflective-ceiling", "static-usage-limit"])
def test_flow_base_setting_is_the_base_policy(flow):
    sc = _scenario(horizon_s=20.0, paper_qps=16)
    base = sc.simulator(2, flow_control=flow).run()
    planner = make_policy(f"lookahead:decision=flow,candidates=base,interval_s=0.5,base_flow={flow}", "gateway")
    planned = planner.run(sc, 2)
    assert planner.decisions >= 39
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(planned.table, f), getattr(base.table, f), err_msg=f)


def test_flow_oracle_is_no_worse_than_its_base():
    sc = _scenario(horizon_s=30.0, paper_qps=16)
    setup = make_setup("flow_control", scenario=sc)
    base = sc.simulator(0, flow_control="soft-reflective-ceiling").run()
    oracle = make_policy("lookahead:decision=flow,horizon_s=3", "gateway").run(sc, 0)
    assert episode_cost(oracle, setup) <= episode_cost(base, setup)


def _cut(build, seed: int, cut_s: float):
    def cut_build(s: int):
        w = build(s)
        return w.subset(w.arrival_s <= cut_s) if s == seed else w
    return cut_build


def _routes_with_future_cut(mode: str, cut_s: float):
    """Instances the planner routes to, on the workload of seed 4 and on the same workload
    with every arrival after ``cut_s`` removed."""
    out = []
    for cut in (False, True):
        sc = _scenario(horizon_s=12.0, qps=12)
        if cut:
            sc.build_workload = _cut(sc.build_workload, 4, cut_s)
        out.append(make_policy(f"lookahead:mode={mode},horizon_s=2,samples=2", "gateway").run(sc, 4).table.instance)
    return out


def test_mpc_does_not_see_the_future():
    """mpc's decisions before ``t`` are the same whatever arrives after ``t``; oracle's are not."""
    for mode, blind in (("mpc", True), ("oracle", False)):
        full, cut = _routes_with_future_cut(mode, 6.0)
        n = len(cut)
        assert n > 50
        assert np.array_equal(full[:n], cut) == blind, mode


def test_mpc_samples_the_scenarios_arrival_model():
    sc = _scenario("chatbot", horizon_s=6.0, qps=40, instances=4)
    base = sc.simulator(0, router="lmetric-no-detector").run()
    planner = make_policy("lookahead:mode=mpc,horizon_s=1,samples=3", "gateway")
    mpc = planner.run(sc, 0)
    again = make_policy("lookahead:mode=mpc,horizon_s=1,samples=3", "gateway").run(sc, 0)
    np.testing.assert_array_equal(mpc.table.instance, again.table.instance)  # same seed, same plan
    assert planner.decisions == mpc.arrived == base.arrived > 100
    assert not np.array_equal(mpc.table.instance, base.table.instance)
    assert all(len(a) and not np.array_equal(a, mpc.workload.arrival_s) for a in planner.futures)


def test_mpc_refuses_a_trace():
    from conftest import trace_path

    trace_path("azure_llm_2023", "AzureLLMInferenceTrace_code.csv")  # skips where the public traces are absent
    sc = _scenario("azure-code", horizon_s=5.0)
    with pytest.raises(ConfigError, match="replays the same arrivals"):
        make_policy("lookahead:mode=mpc", "gateway").run(sc, 0)


def test_admission_base_option_is_the_base_policy_and_oracle_no_worse():
    sc = _scenario(horizon_s=20.0, paper_qps=16)
    setup = make_setup("admission", scenario=sc)
    base = sc.simulator(2, admission="probabilistic").run()
    planner = make_policy("lookahead:decision=admission,candidates=base,interval_s=0.5", "gateway")
    planned = planner.run(sc, 2)
    assert planner.decisions >= 39
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(planned.table, f), getattr(base.table, f), err_msg=f)
    oracle = make_policy("lookahead:decision=admission,horizon_s=3", "gateway").run(sc, 2)
    assert episode_cost(oracle, setup) <= episode_cost(base, setup)


def test_refuses_a_fault_schedule():
    sc = _scenario(qps=12, faults={"crashes": [{"instance": 0, "at_s": 2.0, "restart_s": 1.0}]})
    with pytest.raises(ConfigError, match="fault schedule"):
        make_policy("lookahead", "gateway").run(sc, 0)


@pytest.mark.parametrize("base, qps, instances, hand_back_s", [
    ("llm-d", 30, 4, 3.0), ("least-tokens", 30, 4, 3.0), ("sglang-cache-aware", 30, 4, 3.0), ("jsq", 30, 4, 3.0),
    ("round-robin", 30, 4, 3.0),
    # Preble's cold-start TPOT estimate 0: a window that missed the decisions routes otherwise
    ("preble:initial_tpot_s=0", 30, 4, 2.0),
    ("lmetric", 60, None, 1.0),  # busy enough for the detector to flag classes in its first seconds
])
def test_copies_handed_back_to_the_router_find_its_books_current(base, qps, instances, hand_back_s):
    """Routing taken over by a planner (``take_over_routing``) keeps the compiled router's books
    (llm-d's prefix index, tokens sent) and its route-time state (round-robin's pointer,
    Preble's TPOT window, LMetric's detector window) current: a fork handed back to the router
    mid-run reproduces the heuristic request for request."""
    sc = _scenario("chatbot", horizon_s=6.0, qps=qps, **({"instances": instances} if instances else {}))
    heuristic = sc.simulator(5, router=base).run()
    sim = sc.simulator(5, router=base)
    router = sim.take_over_routing()
    while sim.advance(hand_back_s) == "route":
        sim.route(router.route(sim.pending_info, sim.current_view()))
    copies = sim.state.forked(sim.c, 1)
    form = compiled_form(make_policy(base, "routing"), ROUTER_PY)
    copies.set_policy(0, "router", form.code, form.params)
    copies.cluster(0).log_finish = 0  # no Python router hears the copy
    copies.advance(np.ones(1, bool), np.full(1, 1e9))
    r0, n = int(copies.req_off[0]), len(heuristic.workload)
    np.testing.assert_array_equal(copies.requests.instance[r0:r0 + n], heuristic.table.instance)
    np.testing.assert_array_equal(copies.requests.first[r0:r0 + n], heuristic.table.first_token_t)


#: Gateway-v0's best combinations of docs/agents.md ("Gateway"): the planner's bases.
GATEWAY_BASES = {
    "codegen": ({"paper_qps": 16}, {"base": "lmetric", "base_flow": "priority-holdback:cmax=2.0439,cmin=1.21342",
                                    "base_admission": "always-admit"}),
    "chat": ({"paper_qps": 80}, {"base": "lmetric", "base_flow": "none",
                                 "base_admission": "probabilistic:k=0.05664,power=17.137"}),
}


def _combination(sc, seed: int, base: dict):
    flow = None if base["base_flow"] == "none" else base["base_flow"]
    return sc.simulator(seed, router=base["base"], flow_control=flow, admission=base["base_admission"]).run()


def _record_choices(monkeypatch) -> list:
    """Each decision's option costs and the planner's choice, as the planner makes them."""
    log = []

    def recorded(costs, base):
        out = planning.choose(costs, base)
        log.append((costs.copy(), out))
        return out

    monkeypatch.setattr(lookahead, "choose", recorded)
    return log


@pytest.mark.parametrize("name", GATEWAY_BASES)
def test_gateway_base_option_is_the_base_combination(name):
    kw, base = GATEWAY_BASES[name]
    sc = _scenario(name, horizon_s=20.0, **kw)
    heuristic = _combination(sc, 2, base)
    planner = LookaheadPlanner(decision="gateway", candidates="base", interval_s=0.5, horizon_s=2, **base)
    planned = planner.run(sc, 2)
    assert planner.decisions >= 39
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(planned.table, f), getattr(heuristic.table, f), err_msg=f)


def test_gateway_oracle_acts_on_the_cheapest_option_and_beats_its_base(monkeypatch):
    kw, base = GATEWAY_BASES["chat"]
    sc = _scenario("chat", horizon_s=20.0, **kw)
    log = _record_choices(monkeypatch)
    planner = LookaheadPlanner(decision="gateway", interval_s=1, horizon_s=3, **base)
    oracle = planner.run(sc, 1)
    setup = planner._gateway_setup(sc)
    # admission 0.25, 0.75 (0.5 is the base's k); no flow part; each of the 2 instances avoided
    assert len(planner._gateway_actions(setup)) == 4 and planner.decisions == len(log) >= 19
    for costs, chosen in log:
        assert costs.shape == (1, 5) and costs[0, chosen] == costs.min()
    assert sum(chosen != 0 for _, chosen in log) >= 3  # it departs from the base
    assert episode_cost(oracle, setup) < episode_cost(_combination(sc, 1, base), setup)


def _autoscaling_scenario():
    sc = g.make_scenario("bursty-codegen")
    sc.horizon_s = 300.0
    return sc


def test_autoscaling_base_option_is_the_base_scaler():
    sc = _autoscaling_scenario()
    heuristic, fleet = run_autoscaled(sc.simulator(1), "queue-aware:target=32", 15.0)
    for mode in ("oracle", "mpc"):
        planner = LookaheadPlanner(decision="autoscaling", candidates="base", interval_s=15, horizon_s=60,
                                   base_scaler="queue-aware:target=32", mode=mode, samples=2)
        planned = planner.run(sc, 1)
        assert planner.decisions == 20 and fleet.cold_starts >= 2  # the heuristic scales in the window
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(planned.table, f), getattr(heuristic.table, f), err_msg=f)
        assert (planner.fleet.gpu_seconds(), planner.fleet.cold_starts) == (fleet.gpu_seconds(), fleet.cold_starts)


def test_autoscaling_oracle_acts_on_the_cheapest_fleet(monkeypatch):
    sc = _autoscaling_scenario()
    log = _record_choices(monkeypatch)
    planner = LookaheadPlanner(decision="autoscaling", interval_s=15, horizon_s=90, base_scaler="queue-aware:target=32")
    planner.run(sc, 1)
    assert planner.decisions == len(log) == 20
    for costs, chosen in log:
        assert 2 <= costs.shape[1] <= 4 and costs[0, chosen] == costs.min()
    assert any(chosen != 0 for _, chosen in log)  # the oracle departs from the scaler somewhere


@pytest.mark.parametrize("kw, match", [
    ({"decision": "gateway", "base_admission": "legacy"}, "base_admission='legacy' is invalid"),
    ({"decision": "gateway", "base": "jsq", "base_admission": "always-admit"}, "lmetric"),
    ({"decision": "gateway", "base_flow": "none", "base_admission": "always-admit", "base": "lmetric"},
     "sheddable"),
])
def test_gateway_refuses_what_it_cannot_plan(kw, match):
    sc = _scenario("chatbot", horizon_s=5.0, qps=10) if match == "sheddable" else _scenario(horizon_s=5.0, qps=10)
    with pytest.raises(ConfigError, match=match):
        LookaheadPlanner(**kw).run(sc, 0)


def test_autoscaling_mpc_refuses_a_fault_schedule():
    sc = g.make_scenario("bursty-codegen", faults={"crashes": [{"instance": 0, "at_s": 2.0, "restart_s": 1.0}]})
    with pytest.raises(ConfigError, match="fault schedule"):
        LookaheadPlanner(decision="autoscaling", mode="mpc", interval_s=15).run(sc, 0)


def test_autoscaling_planner_runs_through_the_harness():
    table = evaluate("bursty-codegen", "scaler=queue-aware+label=scaler;gateway=lookahead:decision=autoscaling,"
                     "candidates=base,base_scaler=queue-aware,interval_s=15,horizon_s=60+label=plan", seeds=[1],
                     overrides={"duration_s": 120}, workers=1)
    rows = {r["policy"]: r for r in table.filter(class_="all")}
    assert rows["plan"]["ttft_mean"] == rows["scaler"]["ttft_mean"]
    assert rows["plan"]["gpu_seconds"] == rows["scaler"]["gpu_seconds"] > 0
    assert rows["plan"]["scaler"] == "lookahead"  # compare's table of autoscaled cells names it
    assert rows["plan"]["decisions"] >= 8 and rows["plan"]["decisions_per_s"] > 0


def test_a_forked_fleet_continues_as_the_real_one():
    """A fork taken while two cold starts are pending (``EngineState.forked``, its simulators
    ``bound_copies``, the books ``Fleet.forked``) carries the serving set and the pending
    starts: advanced to the same times, each copy reproduces the real run request for request."""
    from llmsched_gym.autoscaling import Fleet, advance_fleets

    sc = _autoscaling_scenario()
    sim = sc.simulator(1)
    fleet = Fleet(sim, 1, 44.8)
    advance_fleets(sim.state, {sim.c: sim}, {sim.c: fleet}, {sim.c: 30.0})
    fleet.set_target(3)  # two cold starts, ready at 74.8 s
    advance_fleets(sim.state, {sim.c: sim}, {sim.c: fleet}, {sim.c: 50.0})
    copies = sim.state.forked(sim.c, 2)
    sims = dict(enumerate(sim.bound_copies(copies)))
    fleets = {j: fleet.forked(s) for j, s in sims.items()}
    assert [(s.serving, f.counts()["starting"]) for s, f in zip(sims.values(), fleets.values())] == [(1, 2)] * 2
    advance_fleets(copies, sims, fleets, dict.fromkeys(sims, 200.0))
    advance_fleets(sim.state, {sim.c: sim}, {sim.c: fleet}, {sim.c: 200.0})
    assert sim.serving == 3
    for j, copy_sim in sims.items():
        assert copy_sim.serving == 3 and fleets[j].gpu_seconds() == fleet.gpu_seconds()
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(copy_sim.table, f), getattr(sim.table, f), err_msg=f)
