"""Lookahead planning on forked clusters: how far from optimal a routing heuristic is.

At every routing decision the planner copies the cluster as it stands into one slot per
candidate instance (``EngineState.fork``: queues, running batches, prefix caches, the
random generator), sends the pending request of copy ``k`` to candidate ``k``, lets every
copy run on for ``horizon_s`` seconds under the base heuristic (compiled, all copies in one
batched call), prices each copy with the Routing environment's own cost (TTFT per request,
priority-weighted, censored at the copy's end, unserved requests charged the penalty:
``llmsched_gym.envs.core.episode_cost``), and sends the request where its copy cost least.

``mode=oracle``: the copies see the true future arrivals (the workload itself). It is not a
deployable policy, and not a proof of optimality either (one decision at a time, the base
heuristic after it); it bounds how much a router that could see the next ``horizon_s``
seconds gains over the heuristic. ``candidates=base`` offers only the base heuristic's own
choice: the planner then routes exactly as the heuristic (a check of the machinery).

Runs as a gateway controller: ``compare --policies 'lmetric-no-detector;gateway=lookahead'``.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from llmsched_gym.engine.api import (
    ADMIT_PY,
    FLOW_PY,
    ROUTER_PY,
    ST_TIME,
    EngineState,
    RequestTable,
    compiled_form,
)
from llmsched_gym.envs.core import episode_cost, make_setup
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import GatewayController, make_policy, register_policy


@register_policy("lookahead")
class LookaheadPlanner(GatewayController):
    """Route each request where a forked copy of the cluster, run on ``horizon_s`` seconds
    under the ``base`` router, cost least (see the module docstring).

    Args:
        mode: ``oracle`` (the copies see the true future arrivals).
        horizon_s: seconds each copy runs past the decision.
        base: the compiled router the copies continue with, and whose choice
            ``candidates=base`` offers.
        candidates: ``all`` serving instances, or only the ``base`` router's own choice.
    """

    name = "lookahead"
    description = "lookahead planner on forked clusters (oracle: sees future arrivals; not deployable)"

    def __init__(self, mode: Literal["oracle"] = "oracle", horizon_s: Annotated[float, Field(gt=0, le=600)] = 1.0,
                 base: str = "lmetric-no-detector", candidates: Literal["all", "base"] = "all"):
        if mode != "oracle":
            raise ConfigError(f"lookahead mode={mode!r} is invalid; modes: oracle")
        if candidates not in ("all", "base"):
            raise ConfigError(f"lookahead candidates={candidates!r} is invalid; choose all or base")
        if not horizon_s > 0:
            raise ConfigError(f"lookahead horizon_s={horizon_s!r} is invalid; it must be > 0")
        try:
            form = compiled_form(make_policy(base, "routing"), ROUTER_PY)
        except ConfigError as e:
            raise ConfigError(f"lookahead base={base!r} is invalid: {e}") from None
        if form.code == ROUTER_PY:
            raise ConfigError(f"lookahead base={base!r} is invalid: the copies need a compiled router")
        self.mode, self.horizon_s, self.base, self.candidates = mode, float(horizon_s), base, candidates
        self.decisions, self.plan_seconds = 0, 0.0

    def run(self, scenario, seed: int):
        sim = scenario.simulator(seed, router=self.base)
        if sim.state.clusters.flow[sim.c] == FLOW_PY or sim.state.clusters.admit[sim.c] == ADMIT_PY:
            raise ConfigError("lookahead needs the scenario's flow control and admission to be compiled policies")
        router = sim.take_over_routing()
        form = compiled_form(router, ROUTER_PY)
        setup = make_setup("routing", scenario=scenario)
        first = int(sim.state.clusters.nprefill[sim.c])  # P/D: requests go to the decode pool
        copies: EngineState | None = None
        while sim.advance() == "route":
            info = sim.pending_info
            cands = ([router.route(info, sim.current_view())] if self.candidates == "base"
                     else list(range(first, sim.serving)))
            start = time.perf_counter()
            if copies is None or copies.num_clusters != len(cands):
                copies = sim.state.forked(sim.c, len(cands))
            else:
                copies.fork(sim.c, range(len(cands)), source=sim.state)
            costs = self._price(sim, copies, cands, form, setup, sim.pending_route)
            self.plan_seconds += time.perf_counter() - start
            self.decisions += 1
            sim.route(cands[int(np.argmin(costs))])
        return sim

    def _price(self, sim, copies: EngineState, cands: list[int], form, setup, r: int) -> np.ndarray:
        """The cost of each copy after sending request ``r`` to its candidate and running on."""
        K = len(cands)
        for k, i in enumerate(cands):
            copies.set_policy(k, "router", form.code, form.params)
            slot = copies.cluster(k)
            slot.status, slot.log_finish = ST_TIME, 0  # the decision is answered; no Python router hears them
            copies.dispatch_to(k, int(copies.req_off[k]) + r, i)
        copies.advance(np.ones(K, bool), np.full(K, sim.now + self.horizon_s))
        bs = sim.cluster.engine.block_size
        out = np.empty(K)
        for k in range(K):
            view = SimpleNamespace(table=RequestTable(sim.workload, bs, copies, k),
                                   arrived=int(copies.clusters.ptr[k]), now=float(copies.clusters.now[k]))
            out[k] = episode_cost(view, setup)
        return out
