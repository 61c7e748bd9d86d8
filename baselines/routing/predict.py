"""Per-instance latency estimates from the step-time model (``view.latency_model``).

Used by the simulation-based routers (llm-d predicted latency, Preble, PolyServe). They
see only the router's signals: the scraped running batch and KV utilization, and the
router-local backlog of uncomputed prefill tokens. Engine limits come from
``view.engine`` (``max_num_batched_tokens``, ``block_size``).
"""

from __future__ import annotations

import numpy as np

from llmsched_gym.gateway.view import RequestInfo, RouterView

_NO_PREFILL = np.zeros(0, dtype=np.int64)


def engine_block_size(view: RouterView) -> int:
    """KV block size of the instances, in tokens."""
    return int(view.engine.block_size)


def kv_tokens(view: RouterView) -> np.ndarray:
    """Tokens held in KV per instance (scraped utilization x capacity): the decode context."""
    return view.kv_util * view.kv_blocks * engine_block_size(view)


def prefill_time_s(view: RouterView, tokens: np.ndarray, prompt_len: int) -> np.ndarray:
    """Seconds to prefill ``tokens[i]`` tokens on each instance next to its running decodes.

    Each iteration's token budget first serves one token per running request (vLLM v1
    order), the rest goes to prefill chunks; the prompt length of every chunk is taken as
    ``prompt_len`` since the router does not know the queued prompts.
    """
    model = view.latency_model
    budget = int(view.engine.max_num_batched_tokens)
    n_decode = view.running.astype(np.int64)
    context = kv_tokens(view)
    out = np.zeros(len(tokens))
    for i, t in enumerate(np.asarray(tokens, dtype=np.int64).tolist()):
        if t <= 0:
            continue
        chunk = max(1, budget - int(n_decode[i]))
        full, rest = divmod(t, chunk)
        ctx = int(context[i])
        us = 0.0
        if full:
            us += full * model.step_time_us(np.array([chunk]), np.array([prompt_len]), int(n_decode[i]), ctx)
        if rest:
            us += model.step_time_us(np.array([rest]), np.array([prompt_len]), int(n_decode[i]), ctx)
        out[i] = us / 1e6
    return out


def ttft_s(request: RequestInfo, view: RouterView, hits: np.ndarray) -> np.ndarray:
    """Predicted TTFT per instance: drain the visible prefill backlog, then this request's
    uncached prompt (``input - hit``)."""
    uncached = np.maximum(0, request.input_tokens - hits)
    return prefill_time_s(view, view.queued_prefill_tokens + uncached, request.input_tokens)


def decode_step_s(view: RouterView, batch: int, context: int) -> float:
    """Seconds of one pure-decode iteration of ``batch`` requests over ``context`` tokens."""
    return view.latency_model.step_time_us(_NO_PREFILL, _NO_PREFILL, int(batch), int(context)) / 1e6


def tpot_s(request: RequestInfo, view: RouterView) -> np.ndarray:
    """Predicted TPOT per instance: one decode iteration with every in-flight request and
    this one in the batch, over the KV context plus this request's prompt."""
    context = kv_tokens(view) + request.input_tokens
    batch = view.in_flight + 1
    return np.array([decode_step_s(view, b, c) for b, c in zip(batch.tolist(), context.tolist())])
