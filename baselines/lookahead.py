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

``decision=flow`` plans the usage limit instead, once every ``interval_s``: the copies run
the soft-reflective ceiling (``base_flow``) with a ``grid`` x ``grid`` set of (ramp, period
scale) settings around the current base, FlowControl-v0's ``soft-reflective`` action
(``llmsched_gym.envs.gateway.flow_params``: actions 0.25..0.75, the centre is the base),
priced with the FlowControl environment's cost; the best setting runs until the next
decision. Offered only the base setting (``candidates=base``), it is the base policy exactly.

Runs as a gateway controller: ``compare --policies 'lmetric-no-detector;gateway=lookahead'``,
``compare --scenario codegen --paper-qps 16 --policies 'soft-reflective-ceiling;gateway=lookahead:decision=flow'``.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Literal

import numpy as np

from llmsched_gym.engine.api import (
    ADMIT_PY,
    FLOW_PY,
    FLOW_SOFT_REFLECTIVE,
    ROUTER_PY,
    ST_TIME,
    EngineState,
    RequestTable,
    compiled_form,
)
from llmsched_gym.envs.core import episode_cost, make_setup
from llmsched_gym.envs.gateway import flow_params
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import GatewayController, make_policy, register_policy
from llmsched_gym.validation import ranged

#: Seconds a copy runs past a decision, and between flow decisions.
PlanSeconds = ranged(float, gt=0, le=600)


