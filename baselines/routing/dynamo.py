"""NVIDIA Dynamo KV-aware router: prefill plus decode block cost."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import Weight

from .pick import argmin_random, range_normalize
from .predict import engine_block_size


@register_policy("dynamo")
class DynamoRouter(RoutingPolicy):
    """cost = ``prefill_weight * prefill_blocks + decode_blocks``, min wins.

    With ``B`` the engine block size and ``hit`` the precise prefix hit:
    ``prefill_blocks = (queued_prefill_tokens + input - hit) / B`` (fractional, as in
    Dynamo); ``decode_blocks = kv_util * kv_blocks + ceil(input / B) - hit // B`` (active
    blocks plus the blocks the request newly allocates). With ``temperature == 0`` the
    argmin wins, ties broken at random; with ``temperature > 0`` the instance is sampled
    with probability proportional to ``exp(-norm(cost) / temperature)`` where ``norm`` is
    the range normalization to [0, 1].

    Args:
        prefill_weight: weight w of the prefill blocks (1.0).
        temperature: softmax temperature T (0: deterministic argmin).
    """

    name = "dynamo"
    description = "Min w*prefill_blocks + decode_blocks (w=1), optional softmax T; random ties."

    def __init__(self, prefill_weight: Weight = 1.0, temperature: Weight = 0.0):
        self.prefill_weight = float(prefill_weight)
        self.temperature = float(temperature)

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Cost in blocks per instance (lower is better)."""
        B = engine_block_size(view)
        hits = view.prefix_hit_tokens(request)
        prefill_blocks = (view.queued_prefill_tokens + request.input_tokens - hits) / B
        new_blocks = -(-request.input_tokens // B) - hits // B
        decode_blocks = view.kv_util * view.kv_blocks + new_blocks
        return self.prefill_weight * prefill_blocks + decode_blocks

    def route(self, request: RequestInfo, view: RouterView) -> int:
        cost = self.scores(request, view)
        if self.temperature == 0:
            return argmin_random(cost, view.rng)
        logits = -range_normalize(cost) / self.temperature
        p = np.exp(logits - logits.max())
        return int(view.rng.choice(view.num_instances, p=p / p.sum()))

    def compiled_form(self):
        return api.ROUTER_DYNAMO, (self.prefill_weight, self.temperature)
