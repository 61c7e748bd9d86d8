"""What gateway policies see (docs/architecture.md): signals, never the engine's ground truth.

A :class:`RouterView` is built by the simulator and handed to admission, usage-limit and
routing policies. Arrays are indexed by instance and are read-only for policies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass
class RequestInfo:
    """The request being admitted or routed, as the gateway knows it.

    ``output_tokens`` is the true length; routers that should not know it use
    ``expected_output_tokens`` (the workload's running mean) instead.
    """

    id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    expected_output_tokens: float
    priority: int
    hash_ids: np.ndarray
    hash_block_tokens: int
    prefix_group: int = -1
    session_id: int = -1

    def block_keys(self, block_tokens: int) -> np.ndarray:
        """Prefix-chained keys of the request's *full* blocks of ``block_tokens`` tokens.

        Two requests' keys agree on a leading run exactly when they share that many
        leading blocks of prompt (derived from the hash chain, whatever its block size).
        """
        n_full = self.input_tokens // block_tokens
        G = self.hash_block_tokens
        if G == 0 or len(self.hash_ids) == 0 or n_full == 0:
            # No prefix information: keys unique to this request.
            return -(self.id * 1_000_003 + np.arange(1, n_full + 1, dtype=np.int64))
        end_token = np.arange(1, n_full + 1, dtype=np.int64) * block_tokens  # exclusive
        unit = (end_token - 1) // G
        unit = np.minimum(unit, len(self.hash_ids) - 1)
        if G >= block_tokens:
            sub = ((end_token - 1) % G) // block_tokens
            return self.hash_ids[unit] * (G // block_tokens + 1) + sub
        return self.hash_ids[unit]


@dataclass
class RouterView:
    """The gateway's view of one cluster at time ``now``.

    Scraped metrics (refreshed every ``scrape_interval``; stale in between):
        waiting, running: queue and batch sizes per instance.
        kv_util: fraction of KV blocks in use (referenced) per instance, in [0, 1].
        metrics_age_s: seconds since each instance's metrics were scraped.
    Router-local counters (exact):
        in_flight: requests dispatched to the instance and not finished.
        queued_prefill_tokens: uncomputed prompt tokens dispatched to the instance
            (estimated at dispatch as input minus the precise prefix hit then).
    Other:
        saturation: llm-d utilization detector value (docs/architecture.md), from scraped metrics.
        prefix_hit_tokens: callable(request) -> int array of the request's cached prompt
            tokens on every instance (precise index).
        latency_model, engine: the step-time model and engine config of the instances,
            for simulation-based routers (predicted latency, PolyServe, Preble).
        rng: the gateway's seeded generator; policies draw all randomness from it.
    Gateway queues: ``band_priorities`` (band 0 highest), ``band_lengths``,
    ``band_oldest_wait_s``, and ``arrivals_since(t)``: arrivals per band after time ``t``.
    ``suggest(request)``: where the simulator's ``hint`` router would send the request now
    (``Simulator.suggest``; None without a hint).
    """

    now: float
    num_instances: int
    waiting: np.ndarray
    running: np.ndarray
    kv_util: np.ndarray
    metrics_age_s: np.ndarray
    in_flight: np.ndarray
    queued_prefill_tokens: np.ndarray
    saturation: float
    prefix_hit_tokens: Callable[[RequestInfo], np.ndarray]
    latency_model: object
    engine: object
    kv_blocks: np.ndarray
    rng: np.random.Generator
    band_priorities: tuple[int, ...] = ()
    band_lengths: np.ndarray | None = None
    band_oldest_wait_s: np.ndarray | None = None
    arrivals_since: Callable[[float], np.ndarray] | None = None
    suggest: Callable[[RequestInfo], int] | None = None
