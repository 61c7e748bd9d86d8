"""Bailian linear-combination routers (the LMetric paper's production baseline)."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import Fraction, Weight

from .ledger import TokenLedger
from .pick import argmin_lowest, hit_ratio, range_normalize


@register_policy("bailian")
class BailianRouter(RoutingPolicy):
    """Seed variant: argmin of ``lam (1 - hit_ratio) + (1 - lam) norm(bs)``.

    ``hit_ratio`` = precise prefix-hit tokens / input tokens; ``bs`` = the router's
    in-flight count, range-normalized to [0, 1] (0 for all when all are equal). Ties go to
    the lowest index.

    Args:
        lam: weight of the cache term, tuned per workload in [0.55, 0.7] (0.6).
    """

    name = "bailian"
    description = "Argmin lam*(1-hit) + (1-lam)*norm(in-flight), lam=0.6; lowest-index ties."

    def __init__(self, lam: Fraction = 0.6):
        self.lam = float(lam)

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Cost per instance (lower is better)."""
        hit = hit_ratio(view.prefix_hit_tokens(request), request.input_tokens)
        return self.lam * (1.0 - hit) + (1.0 - self.lam) * range_normalize(view.in_flight)

    def route(self, request: RequestInfo, view: RouterView) -> int:
        return argmin_lowest(self.scores(request, view))

    def compiled_form(self):
        return api.ROUTER_BAILIAN, (self.lam,)


@register_policy("bailian-sampling")
class BailianSamplingRouter(RoutingPolicy):
    """Weighted sampling: ``w_i = a norm(hit_ratio) + b (max_bs - bs_i)/range
    + c (max_tok - tok_i)/range``, instance drawn with probability proportional to ``w``.

    ``bs`` = in-flight requests, ``tok`` = router-side in-flight tokens (input + expected
    output). A term whose values are all equal scores 1 for every instance (no
    preference); if every weight is 0 the draw is uniform.

    Args:
        a, b, c: weights of the hit, batch-size and token terms (1/3 each).
    """

    name = "bailian-sampling"
    description = "Sample proportional to (hit + free batch + free tokens)/3, range-normalized."

    def __init__(self, a: Weight = 1 / 3, b: Weight = 1 / 3, c: Weight = 1 / 3):
        self.a, self.b, self.c = float(a), float(b), float(c)
        self._ledger = TokenLedger()

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._ledger = TokenLedger(num_instances)

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Sampling weight per instance (higher is more likely)."""
        hit = hit_ratio(view.prefix_hit_tokens(request), request.input_tokens)
        return (self.a * range_normalize(hit, equal=1.0)
                + self.b * (1.0 - range_normalize(view.in_flight, equal=0.0))
                + self.c * (1.0 - range_normalize(self._ledger.tokens, equal=0.0)))

    def route(self, request: RequestInfo, view: RouterView) -> int:
        w = self.scores(request, view)
        total = w.sum()
        if total <= 0:
            return int(view.rng.integers(view.num_instances))
        return int(view.rng.choice(view.num_instances, p=w / total))

    def on_dispatch(self, request: RequestInfo, instance: int, view: RouterView) -> None:
        self._ledger.add(request, instance)

    def on_finish(self, request_id: int, instance: int) -> None:
        self._ledger.remove(request_id, instance)

    def compiled_form(self):  # its token ledger is the engine's (as least-tokens')
        return api.ROUTER_BAILIAN_SAMPLING, (self.a, self.b, self.c)