@register_policy("lookahead")
class LookaheadPlanner(GatewayController):
    """Route each request where a forked copy of the cluster, run on ``horizon_s`` seconds
    under the ``base`` router, cost least (see the module docstring).

    Args:
        decision: ``routing`` (every request) or ``flow`` (the usage limit, every ``interval_s``).
        mode: ``oracle`` (the copies see the true future arrivals).
        horizon_s: seconds each copy runs past the decision.
        base: the compiled router the copies continue with, and whose choice
            ``candidates=base`` offers.
        candidates: every option (``all``: each serving instance, or the flow grid), or only
            the base policy's own (``base``).
        base_flow: the compiled soft-reflective ceiling whose parameters ``decision=flow`` sets.
        interval_s: seconds between flow decisions.
        grid: settings per flow parameter (odd: the base is the centre).
    """

    name = "lookahead"
    description = "lookahead planner on forked clusters (oracle: sees future arrivals; not deployable)"

    def __init__(self, decision: Literal["routing", "flow"] = "routing", mode: Literal["oracle"] = "oracle",
                 horizon_s: PlanSeconds = 1.0, base: str = "lmetric-no-detector",
                 candidates: Literal["all", "base"] = "all", base_flow: str = "soft-reflective-ceiling",
                 interval_s: PlanSeconds = 1.0, grid: ranged(int, ge=1, le=9) = 3):
        if grid % 2 == 0:  # the declared ranges are checked before this runs (make_policy, the constructor)
            raise ConfigError(f"lookahead grid={grid!r} is invalid; it must be odd (the base setting is the centre)")
        self.form = self._compiled(base, "routing", "base")
        flow = self._compiled(base_flow, "usage-limit", "base_flow")
        if flow.code != FLOW_SOFT_REFLECTIVE:
            raise ConfigError(f"lookahead base_flow={base_flow!r} is invalid: decision=flow sets the parameters "
                              "of soft-reflective-ceiling (with its parameters)")
        self.base_params = flow.params
        self.decision, self.mode, self.horizon_s, self.base, self.candidates = (
            decision, mode, float(horizon_s), base, candidates)
        self.base_flow, self.interval_s, self.grid = base_flow, float(interval_s), int(grid)
        self.decisions, self.plan_seconds = 0, 0.0

    @staticmethod
    def _compiled(spec: str, role: str, key: str):
        try:
            form = compiled_form(make_policy(spec, role), ROUTER_PY if role == "routing" else FLOW_PY)
        except ConfigError as e:
            raise ConfigError(f"lookahead {key}={spec!r} is invalid: {e}") from None
        if form.code in (ROUTER_PY, FLOW_PY):
            raise ConfigError(f"lookahead {key}={spec!r} is invalid: the copies need a compiled policy")
        return form

    def run(self, scenario, seed: int):
        gateway = {"router": self.base} if self.decision == "routing" else {"flow_control": self.base_flow}
        sim = scenario.simulator(seed, **gateway)
        if sim.state.clusters.flow[sim.c] == FLOW_PY or sim.state.clusters.admit[sim.c] == ADMIT_PY:
            raise ConfigError("lookahead needs the scenario's flow control and admission to be compiled policies")
        if self.decision == "flow" and sim.state.clusters.router[sim.c] == ROUTER_PY:
            raise ConfigError("lookahead decision=flow needs a compiled router in the scenario")
        return self._run_routing(sim, scenario) if self.decision == "routing" else self._run_flow(sim, scenario)

    def _fork(self, sim, copies: EngineState | None, k: int) -> EngineState:
        """``k`` copies of the simulation now (reusing the state of the previous decision's)."""
        if copies is None or copies.num_clusters != k:
            return sim.state.forked(sim.c, k)
        copies.fork(sim.c, range(k), source=sim.state)
        return copies

    def _run_routing(self, sim, scenario):
        router = sim.take_over_routing()
        setup = make_setup("routing", scenario=scenario)
        first = int(sim.state.clusters.nprefill[sim.c])  # P/D: requests go to the decode pool
        copies = None
        while sim.advance() == "route":
            info = sim.pending_info
            cands = ([router.route(info, sim.current_view())] if self.candidates == "base"
                     else list(range(first, sim.serving)))
            start = time.perf_counter()
            copies = self._fork(sim, copies, len(cands))
            r = sim.pending_route
            for k, i in enumerate(cands):
                copies.set_policy(k, "router", self.form.code, self.form.params)
                slot = copies.cluster(k)
                slot.status, slot.log_finish = ST_TIME, 0  # the decision is answered; no Python router hears them
                copies.dispatch_to(k, int(copies.req_off[k]) + r, i)
            costs = self._price(sim, copies, setup)
            self.plan_seconds += time.perf_counter() - start
            self.decisions += 1
            sim.route(cands[int(np.argmin(costs))])
        return sim

    def _run_flow(self, sim, scenario):
        setup = make_setup("flow_control", scenario=scenario)
        if self.candidates == "base":
            options = [np.asarray(self.base_params)]
        else:
            a = np.linspace(0.25, 0.75, self.grid)
            ramp, period = flow_params(np.array(np.meshgrid(a, a)).reshape(2, -1), self.base_params)
            options = list(np.stack([ramp, period], axis=1))
        current = np.asarray(self.base_params)
        copies = None
        while sim.advance(sim.now + self.interval_s) not in ("done", "horizon"):
            start = time.perf_counter()
            copies = self._fork(sim, copies, len(options))
            for k, params in enumerate(options):
                if not np.array_equal(params, current):  # unchanged: the duty cycle runs on undisturbed
                    copies.set_policy(k, "flow", None, params)
                    copies.wake_dispatch(k)
            costs = self._price(sim, copies, setup)
            self.plan_seconds += time.perf_counter() - start
            self.decisions += 1
            best = options[int(np.argmin(costs))]
            if not np.array_equal(best, current):
                current = best
                sim.set_flow_params(best)
                sim.wake_dispatch()
        return sim

    def _price(self, sim, copies: EngineState, setup) -> np.ndarray:
        """Each copy's environment cost after running on ``horizon_s`` seconds."""
        K = copies.num_clusters
        copies.advance(np.ones(K, bool), np.full(K, sim.now + self.horizon_s))
        bs = sim.cluster.engine.block_size
        out = np.empty(K)
        for k in range(K):
            view = SimpleNamespace(table=RequestTable(sim.workload, bs, copies, k),
                                   arrived=int(copies.clusters.ptr[k]), now=float(copies.clusters.now[k]))
            out[k] = episode_cost(view, setup)
        return out
