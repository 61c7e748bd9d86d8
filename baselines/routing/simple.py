"""Load-only routers: random, round-robin, JSQ, vLLM data-parallel, least tokens."""

from __future__ import annotations

import numpy as np

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView
from llmsched_gym.validation import Weight

from .ledger import TokenLedger
from .pick import argmin_lowest, argmin_random


@register_policy("random")
class RandomRouter(RoutingPolicy):
    """Uniformly random instance (drawn from ``view.rng``)."""

    name = "random"
    description = "Uniformly random instance."

    def route(self, request: RequestInfo, view: RouterView) -> int:
        return int(view.rng.integers(view.num_instances))

    def compiled_form(self):
        return api.ROUTER_RANDOM, ()


@register_policy("round-robin")
class RoundRobinRouter(RoutingPolicy):
    """Instances in turn, starting at 0 after each reset."""

    name = "round-robin"
    description = "Instances in cyclic order."

    def __init__(self):
        self._next = 0

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._next = 0

    def route(self, request: RequestInfo, view: RouterView) -> int:
        i = self._next % view.num_instances
        self._next = i + 1
        return i

    def compiled_form(self):
        return api.ROUTER_ROUND_ROBIN, ()


@register_policy("jsq")
class JSQRouter(RoutingPolicy):
    """Join the shortest queue (vLLM): min of scraped ``running + waiting``.

    Ties are broken uniformly at random: scraped metrics are stale between scrapes, and a
    lowest-index rule would send every request of a scrape interval to one instance.
    """

    name = "jsq"
    description = "Min scraped running + waiting (vLLM); random ties."

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Batch size per instance (lower is better)."""
        return view.running + view.waiting

    def route(self, request: RequestInfo, view: RouterView) -> int:
        return argmin_random(self.scores(request, view), view.rng)

    def compiled_form(self):
        return api.ROUTER_JSQ, ()


@register_policy("vllm-dp")
class VLLMDataParallelRouter(RoutingPolicy):
    """vLLM data-parallel load balancer: min of ``waiting_weight * waiting + running``.

    Args:
        waiting_weight: cost of a waiting request relative to a running one (4).
    Ties are broken uniformly at random (stale scraped metrics, as for ``jsq``).
    """

    name = "vllm-dp"
    description = "Min 4*waiting + running from scraped metrics; random ties."

    def __init__(self, waiting_weight: Weight = 4.0):
        self.waiting_weight = float(waiting_weight)

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """Weighted queue length per instance (lower is better)."""
        return self.waiting_weight * view.waiting + view.running

    def route(self, request: RequestInfo, view: RouterView) -> int:
        return argmin_random(self.scores(request, view), view.rng)

    def compiled_form(self):
        return api.ROUTER_VLLM_DP, (self.waiting_weight,)


@register_policy("least-tokens")
class LeastTokensRouter(RoutingPolicy):
    """Min total context (input + expected output) of the requests the router sent to an
    instance and that have not finished. Ties go to the lowest index (the counts are
    exact and change at every dispatch, so ties do not persist)."""

    name = "least-tokens"
    description = "Min router-side tokens (input + expected output) in flight; lowest-index ties."

    def __init__(self):
        self._ledger = TokenLedger()

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        self._ledger = TokenLedger(num_instances)

    def scores(self, request: RequestInfo, view: RouterView) -> np.ndarray:
        """In-flight tokens per instance (lower is better)."""
        return self._ledger.tokens

    def route(self, request: RequestInfo, view: RouterView) -> int:
        return argmin_lowest(self.scores(request, view))

    def on_dispatch(self, request: RequestInfo, instance: int, view: RouterView) -> None:
        self._ledger.add(request, instance)

    def on_finish(self, request_id: int, instance: int) -> None:
        self._ledger.remove(request_id, instance)

    def compiled_form(self):
        return api.ROUTER_LEAST_TOKENS, ()
