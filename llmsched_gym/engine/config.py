"""Limits of one serving instance (vLLM's scheduler settings)."""

from __future__ import annotations

from typing import Literal

from ..validation import MAX_TOKENS, config_dataclass, ranged

#: Eviction orders, by their kernel code (see ``EngineConfig.eviction``).
EVICTION_ORDERS = ("cached-last", "vllm")
#: Preemption modes, by their kernel code (see ``EngineConfig.preemption``).
PREEMPTION_MODES = ("recompute", "restart")


@config_dataclass("engine")
class EngineConfig:
    """Limits of one instance (vLLM defaults; BLIS uses max_num_batched_tokens=2048).

    Args:
        max_num_seqs: most requests in a running batch.
        max_num_batched_tokens: token budget of one iteration.
        block_size: tokens per KV block.
        max_model_len: longest request (input + output) accepted; None = KV capacity.
        event_skipping: plan decode-only iterations in segments (exact; off only to
            measure its speed-up).
        eviction: which free KV blocks an allocation takes first. ``"vllm"`` (default):
            vLLM v1's one free-block queue in release order (a request's blocks released
            tail first), the oldest taken whether or not it still caches a prefix.
            ``"cached-last"``: never-cached free blocks first, cached units only when
            those run out (least recently released first); the engine's order before
            0.2, which keeps prefixes longer than vLLM does (docs/validation.md).
        preemption: what a preempted request keeps. ``"recompute"`` (vLLM, default): its
            generated tokens; it later recomputes prompt + generated tokens and its first
            token stays where it was. ``"restart"`` (BLIS): nothing; it re-prefills its
            prompt, regenerates its output, and its TTFT counts from the last re-prefill.
        async_scheduling: vLLM's async scheduling (on by default in vLLM >= 0.14): the
            scheduler plans iteration N+1 while N runs, so a request arriving during N
            first runs in N+2 and each of its outputs reaches the client one iteration
            later. Modelled as that lag on the reported first-token and finish times (the
            batch is formed as without it). False (default): synchronous, as BLIS.
    """

    max_num_seqs: ranged(int, ge=1, le=4096) = 256
    max_num_batched_tokens: ranged(int, ge=1, le=2**20) = 8192
    block_size: ranged(int, ge=1, le=4096) = 16
    max_model_len: ranged(int, ge=1, le=MAX_TOKENS) | None = None
    event_skipping: bool = True
    eviction: Literal[EVICTION_ORDERS] = "vllm"
    preemption: Literal[PREEMPTION_MODES] = "recompute"
    async_scheduling: bool = False

    @classmethod
    def blis(cls, **overrides) -> "EngineConfig":
        """BLIS's engine defaults (docs/architecture.md): 16-token blocks, ``max_num_seqs`` 256,
        ``max_num_batched_tokens`` 2048, no long-prefill threshold (a prompt is chunked
        only by the token budget). KV capacity comes from ``ClusterConfig``
        (``gpu_memory_utilization`` 0.9: 15,909 blocks for Qwen3-14B on one H100)."""
        return cls(**{"max_num_seqs": 256, "max_num_batched_tokens": 2048, "block_size": 16, **overrides})

    # BLIS parity also wants preemption="restart" (BLIS discards a preempted request's
    # output); it is left to the caller so that parity runs without preemption are
    # unchanged.
