"""Preble's E2 (exploit / explore) global scheduler."""

from __future__ import annotations

from collections import deque

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import Count, Fraction, NonNegativeSeconds, Weight

from .pick import argmin_lowest, hit_ratio
from .predict import decode_step_s, kv_tokens, prefill_time_s


@register_policy("preble")
class PrebleRouter(RoutingPolicy):
    """E2 scheduling with load rebalancing.

    ``load`` = the router's in-flight requests per instance. Cost per instance =
    predicted time to prefill the missed tokens (``input - hit``, precise hit) + ``load x
    expected output tokens x TPOT``. In order:

    1. rebalance: if ``max load >= rebalance_ratio x max(min load, 1)`` route to the least
       loaded (an idle instance counts as load 1, else any load would trigger it);
    2. exploit: if the best hit ratio exceeds ``exploit_threshold``, the lowest cost among
       the instances holding that (longest) matched prefix;
    3. explore: the lowest cost over all instances.
    Ties go to the lowest index. The TPOT estimate starts at ``initial_tpot_s`` and is then
    the median of the last ``tpot_window`` TPOTs the step-time model predicted for the
    chosen instances (the router sees no per-token timings).

    Args:
        exploit_threshold: hit ratio above which the cached prefix is exploited (0.5).
        initial_tpot_s: TPOT estimate before any prediction, seconds (0.15).
        tpot_window: recent predictions in the median (64).
        rebalance_ratio: load ratio that triggers rebalancing (15).
    """

    name = "preble"
    description = "Preble E2: exploit prefix if hit > 50%, else explore min prefill + decode-load cost."

    def __init__(self, exploit_threshold: Fraction = 0.5, initial_tpot_s: NonNegativeSeconds = 0.15,
                 tpot_window: Count = 64, rebalance_ratio: Weight = 15.0):
        self.exploit_threshold = float(exploit_threshold)
        self.initial_tpot_s = float(initial_tpot_s)
        self.tpot_window = int(tpot_window)
        self.rebalance_ratio = float(rebalance_ratio)
        self._tpots: deque[float] = deque(maxlen=self.tpot_window)

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._tpots = deque(maxlen=self.tpot_window)

    def tpot_estimate(self) -> float:
        """Current TPOT estimate, seconds."""
        return float(np.median(self._tpots)) if self._tpots else self.initial_tpot_s

    def scores(self, request: RequestInfo, view: RouterView, hits: np.ndarray) -> np.ndarray:
        """Cost in seconds per instance (lower is better)."""
        missed = np.maximum(0, request.input_tokens - hits)
        decode = view.in_flight * request.expected_output_tokens * self.tpot_estimate()
        return prefill_time_s(view, missed, request.input_tokens) + decode

    def route(self, request: RequestInfo, view: RouterView) -> int:
        load = view.in_flight
        if load.max() >= self.rebalance_ratio * max(load.min(), 1):
            choice = argmin_lowest(load)
        else:
            hits = view.prefix_hit_tokens(request)
            cost = self.scores(request, view, hits)
            if hit_ratio(hits, request.input_tokens).max() > self.exploit_threshold:
                cost = np.where(hits == hits.max(), cost, np.inf)
            choice = argmin_lowest(cost)
        context = kv_tokens(view)[choice] + request.input_tokens
        self._tpots.append(decode_step_s(view, view.in_flight[choice] + 1, context))
        return choice

    def compiled_form(self):
        return api.ROUTER_PREBLE, (self.exploit_threshold, self.initial_tpot_s, self.tpot_window,
                                      self.rebalance_ratio)
