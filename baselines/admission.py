"""Admission policies (docs/architecture.md): admit or reject a request when it arrives.

A request is sheddable when its priority is < 0; critical requests (>= 0) are always
admitted by every policy here.
"""

from __future__ import annotations

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import AdmissionPolicy, register_policy
from llmsched_gym.gateway.saturation import utilization_scores
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import MAX_REQUESTS, PositiveWeight, ranged


@register_policy("always-admit")
class AlwaysAdmit(AdmissionPolicy):
    """Admit everything (the default)."""

    name = "always-admit"
    description = "Admit every request."

    def admit(self, request: RequestInfo, view: RouterView) -> bool:
        return True

    def compiled_form(self):
        return api.ADMIT_ALWAYS, ()


@register_policy("legacy")
class LegacyAdmission(AdmissionPolicy):
    """llm-d without flow control: reject a sheddable request iff saturation >= 1."""

    name = "legacy"
    description = "Reject sheddable requests iff saturation >= 1 (llm-d without flow control)."

    def admit(self, request: RequestInfo, view: RouterView) -> bool:
        return request.priority >= 0 or view.saturation < 1.0

    def compiled_form(self):
        return api.ADMIT_LEGACY, ()


@register_policy("probabilistic")
class ProbabilisticAdmission(AdmissionPolicy):
    """llm-d's ``probabilistic-admitter`` (sim2real part 1): reject a sheddable request
    with probability ``min(k * s**power, 1)``.

    ``s`` is the admitter's own roofline saturation, computed from the scraped metrics
    with its own thresholds, as the plugin does:
    ``mean_i max(waiting_i / queueDepthThreshold, kv_util_i / kvCacheUtilThreshold)``
    (no staleness rule; an empty pool admits). With the default thresholds it equals
    the gateway's default utilization detector.

    Args (llm-d-router's names and defaults):
        power: steepness (5: full shedding from s = 300**(-1/5) ~ 0.32); > 0.
        k: scale of the rejection curve (300: p(0.2) = 9.6%); > 0.
        queueDepthThreshold: waiting requests at which an instance scores 1 (5); > 0.
        kvCacheUtilThreshold: KV utilization at which an instance scores 1 (0.8); > 0.

    The draw comes from ``view.rng`` and is skipped when the probability is 0 or 1, so
    the generator is only consumed by genuinely random decisions.
    """

    name = "probabilistic"
    description = "Reject sheddable requests with probability min(k*s^power, 1) (llm-d probabilistic-admitter)."

    def __init__(self, power: PositiveWeight = 5.0, k: PositiveWeight = 300.0,
                 queueDepthThreshold: ranged(float, gt=0, le=MAX_REQUESTS) = 5,  # noqa: N803
                 kvCacheUtilThreshold: ranged(float, gt=0, le=1) = 0.8):  # noqa: N803
        self.power = float(power)
        self.k = float(k)
        self.queue_depth_threshold = float(queueDepthThreshold)
        self.kv_cache_util_threshold = float(kvCacheUtilThreshold)

    # Earlier names of ``k`` and ``power`` (read-only).
    coefficient = property(lambda self: self.k)
    exponent = property(lambda self: self.power)

    def reject_probability(self, saturation: float) -> float:
        """Probability that a sheddable request is rejected at ``saturation``."""
        return min(self.k * max(saturation, 0.0) ** self.power, 1.0)

    def saturation(self, view: RouterView) -> float | None:
        """The admitter's saturation from the view's scraped arrays (None: no instance)."""
        if len(view.waiting) == 0:
            return None
        return float(utilization_scores(view.waiting, view.kv_util, self.queue_depth_threshold,
                                        self.kv_cache_util_threshold).mean())

    def admit(self, request: RequestInfo, view: RouterView) -> bool:
        if request.priority >= 0:
            return True
        s = self.saturation(view)
        if s is None:
            return True
        p = self.reject_probability(s)
        if p <= 0.0:
            return True
        if p >= 1.0:
            return False
        return bool(view.rng.random() >= p)

    def compiled_form(self):
        return api.ADMIT_PROBABILISTIC, (self.k, self.power, self.queue_depth_threshold,
                                            self.kv_cache_util_threshold)
