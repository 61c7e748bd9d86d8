"""Scaling policies (``llmsched/Autoscaling-v0``, ``compare --scaler``): how many instances to run.

Each is asked once per scaling interval with a
:class:`~llmsched_gym.autoscaling.ScalingView` (the serving instances' scraped metrics,
the gateway queue, the fleet's counts) and returns the instances it wants.

* ``fixed``: a constant fleet.
* ``hpa-kv`` / ``hpa-queue``: Kubernetes' Horizontal Pod Autoscaler on the mean KV-cache
  utilization, or on the waiting requests per serving instance (the instances' queues
  plus the gateway's), with its defaults: tolerance 0.1, scale-down stabilization window
  300 s, scale-up at most ``max(2 x current, current + 4)`` per decision.
* ``queue-aware``: Knative's KPA on the requests in the system (in flight at the serving
  instances plus queued at the gateway): a stable window, a panic window and panic mode.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from llmsched_gym.autoscaling import ScalingPolicy, ScalingView
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import register_policy
from llmsched_gym.validation import MAX_INSTANCES, NonNegativeSeconds, PositiveWeight, Seconds, Weight, ranged


@register_policy("fixed")
class FixedFleet(ScalingPolicy):
    """Always ``instances`` instances.

    Args:
        instances: the fleet size (1 .. the cluster's instances).
    """

    name = "fixed"
    description = "A constant fleet of `instances` instances."

    def __init__(self, instances: ranged(int, ge=1, le=MAX_INSTANCES) = 1):
        self.instances = instances

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        if self.instances > num_instances:
            raise ConfigError(f"fixed: instances={self.instances} is invalid; the cluster has {num_instances} "
                              "(its largest fleet)")

    def scale(self, view: ScalingView) -> int:
        return self.instances


def hpa_desired(current: int, metric: float, target: float, tolerance: float = 0.1) -> int:
    """Kubernetes HPA's replica formula: ``ceil(current x metric / target)``, or ``current``
    while ``|metric / target - 1| <= tolerance``."""
    ratio = metric / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    return max(1, math.ceil(current * ratio - 1e-9))  # 1e-9: 2 x 0.35 / 0.7 is 1.0000000000000002


class HPA(ScalingPolicy):
    """Kubernetes' Horizontal Pod Autoscaler (``autoscaling/v2``, its algorithm and defaults).

    The metric is averaged over the serving instances; ``current`` is the instances asked
    for (serving or not yet). As Kubernetes does for not-yet-ready pods, a scale-up
    is recomputed with the instances not yet serving at metric 0 and skipped if it no longer
    exceeds the tolerance. Scale-up is limited to ``max(2 x current, current + 4)`` per
    decision (the default scale-up policies: 100% or 4 pods per 15 s); scale-down takes
    the highest recommendation of the last ``stabilization_s`` seconds (default 300 s,
    Kubernetes' downscale stabilization window; scale it with any time compression of
    the workload, docs/environments.md).
    """

    def __init__(self, target: PositiveWeight, tolerance: Weight = 0.1, stabilization_s: NonNegativeSeconds = 300.0):
        self.target, self.tolerance, self.stabilization_s = float(target), float(tolerance), float(stabilization_s)
        self._history: deque = deque()

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._history = deque()

    def value(self, view: ScalingView) -> float:
        """Sum of the metric over the serving instances."""
        raise NotImplementedError

    def scale(self, view: ScalingView) -> int:
        current = view.target
        total = self.value(view)
        desired = hpa_desired(current, total / view.serving, self.target, self.tolerance)
        if desired > current and view.serving < current:  # not-yet-ready instances count at metric 0
            again = hpa_desired(current, total / current, self.target, self.tolerance)
            desired = again if again > current else current
        desired = min(desired, max(2 * current, current + 4))
        h = self._history
        h.append((view.now, desired))
        while h[0][0] < view.now - self.stabilization_s:
            h.popleft()
        if desired < current:  # the highest recommendation of the window
            desired = min(current, max(d for _, d in h))
        return desired


@register_policy("hpa-kv")
class HPAKV(HPA):
    """Kubernetes HPA on the mean KV-cache utilization of the serving instances.

    Args:
        target: the utilization to hold (default 0.7).
        tolerance: no change while ``|utilization / target - 1| <= tolerance`` (0.1).
        stabilization_s: scale-down stabilization window, seconds (300).
    """

    name = "hpa-kv"
    description = "Kubernetes HPA on mean KV-cache utilization (target 0.7, tolerance 0.1, 300 s down-window)."

    def __init__(self, target: PositiveWeight = 0.7, tolerance: Weight = 0.1,
                 stabilization_s: NonNegativeSeconds = 300.0):
        super().__init__(target, tolerance, stabilization_s)

    def value(self, view: ScalingView) -> float:
        return float(view.kv_util.sum())


@register_policy("hpa-queue")
class HPAQueue(HPA):
    """Kubernetes HPA on the waiting requests per serving instance (the instances' scraped
    queues plus the gateway's band queues).

    Args:
        target: waiting requests per instance to hold (default 2).
        tolerance: no change while ``|metric / target - 1| <= tolerance`` (0.1).
        stabilization_s: scale-down stabilization window, seconds (300).
    """

    name = "hpa-queue"
    description = "Kubernetes HPA on waiting requests per instance (target 2, tolerance 0.1, 300 s down-window)."

    def __init__(self, target: PositiveWeight = 2.0, tolerance: Weight = 0.1,
                 stabilization_s: NonNegativeSeconds = 300.0):
        super().__init__(target, tolerance, stabilization_s)

    def value(self, view: ScalingView) -> float:
        return float(view.waiting.sum() + view.gateway_queue)


@register_policy("queue-aware")
class QueueAware(ScalingPolicy):
    """Knative's KPA on the requests in the system: in flight at the serving instances
    (queued or running) plus queued at the gateway.

    ``desired = ceil(mean concurrency / (target x utilization))`` over the samples of the
    last ``stable_s`` seconds, and the same over ``panic_s`` (at least the latest
    sample). When the panic desire reaches ``panic_threshold`` x the serving instances
    the scaler panics for ``stable_s``: it takes the panic desire and never scales down.

    Args:
        target: requests in flight per instance (default 32).
        utilization: fraction of ``target`` to aim at (0.7, Knative's default).
        stable_s: stable window, seconds (60, Knative's default).
        panic_s: panic window, seconds (6: Knative's 10% of the stable window).
        panic_threshold: panic when the panic desire is this many times the serving
            instances (2.0, Knative's 200%).
    """

    name = "queue-aware"
    description = "Knative KPA on requests in flight + queued (target 32/instance, utilization 0.7, 60 s / 6 s windows)."

    def __init__(self, target: PositiveWeight = 32.0, utilization: ranged(float, gt=0, le=1) = 0.7,
                 stable_s: Seconds = 60.0, panic_s: NonNegativeSeconds = 6.0, panic_threshold: PositiveWeight = 2.0):
        self.target, self.utilization = float(target), float(utilization)
        self.stable_s, self.panic_s, self.panic_threshold = float(stable_s), float(panic_s), float(panic_threshold)
        self.reset(0, None)

    def reset(self, num_instances: int, rng) -> None:
        self._samples: deque = deque()
        self._panic_until = -np.inf

    def _desire(self, since: float) -> int:
        xs = [x for t, x in self._samples if t >= since] or [self._samples[-1][1]]
        return max(1, math.ceil(float(np.mean(xs)) / (self.target * self.utilization) - 1e-9))

    def scale(self, view: ScalingView) -> int:
        now = view.now
        self._samples.append((now, float(view.in_flight.sum() + view.gateway_queue)))
        while self._samples[0][0] < now - self.stable_s:
            self._samples.popleft()
        stable, panic = self._desire(now - self.stable_s), self._desire(now - self.panic_s)
        current = view.target
        if panic >= self.panic_threshold * max(view.serving, 1):
            self._panic_until = now + self.stable_s
        if now < self._panic_until:
            return max(panic, current)
        return stable
