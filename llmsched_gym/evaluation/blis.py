"""Parity with BLIS on identical requests (docs/validation.md): BLIS's reference runs
(``traces/blis/ref5000*.csv``) replayed with BLIS's configuration, and their TTFT and E2E
compared with BLIS's own, per request and as distributions.

BLIS's ``last_chunk_time_us`` is arrival + FirstTokenTime + sum(ITL): it leaves out the
trained-physics per-request completion overhead a1 (777 us) that BLIS adds to its own E2E
metric and that our recorded finish time carries, so "E2E" here is our finish time minus
a1, the time of the last token, like the column it is compared with.
``benchmarks/validation/blis_parity.py`` prints the tables and writes docs/validation.md;
``tests/test_blis_parity.py`` checks the first 1,500 requests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..engine import EngineConfig
from ..simulator import ClusterConfig, GatewayConfig, Simulator
from ..workloads.traces import load_blis_trace

PERCENTILES = (50, 90, 99)


def blis_cluster(latency_model: str, latency_params: dict | None = None, instances: int = 4) -> ClusterConfig:
    """The cluster of BLIS's reference runs: Qwen3-14B on H100, TP1, BLIS engine defaults."""
    return ClusterConfig(instances=instances, hardware="H100", model="qwen3-14b", tp=1,
                         latency_model=latency_model, latency_params=dict(latency_params or {}),
                         gpu_memory_utilization=0.9, engine=EngineConfig.blis(), scrape_interval_s=0.0)


def causal_prefix(arrival_us: np.ndarray, finish_us: np.ndarray, n: int) -> int:
    """How many requests must be simulated for the first ``n`` to see exactly what they saw
    in BLIS: every request that arrives before the last of them finishes. A later request
    cannot touch them, but one that arrives while they run joins their batches and slows
    their steps, so a bare prefix of n requests would be too fast."""
    end = np.nanmax(finish_us[:n])
    return int(np.searchsorted(arrival_us, end, side="right"))


def replay(trace_path: Path, latency_model: str, latency_params: dict | None = None, limit: int | None = None):
    """Run the BLIS file's requests with BLIS's configuration.

    ``limit`` = n compares only the first n requests, simulating those plus every later
    request that arrives before the last of them finishes in BLIS (:func:`causal_prefix`).
    Returns (sim, ours, blis): ``ours`` and ``blis`` map "ttft" and "e2e" to per-request
    arrays in ms for the compared requests, in request order, "e2e" being the time of the
    last token (see the module doc).
    """
    tr = load_blis_trace(trace_path)
    w = tr.workload
    n = len(w) if limit is None else min(limit, len(w))
    m = causal_prefix(w.arrival_s * 1e6, tr.finish_us, n) if n < len(w) else n
    if m < len(w):
        w = w.subset(np.arange(m))
    sim = Simulator(w, blis_cluster(latency_model, latency_params),
                    GatewayConfig(router="round-robin", flow_control=None)).run()
    T = sim.table
    a1_s = float(getattr(sim.latency, "a1", 0.0)) * 1e-6  # BLIS's trace columns leave it out
    arrival_ms = w.arrival_s[:n] * 1e3
    finish = T.finish_t[:n] - np.where(T.output[:n] > 0, a1_s, 0.0)
    ours = {"ttft": T.first_token_t[:n] * 1e3 - arrival_ms, "e2e": finish * 1e3 - arrival_ms}
    blis = {"ttft": tr.first_token_us[:n] / 1e3 - arrival_ms,
            "e2e": tr.finish_us[:n] / 1e3 - arrival_ms}
    return sim, ours, blis


def compare(ours: dict, blis: dict) -> dict:
    """Distribution and per-request comparison of two runs (times in ms)."""
    out = {}
    for k in ("ttft", "e2e"):
        a, b = ours[k], blis[k]
        stats = {"mean": (a.mean(), b.mean())}
        for q in PERCENTILES:
            stats[f"p{q}"] = (np.percentile(a, q), np.percentile(b, q))
        out[k] = {s: (x, y, (x - y) / y) for s, (x, y) in stats.items()}
        err = np.abs(a - b)
        out[k]["median_rel_err"] = float(np.median(err / b))
        out[k]["exact_1us"] = float(np.mean(err <= 1e-3 + 1e-9))  # within one microsecond
        out[k]["max_abs_ms"] = float(err.max())
    return out


def first_divergences(ours: dict, blis: dict, k: int = 5, tol_ms: float = 1e-3) -> list[int]:
    """The first ``k`` requests whose TTFT or E2E differ from BLIS's by more than ``tol_ms``."""
    d = np.abs(ours["ttft"] - blis["ttft"]) + np.abs(ours["e2e"] - blis["e2e"])
    return np.flatnonzero(d > tol_ms)[:k].tolist()
