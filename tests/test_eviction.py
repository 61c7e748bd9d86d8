"""llm-d's demand-driven in-flight eviction (llmsched_gym.gateway.eviction), on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_accounting

from llmsched_gym.engine import EngineConfig
from llmsched_gym.engine.requests import EVICTED, FINISHED
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.gateway.epp import epp_config_from_dict, to_epp_config
from llmsched_gym.gateway.eviction import EvictionConfig
from llmsched_gym.gateway.policy import RoutingPolicy
from llmsched_gym.scenarios import make_scenario, scenario_from_dict
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.workloads.workload import Workload

CLUSTER = dict(instances=1, latency_model="linear", kv_blocks=4000, scrape_interval_s=0.05)


def _run(workload, eviction, flow="static-usage-limit", saturation=None, **cluster):
    gw = GatewayConfig(router="round-robin", flow_control=flow, eviction=eviction, saturation=saturation)
    sim = Simulator(workload, ClusterConfig(**{**CLUSTER, **cluster}), gw, seed=1).run()
    assert_accounting(sim)
    return sim


def test_a_blocked_critical_request_revokes_the_newest_sheddable_one():
    # Concurrency detector, maxConcurrency 2: s = in-flight / 2. Two sheddable requests
    # (dispatched at 0 and 0.1 s) make s = 1; the critical one arriving at 1 s meets the
    # static ceiling 1.0 (head-of-line blocking). credit = s / in_flight = 0.5, deficit
    # s - ceiling = 0, so n = max(1, ceil(0 / 0.5)) = 1: the most recently dispatched
    # sheddable request is revoked at 1 s, s drops to 0.5, and the next 1 ms cycle
    # dispatches the critical request.
    w = Workload([0.0, 0.1, 1.0], [100, 100, 100], [2000, 2000, 10], priority=[-1, -1, 0])
    sat = {"kind": "concurrency", "max_concurrency": 2}
    off = _run(w, None, saturation=sat)
    assert (off.table.outcome == FINISHED).all()
    on = _run(w, True, saturation=sat)
    t = on.table
    assert list(t.outcome) == [FINISHED, EVICTED, FINISHED]
    assert t.end_t[1] == 1.0
    assert t.first_token_t[1] < 1.0  # it was decoding: its first token stands, it never finishes
    assert np.isnan(t.finish_t[1]) and 1 < t.generated[1] < 2000
    assert t.dispatch_t[2] == pytest.approx(1.001)
    assert off.table.dispatch_t[2] > 20  # without eviction it waited for a sheddable request to finish
    s = summarize(on)
    assert s["outcomes"]["evicted"] == 1 and s["classes"]["sheddable"]["evicted"] == 1
    assert s["classes"]["sheddable"]["slo_attainment"] <= 0.5  # an evicted request misses its SLO


def _pile_up(n_shed=20):
    """``n_shed`` sheddable requests at t = 0 on one instance running one at a time, then a
    critical request at 1 s: the 50 ms scrape lets all of them through the static ceiling
    (the saturation is 0 until the scrape at 50 ms), and from then s = waiting / 5."""
    arrivals = np.r_[np.zeros(n_shed), 1.0]
    return Workload(arrivals, np.full(n_shed + 1, 64), np.r_[np.full(n_shed, 1000), 8],
                    priority=np.r_[np.full(n_shed, -1), 0])


@pytest.mark.parametrize("cap, decisions", [
    # At 1 s: 1 running + 19 waiting, s = 19 / 5 = 3.8, credit 3.8 / 20, n = ceil(2.8 / 0.19) = 15, capped at
    # 2 per decision, one decision per 0.5 s (the confirmation grace) while s >= 1: 19 -> 17 -> ... -> 5
    # waiting (decisions at 1.0 .. 4.0 s), then s = 5 / 5 = 1.0, credit 1 / 6, n = max(1, 0) = 1 at 4.5 s.
    (2, [(1.0, 2), (1.5, 2), (2.0, 2), (2.5, 2), (3.0, 2), (3.5, 2), (4.0, 2), (4.5, 1)]),
    # Cap 5: s 3.8 -> n 15 -> 5; at 1.5 s s = 14 / 5 = 2.8, credit 2.8 / 15, n = ceil(1.8 / 0.187) = 10 -> 5;
    # at 2.0 s s = 9 / 5 = 1.8, credit 0.18, n = ceil(0.8 / 0.18) = 5: 4 waiting left, s = 0.8.
    (5, [(1.0, 5), (1.5, 5), (2.0, 5)]),
])
def test_sizing_pacing_and_victim_order(cap, decisions):
    w = _pile_up()
    sim = _run(w, {"max_revocations_per_decision": cap}, engine=EngineConfig(max_num_seqs=1))
    t = sim.table
    evicted = np.flatnonzero(t.outcome == EVICTED)
    times, counts = np.unique(t.end_t[evicted], return_counts=True)
    # each decision at the first 1 ms dispatch cycle at or after the grace ends
    assert list(counts) == [n for _, n in decisions]
    assert np.all((times >= [d for d, _ in decisions]) & (times <= np.add([d for d, _ in decisions], 0.0011)))
    # newest dispatch first: the last 15 sheddable requests, in reverse dispatch order
    assert list(evicted) == list(range(5, 20))
    by_dispatch = evicted[np.argsort(t.dispatch_t[evicted])]
    assert np.all(np.diff(t.end_t[by_dispatch]) <= 0)  # a later dispatch is never revoked later
    # the critical request is dispatched once a scrape shows s < 1 (at most 50 ms after the last decision)
    assert times[-1] < t.dispatch_t[20] <= times[-1] + 0.05 + 0.0011
    s = summarize(sim)["classes"]["sheddable"]
    assert s["evicted"] == 15 and s["ttft_censored"] == 15  # revoked while waiting: TTFT counted at their wait
    assert s["slo_attainment"] <= 5 / 20


def test_never_revokes_critical_or_same_band_requests():
    # Only critical requests: the blocked band has nothing below it to revoke.
    w = Workload(np.zeros(12), np.full(12, 64), np.full(12, 500), priority=np.zeros(12, int))
    one_at_a_time = EngineConfig(max_num_seqs=1)
    sim = _run(w, True, engine=one_at_a_time)
    assert (sim.table.outcome == FINISHED).all()
    # A blocked sheddable band does not revoke sheddable requests (victims must rank strictly below it).
    w = _pile_up()
    w = Workload(w.arrival_s, w.input_tokens, w.output_tokens, priority=np.full(len(w), -1))
    sim = _run(w, True, engine=one_at_a_time)
    assert not (sim.table.outcome == EVICTED).any()


def test_eviction_off_changes_nothing():
    sc = make_scenario("reasoning", paper_qps=0.7, duration_s=300)
    a = sc.simulator(0, flow_control="soft-reflective-ceiling").run()
    b = sc.simulator(0, flow_control="soft-reflective-ceiling", eviction=False).run()
    for f in ("outcome", "dispatch_t", "first_token_t", "finish_t"):
        np.testing.assert_array_equal(getattr(a.table, f), getattr(b.table, f))
    c = make_scenario("reasoning", paper_qps=0.7, duration_s=300, eviction=True).simulator(
        0, flow_control="soft-reflective-ceiling").run()
    assert_accounting(c)
    assert (c.table.outcome == EVICTED).sum() > 0
    assert (c.table.priority[c.table.outcome == EVICTED] < 0).all()


def test_configuration_and_errors():
    assert EvictionConfig.from_value(True) == EvictionConfig(2, 0.5)
    assert EvictionConfig.from_value(False) is None and EvictionConfig.from_value(None) is None
    with pytest.raises(ConfigError, match="needs flow control"):
        GatewayConfig(router="jsq", eviction=True)
    with pytest.raises(ConfigError, match="max_revocations_per_decision=0"):
        GatewayConfig(flow_control="soft-reflective-ceiling", eviction={"max_revocations_per_decision": 0})
    with pytest.raises(ConfigError, match="confirmation_grace_s"):
        EvictionConfig(2, -1.0)
    with pytest.raises(ConfigError, match="unknown field 'grace'"):
        EvictionConfig.from_value({"grace": 1})
    with pytest.raises(ConfigError, match="true, false or a mapping"):
        EvictionConfig.from_value("yes")
    with pytest.raises(ConfigError, match="P/D"):
        make_scenario("pd-longprompt", eviction=True).simulator(0, flow_control="soft-reflective-ceiling")
    d = make_scenario("codegen").to_dict()
    d["gateway"]["eviction"] = {"max_revocations_per_decision": 3}
    sc = scenario_from_dict(d)
    assert sc.gateway.eviction == EvictionConfig(3, 0.5)
    d["gateway"]["eviction"] = {"max_revocations": 3}
    with pytest.raises(ConfigError, match="gateway.eviction: unknown field 'max_revocations'"):
        scenario_from_dict(d)


def test_endpoint_picker_config_enable_eviction_round_trip():
    epp = to_epp_config("llm-d+soft-reflective-ceiling", eviction=True)
    assert epp["flowControl"]["enableEviction"] is True
    cfg = epp_config_from_dict(epp)
    assert cfg.eviction and cfg.gateway_kwargs()["eviction"] is True
    assert not epp_config_from_dict(to_epp_config("llm-d+soft-reflective-ceiling")).eviction
    with pytest.raises(ConfigError, match="eviction apply to flow control"):
        to_epp_config("llm-d+admission=legacy", eviction=True)


class _Counting(RoutingPolicy):
    """A Python router that keeps its own in-flight books from the dispatch / finish hooks."""

    name = "counting"

    def reset(self, num_instances, rng):
        self.books = np.zeros(num_instances, int)

    def route(self, request, view):
        return int(np.argmin(self.books))

    def on_dispatch(self, request, instance, view):
        self.books[instance] += 1

    def on_finish(self, request_id, instance):
        self.books[instance] -= 1


def test_a_python_router_hears_of_evictions():
    router = _Counting()
    w = _pile_up()
    gw = GatewayConfig(router=router, flow_control="static-usage-limit", eviction=True)
    sim = Simulator(w, ClusterConfig(**{**CLUSTER, "instances": 2}, engine=EngineConfig(max_num_seqs=1)), gw,
                    seed=1).run()
    assert (sim.table.outcome == EVICTED).sum() > 0
    assert (router.books == 0).all()  # every dispatched request, evicted ones too, left its instance


def test_compare_and_run_take_eviction(capsys, tmp_path):
    from llmsched_gym.cli import main

    assert main(["compare", "--scenario", "reasoning", "--paper-qps", "0.7", "--policies", "soft-reflective-ceiling",
                 "--seeds", "1", "--duration", "300", "--eviction", "--no-plots", "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert any("evicted" in part.split("\n┡")[0] for part in out.split("┏"))  # in the header of a table's part
    assert main(["run", "--scenario", "reasoning", "--paper-qps", "0.7", "--flow-control", "soft-reflective-ceiling",
                 "--eviction", "--horizon", "300"]) == 0
    assert "evicted" in capsys.readouterr().out
    assert main(["run", "--scenario", "reasoning", "--flow-control", "none", "--eviction", "--horizon", "10"]) == 2
    assert "gateway.eviction needs flow control" in capsys.readouterr().err
