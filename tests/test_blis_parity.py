"""Parity with BLIS on identical requests (issue 7; docs/validation.md).

BLIS's reference runs (traces/SOURCES.md) are replayed with BLIS's configuration through
:mod:`llmsched_gym.evaluation.blis` (as ``benchmarks/validation/blis_parity.py`` does). The first 1,500 requests are compared with BLIS's
own values for them. They cannot be simulated alone: requests that arrive while they
run join their batches and slow their steps (replaying only the first 1,500 gives E2E
~10% too short), so ``replay`` also simulates every later request that arrives before
the last of the 1,500 finishes in BLIS; nothing arriving after that can affect them.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import trace_path

from llmsched_gym.engine import EngineConfig
from llmsched_gym.engine.latency import make_latency_model
from llmsched_gym.evaluation.blis import blis_cluster, compare, replay
from llmsched_gym.simulator import GatewayConfig, Simulator
from llmsched_gym.workloads.workload import Workload

SLICE = 1500


def _lone_request(latency_params: dict) -> Simulator:
    w = Workload(arrival_s=np.array([0.0]), input_tokens=np.array([2048]), output_tokens=np.array([1]))
    return Simulator(w, blis_cluster("blis-trained-physics", latency_params, instances=1),
                     GatewayConfig(router="round-robin")).run()


def test_blis_engine_preset():
    e = EngineConfig.blis()
    assert (e.block_size, e.max_num_seqs, e.max_num_batched_tokens) == (16, 256, 2048)
    assert EngineConfig.blis(max_num_seqs=64).max_num_seqs == 64
    assert blis_cluster("blis-trained-physics").total_blocks() == 15_909


def test_lone_request_ttft_through_the_simulator():
    """docs/architecture.md: a0 + one 2,048-token prefill iteration + a2 = 36.88 ms."""
    sim = _lone_request({})
    ttft_ms = (sim.table.first_token_t[0] - sim.table.arrival[0]) * 1e3
    assert ttft_ms == pytest.approx(15.5632 + 21.274 + 0.04591, abs=0.01)
    assert ttft_ms == pytest.approx(36.88, abs=0.01)
    # BLIS's integer clock: int(a0) + int(step) + int(a2).
    step = make_latency_model("blis-trained-physics").step_time_us([2048], [2048], 0, 0)
    exact = _lone_request({"integer_us": True})
    assert round((exact.table.first_token_t[0] - exact.table.arrival[0]) * 1e6) == 15_563 + int(step) + 45


def test_trained_physics_slice_within_tolerance():
    """Default (fractional) trained physics vs BLIS on the first 1,500 requests."""
    _, ours, blis = replay(trace_path("blis", "ref5000.csv"), "blis-trained-physics", limit=SLICE)
    c = compare(ours, blis)
    for k in ("ttft", "e2e"):
        for stat, tol in (("mean", 0.05), ("p50", 0.05), ("p99", 0.10)):
            assert abs(c[k][stat][2]) < tol, (k, stat, c[k][stat])
    assert c["e2e"]["median_rel_err"] < 0.05
    assert c["ttft"]["median_rel_err"] < 0.05


@pytest.mark.parametrize("trace, kind", [("ref5000.csv", "blis-trained-physics"),
                                         ("ref5000_roofline.csv", "blis-roofline")])
def test_integer_us_reproduces_blis_to_the_microsecond(trace, kind):
    """With BLIS's integer-microsecond clock every request matches BLIS exactly."""
    _, ours, blis = replay(trace_path("blis", trace), kind, {"integer_us": True}, limit=SLICE)
    for k in ("ttft", "e2e"):
        np.testing.assert_allclose(ours[k], blis[k], rtol=0, atol=1e-6, err_msg=k)  # ms, i.e. < 1 ns


def test_our_roofline_differs_from_blis_for_known_reasons():
    """BLIS's roofline counts 2 MLP matrices and no lm_head: ~27% fewer FLOPs per token."""
    ours, blis = make_latency_model("roofline"), make_latency_model("blis-roofline")
    ratio = ours.step_time_us([512], [512], 0, 0) / blis.step_time_us([512], [512], 0, 0)
    assert 1.3 < ratio < 1.45
    # BLIS's lone-request TTFTs of the roofline run (arrival -> first chunk, us).
    for n, ttft_us in ((185, 8047), (478, 20924), (321, 14004), (312, 13609)):
        assert int(blis.step_time_us([n], [n], 0, 0)) == ttft_us
