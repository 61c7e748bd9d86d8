"""Admission policies (DESIGN 4): admit or reject a request when it arrives.

A request is sheddable when its priority is < 0; critical requests (>= 0) are always
admitted by every policy here.
"""

from __future__ import annotations

from llmsched_gym.errors import check_nonnegative
from llmsched_gym.policy import AdmissionPolicy, register_policy
from llmsched_gym.view import RequestInfo, RouterView


@register_policy("always-admit")
class AlwaysAdmit(AdmissionPolicy):
    """Admit everything (the default)."""

    name = "always-admit"
    description = "Admit every request."

    def admit(self, request: RequestInfo, view: RouterView) -> bool:
        return True


@register_policy("legacy")
class LegacyAdmission(AdmissionPolicy):
    """llm-d without flow control: reject a sheddable request iff saturation >= 1."""

    name = "legacy"
    description = "Reject sheddable requests iff saturation >= 1 (llm-d without flow control)."

    def admit(self, request: RequestInfo, view: RouterView) -> bool:
        return request.priority >= 0 or view.saturation < 1.0


@register_policy("probabilistic")
class ProbabilisticAdmission(AdmissionPolicy):
    """llm-d sim2real part 1: reject a sheddable request with probability
    ``min(coefficient * s**exponent, 1)`` at saturation ``s``.

    Args:
        coefficient: scale of the rejection curve (300: p(0.2) = 9.6%).
        exponent: steepness (5: full shedding from s = 300**(-1/5) ~ 0.32).

    The draw comes from ``view.rng`` and is skipped when the probability is 0 or 1, so
    the generator is only consumed by genuinely random decisions.
    """

    name = "probabilistic"
    description = "Reject sheddable requests with probability min(300*s^5, 1)."

    def __init__(self, coefficient: float = 300.0, exponent: float = 5.0):
        check_nonnegative("coefficient", coefficient)
        check_nonnegative("exponent", exponent)
        self.coefficient = float(coefficient)
        self.exponent = float(exponent)

    def reject_probability(self, saturation: float) -> float:
        """Probability that a sheddable request is rejected at ``saturation``."""
        return min(self.coefficient * max(saturation, 0.0) ** self.exponent, 1.0)

    def admit(self, request: RequestInfo, view: RouterView) -> bool:
        if request.priority >= 0:
            return True
        p = self.reject_probability(view.saturation)
        if p <= 0.0:
            return True
        if p >= 1.0:
            return False
        return bool(view.rng.random() >= p)
