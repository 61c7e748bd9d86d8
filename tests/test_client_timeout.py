"""Client timeouts: a request its client gives up on is aborted, frees its KV and ends timed_out."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.engine.requests import FINISHED, TIMED_OUT
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.workloads.workload import Workload


def _overloaded(n=800, seed=0) -> Workload:  # ~80 req/s on one 7B instance: a queue builds
    rng = np.random.default_rng(seed)
    return Workload(np.sort(rng.uniform(0, 10, n)), rng.integers(200, 2000, n), rng.integers(100, 600, n))


def test_timeouts_abort_free_kv_and_every_arrival_has_one_outcome():
    w = _overloaded()
    cl = ClusterConfig(instances=1, model="qwen2.5-7b", latency_model="vllm-calibrated", kv_blocks=3000)
    base = Simulator(w, cl).run()
    sim = Simulator(w, cl, GatewayConfig(client_timeout_s=5.0)).run()
    t = sim.table
    assert (summarize(base)["outcomes"]["finished"] == len(w)) and (base.table.finish_t - w.arrival_s).max() > 5.0
    counts = t.counts()
    assert sum(counts.values()) == len(w) and counts["in_flight"] == 0
    assert counts["timed_out"] > 0 and counts["finished"] + counts["timed_out"] == len(w)
    fin, out = t.outcome == FINISHED, t.outcome == TIMED_OUT
    assert (t.finish_t[fin] - w.arrival_s[fin]).max() <= 5.0 + 1e-9  # nobody finishes after giving up
    assert np.allclose(t.end_t[out], w.arrival_s[out] + 5.0)  # ends exactly at its deadline
    assert np.isnan(t.finish_t[out]).all()
    assert sim.kv_used().sum() == 0 and base.kv_used().sum() == 0  # every aborted request's KV came back
    s = summarize(sim)
    assert s["outcomes"]["timed_out"] == counts["timed_out"] and s["classes"]["all"]["ttft_censored"] >= 0
    # fewer requests to serve: the ones that finish wait less than without timeouts
    assert np.median(t.finish_t[fin] - w.arrival_s[fin]) < np.median(base.table.finish_t - w.arrival_s)


def test_no_timeout_is_bit_identical():
    w = _overloaded(200, seed=1)
    cl = ClusterConfig(instances=2, model="qwen2.5-7b", latency_model="vllm-calibrated")
    a, b = Simulator(w, cl).run().table, Simulator(w, cl, GatewayConfig(client_timeout_s=1e6)).run().table
    assert np.array_equal(a.finish_t, b.finish_t) and np.array_equal(a.first_token_t, b.first_token_t)


@pytest.mark.parametrize("gw, match", [
    ({"client_timeout_s": -1.0}, "client_timeout_s=-1.0 is invalid"),
    ({"client_timeout_s": 5.0, "flow_control": "static-usage-limit"}, "with flow control is not simulated"),
])
def test_bad_timeouts(gw, match):
    with pytest.raises(ConfigError, match=match) as e:
        Simulator(_overloaded(10), ClusterConfig(instances=1), GatewayConfig(**gw))
    assert "\n" not in str(e.value)
