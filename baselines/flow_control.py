"""Usage-limit (flow-control) policies (docs/architecture.md): per-band ceilings for the dispatch loop.

Band 0 is the highest priority. The gateway stops a dispatch cycle at the first band
whose ceiling is <= the saturation, so a ceiling of 1.0 only blocks at saturation >= 1
and 0.0 always blocks. Every policy returns ceilings that never increase from a band
to the next lower one.
"""

from __future__ import annotations

import math

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import UsageLimitPolicy, register_policy
from llmsched_gym.validation import Weight


@register_policy("static-usage-limit")
class StaticUsageLimit(UsageLimitPolicy):
    """Every band gets the same ceiling.

    Args:
        threshold: the ceiling of every band (1.0: a no-op until saturation reaches 1).
    """

    name = "static-usage-limit"
    description = "Every band's ceiling = threshold (default 1.0)."

    def __init__(self, threshold: Weight = 1.0):
        self.threshold = float(threshold)

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        return np.full(num_bands, self.threshold)

    def compiled_form(self):
        return api.FLOW_STATIC, (self.threshold,)


@register_policy("priority-holdback")
class PriorityHoldback(UsageLimitPolicy):
    """Ceilings spread linearly over a rank domain: ``c_i = cmax - i (cmax - cmin)/(N-1)``.

    Args:
        cmax: ceiling of band 0 (default 1.0: the top band is only held at saturation 1).
        cmin: ceiling of the lowest band (default 0.5: the lowest band is held back from
            saturation 0.5, where the soft-reflective ceiling also starts gating).
    With a single band the ceiling is ``cmax``.
    """

    name = "priority-holdback"
    description = "Linear per-band ceilings from cmax (band 0) down to cmin (lowest band)."

    def __init__(self, cmax: Weight = 1.0, cmin: Weight = 0.5):
        if cmax < cmin:
            raise ConfigError(f"cmax={cmax!r} is invalid; it must be >= cmin={cmin!r}")
        self.cmax, self.cmin = float(cmax), float(cmin)

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        if num_bands == 1:
            return np.array([self.cmax])
        i = np.arange(num_bands)
        return self.cmax - i * (self.cmax - self.cmin) / (num_bands - 1)

    def compiled_form(self):
        return api.FLOW_HOLDBACK, (self.cmax, self.cmin)


def round_half_up(x: float) -> int:
    """Round to the nearest integer, halves up, tolerant to float error.

    The tolerance matters: ``0.6 / (1 - 0.6)`` evaluates to 1.4999999999999998, which
    must round to 2 for the published 50% blocking at s = 0.6.
    """
    return math.floor(x + 0.5 + 1e-9)


@register_policy("soft-reflective-ceiling")
class SoftReflectiveCeiling(UsageLimitPolicy):
    """llm-d soft-reflective ceiling.

    ``ceiling[0] = 1``; band ``i >= 1`` reflects ``r_i = 1 - ramp * i s/(N-1)``: open (1.0)
    if ``s < r_i``, closed (0.0) if ``s >= 1``, otherwise open only on every ``period``-th
    tick with ``period = max(1, round_half_up(period_scale * s / (1 - s)))``. One tick
    counter is shared by all bands and advanced once per :meth:`ceilings` call (one
    dispatch cycle) while ``1/(1 + ramp) <= s < 1`` (from 0.5, where the last band starts
    to be gated, at ramp 1); it is advanced *before* being tested, so ticks are numbered
    1, 2, ... and the period-th cycle in the gated regime is the first open one. Over any
    ``period`` consecutive cycles exactly one is open, which gives the published blocking
    of the sheddable band with two bands: 0, 0, 50, 67, 89, 100 % at s = 0.3, 0.5, 0.6,
    0.75, 0.9, 1.0 (at s = 0.5 the period is 1: always open). Gated bands share the tick,
    so the ceilings never increase towards lower bands.

    Args:
        ramp: slope of the reflection (default 1, the published policy): larger gates the
            lower bands from lower saturation (band i from ``s = (N-1)/(N-1 + ramp i)``),
            0 never gates.
        period_scale: multiplies the duty-cycle period (default 1): 2 opens a gated band
            half as often. FlowControl-v0's ``action="soft-reflective"`` sets both each
            control interval.
    """

    name = "soft-reflective-ceiling"
    description = "llm-d soft-reflective ceiling: sheddable bands open 1 of every s/(1-s) cycles."

    def __init__(self, ramp: Weight = 1.0, period_scale: Weight = 1.0):
        self.ramp, self.period_scale = float(ramp), float(period_scale)
        self._tick = 0

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._tick = 0

    def period(self, saturation: float) -> int:
        """Cycles per open cycle of a gated band in the gated regime."""
        return max(1, round_half_up(self.period_scale * saturation / (1.0 - saturation)))

    def gated_from(self) -> float:
        """Saturation from which the lowest band is gated (and the tick advances)."""
        return 1.0 / (1.0 + self.ramp)

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        s = float(saturation)
        out = np.ones(num_bands)
        open_now = True
        if self.gated_from() <= s < 1.0:
            self._tick += 1
            open_now = self._tick % self.period(s) == 0
        if num_bands > 1:
            i = np.arange(1, num_bands)
            gated = s >= 1.0 - self.ramp * i * s / (num_bands - 1)
            out[1:][gated] = 0.0 if s >= 1.0 else float(open_now)
        return out

    def stationary(self, saturation: float) -> bool:
        s = float(saturation)
        return s < self.gated_from() or s >= 1.0 or self.period(s) == 1

    def compiled_form(self):
        return api.FLOW_SOFT_REFLECTIVE, (self.ramp, self.period_scale)
