"""PolyServe: SLO-aware packing with step-time-model predictions."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import Seconds

from .predict import tpot_s, ttft_s


@register_policy("polyserve")
class PolyServeRouter(RoutingPolicy):
    """Keep instances predicted to meet ``TTFT <= ttft_slo_s`` and ``TPOT <= tpot_slo_s``
    and pack: pick the one with the largest predicted TPOT (ties to the lowest index). If
    none qualifies, pick uniformly at random. TTFT and TPOT come from
    :func:`.predict.ttft_s` and :func:`.predict.tpot_s` (precise prefix hit).

    Args:
        ttft_slo_s: TTFT target, seconds (1.0).
        tpot_slo_s: TPOT target, seconds (0.2).
    """

    name = "polyserve"
    description = "Pack onto the busiest instance predicted to meet TTFT <= 1 s and TPOT <= 200 ms."

    def __init__(self, ttft_slo_s: Seconds = 1.0, tpot_slo_s: Seconds = 0.2):
        self.ttft_slo_s = float(ttft_slo_s)
        self.tpot_slo_s = float(tpot_slo_s)

    def route(self, request: RequestInfo, view: RouterView) -> int:
        ttft = ttft_s(request, view, view.prefix_hit_tokens(request))
        tpot = tpot_s(request, view)
        ok = (ttft <= self.ttft_slo_s) & (tpot <= self.tpot_slo_s)
        if not ok.any():
            return int(view.rng.integers(view.num_instances))
        return int(np.argmax(np.where(ok, tpot, -np.inf)))

    def compiled_form(self):
        return api.ROUTER_POLYSERVE, (self.ttft_slo_s, self.tpot_slo_s)
