"""SGLang router's cache-aware policy."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import MAX_REQUESTS, Fraction, Tokens, Weight, ranged

from .pick import argmin_lowest, hit_ratio
from .prefix_index import BlockLRUIndex


@register_policy("sglang-cache-aware")
class SGLangCacheAwareRouter(RoutingPolicy):
    """Cache-aware with a load-imbalance override.

    ``load`` = the router's in-flight requests per instance. Imbalanced when
    ``max - min > abs_threshold`` and ``max > rel_threshold * min``: route to the least
    loaded. Otherwise, if the best precise match rate (hit / input) exceeds
    ``match_threshold``, route to the deepest match; else to the instance with the
    smallest cache tree, whose size is the number of distinct block keys the router sent
    there (LRU-bounded at ``max_tree_blocks`` blocks of ``block_tokens`` tokens; SGLang's
    default 2^26-character tree at ~4 characters per token). All ties go to the lowest
    index.

    Args:
        abs_threshold: absolute load gap for imbalance (64).
        rel_threshold: load ratio for imbalance (1.5).
        match_threshold: match rate above which the deepest match wins (0.3).
        block_tokens: tokens per tree block (64).
        max_tree_blocks: blocks remembered per instance (262,144).
    """

    name = "sglang-cache-aware"
    description = "SGLang cache-aware: least-load if imbalanced (64, 1.5x), deepest match if > 0.3, else smallest tree."

    def __init__(self, abs_threshold: ranged(int, ge=0, le=MAX_REQUESTS) = 64, rel_threshold: Weight = 1.5,
                 match_threshold: Fraction = 0.3, block_tokens: Tokens = 64, max_tree_blocks: Tokens = 262_144):
        self.abs_threshold = abs_threshold
        self.rel_threshold = float(rel_threshold)
        self.match_threshold = float(match_threshold)
        self.block_tokens = int(block_tokens)
        self.max_tree_blocks = int(max_tree_blocks)
        self._tree = BlockLRUIndex(0, self.max_tree_blocks)

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._tree = BlockLRUIndex(num_instances, self.max_tree_blocks)

    def tree_sizes(self) -> np.ndarray:
        """Router-side cache-tree size per instance, in blocks."""
        return self._tree.sizes()

    def route(self, request: RequestInfo, view: RouterView) -> int:
        load = view.in_flight
        hi, lo = load.max(), load.min()
        if hi - lo > self.abs_threshold and hi > self.rel_threshold * lo:
            return argmin_lowest(load)
        hits = view.prefix_hit_tokens(request)
        if hit_ratio(hits, request.input_tokens).max() > self.match_threshold:
            return int(np.argmax(hits))
        return argmin_lowest(self._tree.sizes())

    def on_dispatch(self, request: RequestInfo, instance: int, view: RouterView) -> None:
        self._tree.insert(instance, request.block_keys(self.block_tokens))

    def compiled_form(self):  # the cache tree is the engine's block-key index
        return api.CompiledForm(api.ROUTER_SGLANG, (self.abs_threshold, self.rel_threshold, self.match_threshold,
                                                    self.max_tree_blocks), {"router_block_keys": (self.block_tokens, 0)})
