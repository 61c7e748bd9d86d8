"""llm-d's saturation detectors and the probabilistic admitter's parameters, on
hand-computed cases (issue 17; llm-d-router saturationdetector/{utilization,concurrency},
requestcontrol/admitter/probabilisticadmitter)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import make_policy
from llmsched_gym.gateway.saturation import (
    SaturationConfig,
    endpoint_filter,
    pool_saturation,
    saturation_of_view,
)
from llmsched_gym.gateway.view import RequestInfo

W = np.array([0, 10, 2])          # waiting per instance
KV = np.array([0.4, 0.2, 0.96])   # KV utilization per instance


# ---------------------------------------------------------------- utilization
def test_utilization_default_is_the_mean_roofline_score():
    # max(0/5, .4/.8)=.5, max(10/5, .2/.8)=2, max(2/5, .96/.8)=1.2 -> mean 3.7/3
    assert pool_saturation(waiting=W, kv_util=KV) == pytest.approx(3.7 / 3)
    # exactly the expression the simulator has always used
    assert pool_saturation(waiting=W, kv_util=KV) == float(np.maximum(W / 5.0, KV / 0.8).mean())
    cfg = SaturationConfig(queue_depth_threshold=10, kv_cache_util_threshold=0.5)
    # max(0, .8)=.8, max(1, .4)=1, max(.2, 1.92)=1.92 -> 3.72/3
    assert pool_saturation(cfg, waiting=W, kv_util=KV) == pytest.approx(3.72 / 3)


def test_utilization_stale_metrics_count_as_saturated():
    # instance 1 (score 2) stale counts 1.0; instance 0 exactly at the threshold is fresh
    age = np.array([0.2, 0.25, 0.05])
    assert pool_saturation(waiting=W, kv_util=KV, metrics_age_s=age) == pytest.approx((0.5 + 1.0 + 1.2) / 3)
    # an idle but stale instance also counts 1.0
    assert pool_saturation(waiting=[0, 0], kv_util=[0.0, 0.0], metrics_age_s=[1.0, 0.0]) == pytest.approx(0.5)
    cfg = SaturationConfig(metrics_staleness_threshold_s=0.3)
    assert pool_saturation(cfg, waiting=W, kv_util=KV, metrics_age_s=age) == pytest.approx(3.7 / 3)
    assert SaturationConfig.from_dict({"metricsStalenessThreshold": "300ms"}) == cfg


def test_empty_pool_is_saturated():
    assert pool_saturation(waiting=np.zeros(0), kv_util=np.zeros(0)) == 1.0
    cc = SaturationConfig(kind="concurrency")
    assert pool_saturation(cc, in_flight=np.zeros(0)) == 1.0
    assert pool_saturation(SaturationConfig(kind="concurrency", concurrency_mode="hybrid"),
                           in_flight=np.zeros(0), in_flight_tokens=np.zeros(0)) == 1.0


def test_headroom_relaxes_the_routing_filter_not_the_pool_saturation():
    h = SaturationConfig(headroom=0.2)
    assert pool_saturation(h, waiting=W, kv_util=KV) == pool_saturation(waiting=W, kv_util=KV)
    w, kv = np.array([4, 5, 6, 0]), np.array([0.1, 0.1, 0.1, 0.9])
    # default: waiting < 5 and kv < 0.8
    np.testing.assert_array_equal(endpoint_filter(waiting=w, kv_util=kv), [True, False, False, False])
    # headroom 0.2: waiting < 6 and kv < 0.96
    np.testing.assert_array_equal(endpoint_filter(h, waiting=w, kv_util=kv), [True, True, False, True])
    # stale endpoints are filtered; if nothing is left the filter keeps everything (fail open)
    np.testing.assert_array_equal(endpoint_filter(h, waiting=w, kv_util=kv, metrics_age_s=[0.3, 0, 0, 0]),
                                  [False, True, False, True])
    np.testing.assert_array_equal(endpoint_filter(waiting=[9, 9], kv_util=[0, 0]), [True, True])


# ---------------------------------------------------------------- concurrency
def test_concurrency_detector_requests_tokens_hybrid():
    inflight, tokens = np.array([50, 150, 0]), np.array([200_000, 100_000, 900_000])
    req = SaturationConfig(kind="concurrency")
    assert pool_saturation(req, in_flight=inflight) == pytest.approx(200 / 300)  # maxConcurrency 100
    tok = SaturationConfig(kind="concurrency", concurrency_mode="tokens")
    assert pool_saturation(tok, in_flight_tokens=tokens) == pytest.approx(1.2e6 / 3e6)  # maxTokenConcurrency 1e6
    hyb = SaturationConfig(kind="concurrency", concurrency_mode="hybrid")
    # max(.5, .2)=.5, max(1.5, .1)=1.5, max(0, .9)=.9 -> 2.9/3
    assert pool_saturation(hyb, in_flight=inflight, in_flight_tokens=tokens) == pytest.approx(2.9 / 3)
    small = SaturationConfig(kind="concurrency", max_concurrency=10)
    assert pool_saturation(small, in_flight=[5, 15]) == pytest.approx(1.0)
    # scraped metrics and their age do not enter
    assert pool_saturation(req, in_flight=inflight, waiting=W, kv_util=KV, metrics_age_s=[9, 9, 9]) == \
        pytest.approx(200 / 300)


def test_concurrency_filter_limits_and_headroom():
    req = SaturationConfig(kind="concurrency", headroom=0.2)  # limit int(100 * 1.2) = 120
    np.testing.assert_array_equal(endpoint_filter(req, in_flight=[119, 120, 0]), [True, False, True])
    # no fail-open: every endpoint at its limit keeps none
    assert not endpoint_filter(SaturationConfig(kind="concurrency"), in_flight=[100, 200]).any()
    hyb = SaturationConfig(kind="concurrency", concurrency_mode="hybrid")
    np.testing.assert_array_equal(endpoint_filter(hyb, in_flight=[10, 10, 100], in_flight_tokens=[0, 10**6, 0]),
                                  [True, False, False])


# ---------------------------------------------------------------- config
def test_config_validation_and_llmd_names():
    cfg = SaturationConfig.from_dict({"kind": "concurrency", "maxConcurrency": 64, "headroom": 0.1,
                                      "concurrencyMode": "hybrid", "maxTokenConcurrency": 50000})
    assert (cfg.max_concurrency, cfg.concurrency_mode, cfg.max_token_concurrency, cfg.headroom) == (64, "hybrid", 50000, 0.1)
    assert SaturationConfig.from_dict(None) == SaturationConfig()
    assert SaturationConfig.from_dict(cfg.to_dict()) == cfg
    for bad, field in (({"kind": "queue"}, "kind"), ({"queueDepthThreshold": 0}, "queue_depth_threshold"),
                       ({"kvCacheUtilThreshold": 1.5}, "kv_cache_util_threshold"), ({"headroom": -0.1}, "headroom"),
                       ({"metricsStalenessThreshold": "soon"}, "metricsStalenessThreshold"),
                       ({"maxConcurrency": 0}, "max_concurrency"), ({"concurrencyMode": "bytes"}, "concurrency_mode"),
                       ({"maxTokens": 3}, "maxTokens")):
        with pytest.raises(ConfigError, match=field):
            SaturationConfig.from_dict(bad)


def test_saturation_of_view_reads_the_routers_arrays():
    view = SimpleNamespace(waiting=W, kv_util=KV, metrics_age_s=np.zeros(3), in_flight=np.array([50, 150, 0]),
                           queued_prefill_tokens=np.array([0, 0, 3 * 10**6]))
    assert saturation_of_view(None, view) == pytest.approx(3.7 / 3)
    hyb = SaturationConfig(kind="concurrency", concurrency_mode="hybrid")
    assert saturation_of_view(hyb, view) == pytest.approx((0.5 + 1.5 + 3.0) / 3)


# ---------------------------------------------------------------- probabilistic admitter
def _sheddable() -> RequestInfo:
    return RequestInfo(id=0, arrival_s=0.0, input_tokens=100, output_tokens=10, expected_output_tokens=10.0,
                       priority=-1, hash_ids=np.zeros(0, dtype=np.int64), hash_block_tokens=0)


def test_probabilistic_admitter_uses_its_own_thresholds():
    view = SimpleNamespace(waiting=np.array([10, 0]), kv_util=np.array([0.5, 0.1]), saturation=99.0,
                           rng=np.random.default_rng(0))
    default = make_policy("probabilistic")
    assert (default.power, default.k, default.queue_depth_threshold, default.kv_cache_util_threshold) == (5, 300, 5, 0.8)
    # max(2, .625)=2, max(0, .125)=.125 -> 1.0625 (not the gateway's view.saturation)
    assert default.saturation(view) == pytest.approx(1.0625)
    own = make_policy("probabilistic:queueDepthThreshold=10,kvCacheUtilThreshold=0.5,k=1,power=1")
    # max(1, 1)=1, max(0, .2)=.2 -> 0.6; p = min(1 * 0.6**1, 1)
    assert own.saturation(view) == pytest.approx(0.6)
    assert own.reject_probability(own.saturation(view)) == pytest.approx(0.6)
    # an empty pool admits (the plugin's safe default)
    empty = SimpleNamespace(waiting=np.zeros(0), kv_util=np.zeros(0), saturation=5.0, rng=np.random.default_rng(0))
    assert default.admit(_sheddable(), empty)


def test_probabilistic_admitter_default_matches_the_gateway_saturation():
    # Default thresholds: the admitter's saturation is the gateway's, bit for bit, so
    # runs with the default admitter are unchanged.
    import llmsched_gym
    from baselines.admission import ProbabilisticAdmission

    class Traced(ProbabilisticAdmission):  # runs in Python, so its calls can be observed
        pass                                # (the compiled admitter is checked by tests/golden)

    policy = Traced()
    seen = []
    real = policy.saturation
    policy.saturation = lambda view: seen.append((real(view), view.saturation)) or seen[-1][0]
    sc = llmsched_gym.make_scenario("codegen", qps=30, duration_s=10.0)
    sc.simulator(0, admission=policy).run()
    assert len(seen) > 100 and any(s > 0.2 for s, _ in seen)
    assert all(a == b for a, b in seen)


# ============================================================================ in the engine
def _sheddable_stream(n=200, rate=50.0):
    from llmsched_gym.workloads.workload import Workload

    t = np.arange(n) / rate
    return Workload(t, np.full(n, 200), np.full(n, 400), priority=np.where(np.arange(n) % 2, -1, 0))


def test_engine_stale_metrics_saturate_the_pool():
    """Scrapes every 1 s, metrics stale after 200 ms: between 0.2 s and 1 s after each scrape
    the pool counts as saturated (1.0), so ``legacy`` admission rejects every sheddable
    request arriving then, and only then."""
    from llmsched_gym import ClusterConfig, GatewayConfig, Simulator

    w = _sheddable_stream()
    cluster = ClusterConfig(instances=2, kv_blocks=5000, scrape_interval_s=1.0)
    sim = Simulator(w, cluster, GatewayConfig(router="round-robin", admission="legacy")).run()
    rejected = sim.table.outcome == 2
    phase = np.mod(w.arrival_s, 1.0)
    shed = w.priority < 0
    assert (rejected == (shed & (phase > 0.2 + 1e-9))).all()
    fresh = Simulator(w, cluster, GatewayConfig(router="round-robin", admission="legacy",
                                                saturation={"metricsStalenessThreshold": "2s"})).run()
    assert not (fresh.table.outcome == 2).any()  # light load, fresh metrics: nothing rejected


def test_engine_concurrency_detector_counts_in_flight_requests():
    """``concurrency`` with maxConcurrency 3 on 2 instances: saturation = in flight / 6, so
    ``legacy`` admission rejects a sheddable request exactly when 6 or more are in flight."""
    from llmsched_gym import ClusterConfig, GatewayConfig, Simulator

    w = _sheddable_stream(rate=200.0)
    gw = GatewayConfig(router="round-robin", admission="legacy",
                       saturation={"kind": "concurrency", "maxConcurrency": 3})
    sim = Simulator(w, ClusterConfig(instances=2, kv_blocks=5000), gw).run()
    t = sim.table
    rejected = np.flatnonzero(t.outcome == 2)
    assert len(rejected) > 0 and (w.priority[rejected] < 0).all()
    admitted = np.flatnonzero(t.outcome != 2)
    for r in rejected[:20].tolist() + admitted[:40].tolist():
        a = w.arrival_s[r]
        # in flight when r arrived: dispatched before it and not yet finished
        busy = int(((t.dispatch_t < a) & ~(t.finish_t <= a)).sum())
        if w.priority[r] < 0:
            assert (busy >= 6) == (t.outcome[r] == 2), (r, busy)
