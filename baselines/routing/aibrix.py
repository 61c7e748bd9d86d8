"""AIBrix prefix-cache router (filter-based)."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import MAX_REQUESTS, Weight, ranged

from .pick import argmin_random, hit_ratio


@register_policy("aibrix")
class AIBrixRouter(RoutingPolicy):
    """Filter-based routing on the gateway's real-time running-request counts.

    ``load`` = requests the gateway sent to the instance and that are still running
    (``view.in_flight``, AIBrix's real-time counter). If ``max - min > imbalance``, route to
    a least-loaded instance. Otherwise keep instances with
    ``load <= mean + std_factor * std`` and pick the highest precise prefix-match share,
    then the lowest load, then the lowest index; if no kept instance matches any prefix,
    fall back to least-request over all instances. Least-loaded ties are random.

    Args:
        imbalance: max - min running requests that counts as imbalanced (8).
        std_factor: standard deviations above the mean a candidate may be loaded (1.0).
    """

    name = "aibrix"
    description = "AIBrix: least-request if max-min > 8, else best prefix share among load <= mean+std."

    def __init__(self, imbalance: ranged(int, ge=0, le=MAX_REQUESTS) = 8, std_factor: Weight = 1.0):
        self.imbalance = imbalance
        self.std_factor = float(std_factor)

    def route(self, request: RequestInfo, view: RouterView) -> int:
        load = view.in_flight.astype(np.float64)
        if load.max() - load.min() > self.imbalance:
            return argmin_random(load, view.rng)
        share = hit_ratio(view.prefix_hit_tokens(request), request.input_tokens)
        keep = load <= load.mean() + self.std_factor * load.std()
        if not (share[keep] > 0).any():
            return argmin_random(load, view.rng)
        # Lexicographic: highest share, then lowest load, then lowest index.
        candidates = np.flatnonzero(keep)
        order = np.lexsort((candidates, load[candidates], -share[candidates]))
        return int(candidates[order[0]])

    def compiled_form(self):
        return api.ROUTER_AIBRIX, (self.imbalance, self.std_factor)
