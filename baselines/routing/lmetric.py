"""LMetric (Alibaba Bailian): prefill tokens x batch size, with a KV-hotspot detector."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import Count, Seconds, Tokens, ranged

from .hotspot import HotspotDetector, PrefixClass
from .pick import argmin_lowest


@register_policy("lmetric")
class LMetricRouter(RoutingPolicy):
    """min ``P_i * (BS_i + 1)``; ties go to the lowest index.

    ``P_i = queued_prefill_tokens_i + max(0, input - hit_i)`` (router-side backlog of
    uncomputed prefill plus this request's uncached tokens, precise hit) and
    ``BS_i = in_flight_i`` (router-local, +1 at dispatch, -1 at finish). With the detector
    on, a request of a hotspot class (see :class:`HotspotDetector`) is routed among the
    instances that do not cache its prefix.

    Args:
        detector: run the hotspot detector (True).
        window_s, prefix_blocks, block_tokens, top_classes, min_samples: detector settings
            (60 s, 4 blocks of 64 tokens, top 8 classes, 20 arrivals).
    """

    name = "lmetric"
    description = "Min (queued prefill + uncached tokens) x (in-flight + 1), KV-hotspot detector; lowest-index ties."

    def __init__(self, detector: bool = True, window_s: Seconds = 60.0, prefix_blocks: Tokens = 4,
                 block_tokens: Tokens = 64, top_classes: ranged(int, ge=1, le=1024) = 8, min_samples: Count = 20):
        self.detector = bool(detector)
        self._settings = dict(window_s=window_s, prefix_blocks=prefix_blocks, block_tokens=block_tokens,
                              top_classes=top_classes, min_samples=min_samples)
        self._detector = HotspotDetector(**self._settings)

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._detector = HotspotDetector(**self._settings)

    @property
    def hotspot_log(self) -> list[tuple[float, PrefixClass]]:
        """``(time, class)`` each time a class was flagged as a hotspot. Kept by the Python
        implementation only: in the simulator this router runs compiled (same decisions)
        and leaves it empty; a subclass runs in Python and keeps it."""
        return self._detector.log

    @staticmethod
    def metric(request: RequestInfo, view: RouterView, hits: np.ndarray) -> np.ndarray:
        """``P_i * (BS_i + 1)`` per instance (lower is better)."""
        prefill = view.queued_prefill_tokens + np.maximum(0, request.input_tokens - hits)
        return prefill.astype(np.float64) * (view.in_flight + 1)

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """The metric per instance, without the detector (no side effects)."""
        return self.metric(request, view, view.prefix_hit_tokens(request))

    def route(self, request: RequestInfo, view: RouterView) -> int:
        hits = view.prefix_hit_tokens(request)
        score = self.metric(request, view, hits)
        if self.detector:
            excluded = self._detector.excluded(view.now, request, hits)
            if excluded is not None:
                score = np.where(excluded, np.inf, score)
        return argmin_lowest(score)

    def compiled_form(self):  # the detector's window and counts live in the engine state
        st = self._settings
        needs = {"prefix_classes": (st["prefix_blocks"], st["block_tokens"])} if self.detector else {}
        return api.CompiledForm(api.ROUTER_LMETRIC, (float(self.detector), st["window_s"], st["top_classes"],
                                                     st["min_samples"]), needs)


@register_policy("lmetric-no-detector")
class LMetricNoDetectorRouter(LMetricRouter):
    """LMetric without the hotspot detector (the ablation)."""

    name = "lmetric-no-detector"
    description = "LMetric without the KV-hotspot detector."

    def __init__(self):
        super().__init__(detector=False)

    compiled_form = LMetricRouter.compiled_form
