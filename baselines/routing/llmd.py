"""llm-d endpoint-picker routers: weighted scorers and predicted latency."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import NonNegativeTokens, Tokens, Weight

from .pick import argmax_random, argmin_lowest
from .predict import ttft_s
from .prefix_index import BlockLRUIndex


@register_policy("llm-d")
class LLMDRouter(RoutingPolicy):
    """llm-d weighted scorers: ``total = sum_k w_k clamp(score_k, 0, 1)``, max wins.

    Scores per instance: queue ``(maxQ - q)/(maxQ - minQ)`` with ``q`` the scraped waiting
    queue (1 for all when all are equal); kv-utilization ``1 - kv_util``; prefix = leading
    matched blocks / request blocks from the *approximate* index (blocks of
    ``block_tokens`` tokens the router sent to each instance, LRU of ``lru_blocks`` per
    instance; 0 for a request shorter than one block). Ties are broken at random.

    Args:
        queue_weight, kv_weight, prefix_weight: scorer weights (2, 2, 3).
        block_tokens: tokens per index block (64).
        lru_blocks: blocks remembered per instance (31,250).
        max_prefix_blocks: match and index at most this many leading blocks (llm-d's
            ``maxPrefixBlocksToMatch``, or ``maxPrefixTokensToMatch / block``); 0, the
            default, takes the whole prompt.
    """

    name = "llm-d"
    description = "llm-d weighted scorers: queue 2, kv-utilization 2, approximate prefix 3; random ties."

    def __init__(self, queue_weight: Weight = 2.0, kv_weight: Weight = 2.0, prefix_weight: Weight = 3.0,
                 block_tokens: Tokens = 64, lru_blocks: Tokens = 31_250, max_prefix_blocks: NonNegativeTokens = 0):
        self.weights = np.array([queue_weight, kv_weight, prefix_weight], dtype=np.float64)
        self.block_tokens = int(block_tokens)
        self.lru_blocks = int(lru_blocks)
        self.max_prefix_blocks = int(max_prefix_blocks)
        self._index = BlockLRUIndex(0, self.lru_blocks)

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._index = BlockLRUIndex(num_instances, self.lru_blocks)

    def scorer_values(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Clamped (queue, kv-utilization, prefix) scores, shape ``(3, instances)``."""
        q = view.waiting.astype(np.float64)
        span = q.max() - q.min()
        queue = np.ones(len(q)) if span == 0 else (q.max() - q) / span
        kv = 1.0 - view.kv_util
        keys = self._keys(request)
        prefix = self._index.leading_matches(keys) / len(keys) if len(keys) else np.zeros(len(q))
        return np.clip(np.vstack([queue, kv, prefix]), 0.0, 1.0)

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Weighted total per instance (higher is better), summed term by term in scorer
        order: a BLAS product would round differently on different CPUs."""
        s = self.scorer_values(request, view)
        w = self.weights
        return w[0] * s[0] + w[1] * s[1] + w[2] * s[2]

    def route(self, request: RequestInfo, view: RouterView) -> int:
        return argmax_random(self.scores(request, view), view.rng)

    def _keys(self, request: RequestInfo) -> np.ndarray:
        keys = request.block_keys(self.block_tokens)
        return keys[: self.max_prefix_blocks] if self.max_prefix_blocks else keys

    def on_dispatch(self, request: RequestInfo, instance: int, view: RouterView) -> None:
        self._index.insert(instance, self._keys(request))

    def compiled_form(self):  # the index lives in the engine state (engine/units.py block keys)
        return api.CompiledForm(api.ROUTER_LLMD, (*self.weights, self.lru_blocks),
                                {"router_block_keys": (self.block_tokens, self.max_prefix_blocks)})


@register_policy("llm-d-predicted-latency")
class LLMDPredictedLatencyRouter(RoutingPolicy):
    """Simulation-based: predict the request's TTFT on every instance with the step-time
    model (drain the router-visible prefill backlog next to the scraped decode batch, then
    prefill the request's uncached prompt given the precise prefix hit) and pick the
    minimum; ties go to the lowest index."""

    name = "llm-d-predicted-latency"
    description = "Min TTFT predicted by the step-time model over the visible backlog; lowest-index ties."

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Predicted TTFT in seconds per instance (lower is better)."""
        return ttft_s(request, view, view.prefix_hit_tokens(request))

    def route(self, request: RequestInfo, view: RouterView) -> int:
        return argmin_lowest(self.scores(request, view))

    def compiled_form(self):
        return api.ROUTER_PREDICTED_LATENCY, ()
