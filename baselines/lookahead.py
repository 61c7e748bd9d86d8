"""Lookahead planning on forked clusters: how far from optimal a gateway heuristic is.

At every routing decision the planner copies the cluster as it stands into one slot per
candidate instance (``EngineState.fork``: queues, running batches, prefix caches, the
random generator), sends the pending request of copy ``k`` to candidate ``k``, lets every
copy run on for ``horizon_s`` seconds under the base heuristic (compiled, all copies in one
batched call), prices each copy with the Routing environment's own cost (TTFT per request,
priority-weighted, censored at the copy's end, unserved requests charged the penalty:
``llmsched_gym.envs.core.episode_cost``), and sends the request where its copy cost least.

The real cluster is routed from Python (``Simulator.take_over_routing``); its state keeps
the base router's books (llm-d's and SGLang's prefix indexes, tokens sent), so a copy handed
back to the compiled router continues exactly as the heuristic would. State a router keeps
at decision time (LMetric's detector window, the TPOT windows of ``llm-d-predicted-latency``,
``preble`` and ``polyserve``, round-robin's pointer) is not updated by decisions taken
from Python: the copies continue from what it held when routing was taken over.

``mode=oracle``: the copies see the true future arrivals (the workload itself). It is not a
deployable policy, and not a proof of optimality either (one decision at a time, the base
heuristic after it); it bounds how much a router that could see the next ``horizon_s``
seconds gains over the heuristic. ``candidates=base`` offers only the base heuristic's own
choice: the planner then routes exactly as the heuristic (a check of the machinery).

``mode=mpc``: a deployable online policy. The copies do not see the future: each candidate
runs on ``samples`` sampled futures, common to every candidate of a decision, and the
planner departs from the base heuristic's own choice only for a candidate that is cheaper in
total and in every sampled future (where its model of the future is unsure, it does what
the heuristic does). A sampled future's arrival times are those of the scenario's own
arrival model under a fresh seed (its workload regenerated, drawn once per run); each
sampled request is a copy of a request that has finished already (its lengths, priority and
prefix, so its prefix is one the cluster may cache; ``EngineState.replace_future``), drawn
at random; before any has finished, of one that has arrived. Each sampled future has its own
random generator as well.

``decision=flow`` plans the usage limit instead, once every ``interval_s``: the options are
the compiled ``base_flow`` policy as it is and the soft-reflective ceiling with a ``grid`` x
``grid`` set of (ramp, period scale) settings, FlowControl-v0's ``soft-reflective`` action
(``llmsched_gym.envs.gateway.flow_params``: actions 0.25..0.75, centred on ``base_flow``'s
parameters if it is a soft-reflective ceiling, else on the default's), priced with the
FlowControl environment's cost; the chosen option runs until the next decision. Offered only
the base (``candidates=base``), it is the base policy exactly.

``decision=admission`` plans admission the same way: the options are the compiled
``base_admission`` policy, or rejecting every sheddable band's arrivals (priority < 0) with
one of ``grid`` probabilities in [0, 1] (Admission-v0's action, the same level for every
sheddable band), priced with the Admission environment's cost (a rejection costs its
penalty at once).

Runs as a gateway controller: ``compare --policies 'lmetric-no-detector;gateway=lookahead'``,
``compare --policies 'lmetric-no-detector;gateway=lookahead:mode=mpc,samples=4'``,
``compare --scenario codegen --paper-qps 16 --policies 'soft-reflective-ceiling;gateway=lookahead:decision=flow'``,
``compare --scenario codegen --paper-qps 16 --policies 'probabilistic;gateway=lookahead:decision=admission'``.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np

from baselines.planning import CopyPool, FutureModel, Pending, choose, price_copies, routing_costs
from llmsched_gym.engine.api import (
    ADMIT_BAND_PROBS,
    ADMIT_PY,
    FLOW_PY,
    FLOW_SOFT_REFLECTIVE,
    ROUTER_PY,
    EngineState,
    compiled_form,
)
from llmsched_gym.envs.core import make_setup
from llmsched_gym.envs.gateway import flow_params
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import GatewayController, make_policy, register_policy
from llmsched_gym.validation import ranged

#: The code a policy's compiled form has when it has none (it runs in Python), per role.
PY_CODES = {"routing": ROUTER_PY, "usage-limit": FLOW_PY, "admission": ADMIT_PY}

#: Seconds a copy runs past a decision, and between flow decisions.
PlanSeconds = ranged(float, gt=0, le=600)


@register_policy("lookahead")
class LookaheadPlanner(GatewayController):
    """Route each request (or set flow control or admission every ``interval_s``) where a
    forked copy of the cluster, run on ``horizon_s`` seconds, cost least (see the module
    docstring).

    Args:
        decision: ``routing`` (every request), ``flow`` (the usage limit) or ``admission``
            (every ``interval_s``).
        mode: ``oracle`` (the copies see the true future arrivals) or ``mpc`` (sampled futures).
        horizon_s: seconds each copy runs past the decision.
        base: the compiled router the copies continue with, and whose choice
            ``candidates=base`` offers.
        candidates: every option (``all``: each serving instance, or the flow grid), or only
            the base policy's own (``base``).
        base_flow: the compiled usage limit ``decision=flow`` keeps or replaces by a
            soft-reflective setting.
        interval_s: seconds between flow or admission decisions.
        grid: settings per soft-reflective parameter (odd: centred on the base's), and the
            rejection levels in [0, 1] of ``decision=admission``.
        samples: ``mpc``: sampled futures per candidate (common to all candidates).
        base_admission: the compiled admission policy ``decision=admission`` keeps or overrides.
    """

    name = "lookahead"
    description = ("lookahead planner on forked clusters (oracle: sees future arrivals, not deployable; "
                   "mpc: sampled futures)")

    def __init__(self, decision: Literal["routing", "flow", "admission"] = "routing",
                 mode: Literal["oracle", "mpc"] = "oracle", horizon_s: PlanSeconds = 1.0,
                 base: str = "lmetric-no-detector", candidates: Literal["all", "base"] = "all",
                 base_flow: str = "soft-reflective-ceiling", interval_s: PlanSeconds = 1.0,
                 grid: ranged(int, ge=1, le=9) = 3, samples: ranged(int, ge=1, le=64) = 4,
                 base_admission: str = "probabilistic"):
        if grid % 2 == 0:  # the declared ranges are checked before this runs (make_policy, the constructor)
            raise ConfigError(f"lookahead grid={grid!r} is invalid; it must be odd (the base setting is the centre)")
        self.form = self._compiled(base, "routing", "base")
        self.flow_form = self._compiled(base_flow, "usage-limit", "base_flow")
        self.reflective = self._compiled("soft-reflective-ceiling", "usage-limit", "base_flow")
        self.admission_form = self._compiled(base_admission, "admission", "base_admission")
        self.decision, self.mode, self.horizon_s, self.base, self.candidates = (
            decision, mode, float(horizon_s), base, candidates)
        self.base_flow, self.interval_s, self.grid = base_flow, float(interval_s), int(grid)
        self.base_admission = base_admission
        self.samples = int(samples) if mode == "mpc" else 1
        self.decisions, self.plan_seconds = 0, 0.0

    @staticmethod
    def _compiled(spec: str, role: str, key: str):
        try:
            form = compiled_form(make_policy(spec, role), PY_CODES[role])
        except ConfigError as e:
            raise ConfigError(f"lookahead {key}={spec!r} is invalid: {e}") from None
        if form.code == PY_CODES[role]:
            raise ConfigError(f"lookahead {key}={spec!r} is invalid: the copies need a compiled policy")
        return form

    def run(self, scenario, seed: int):
        gateway = {"routing": {"router": self.base}, "flow": {"flow_control": self.base_flow},
                   "admission": {"admission": self.base_admission}}[self.decision]
        sim = scenario.simulator(seed, **gateway)
        if sim.state.clusters.flow[sim.c] == FLOW_PY or sim.state.clusters.admit[sim.c] == ADMIT_PY:
            raise ConfigError("lookahead needs the scenario's flow control and admission to be compiled policies")
        if sim.faults is not None:  # the copies advance the state directly; faults are applied by the simulator
            raise ConfigError("lookahead does not plan under a fault schedule yet; remove the scenario's faults")
        if self.decision != "routing" and sim.state.clusters.router[sim.c] == ROUTER_PY:
            raise ConfigError(f"lookahead decision={self.decision} needs a compiled router in the scenario")
        self.model = (FutureModel.of_scenario(scenario, seed, self.samples, self.horizon_s, sim.workload.arrival_s)
                      if self.mode == "mpc" else None)
        self.pool = CopyPool()
        return {"routing": self._run_routing, "flow": self._run_flow,
                "admission": self._run_admission}[self.decision](sim, scenario)

    @property
    def futures(self) -> list[np.ndarray] | None:
        """``mode=mpc``: the arrival times of the run's sampled futures (None under ``oracle``)."""
        return None if self.model is None else self.model.arrivals

    def _run_routing(self, sim, scenario):
        router = sim.take_over_routing()
        setup = make_setup("routing", scenario=scenario)
        first = int(sim.state.clusters.nprefill[sim.c])  # P/D: requests go to the decode pool
        while sim.advance() == "route":
            own = int(router.route(sim.pending_info, sim.current_view()))
            cands = [own] if self.candidates == "base" else list(range(first, sim.serving))
            start = time.perf_counter()
            costs = routing_costs(sim.state, [Pending(sim.c, sim.pending_route, cands, self.model)], self.form,
                                  self.samples, self.horizon_s, setup, self.pool)[0]
            self.plan_seconds += time.perf_counter() - start
            self.decisions += 1
            sim.route(cands[choose(costs, cands.index(own))])
        return sim

    def _run_flow(self, sim, scenario):
        """Options: the base usage limit as it is, and a ``grid`` x ``grid`` set of soft-reflective
        ceilings (around the base's parameters if it is one, else the default's)."""
        base = (self.flow_form.code, tuple(self.flow_form.params))
        options = [base]
        if self.candidates == "all":
            centre = self.flow_form if self.flow_form.code == FLOW_SOFT_REFLECTIVE else self.reflective
            a = np.linspace(0.25, 0.75, self.grid)
            ramp, period = flow_params(np.array(np.meshgrid(a, a)).reshape(2, -1), centre.params)
            options += [o for o in ((FLOW_SOFT_REFLECTIVE, (float(r), float(p))) for r, p in zip(ramp, period))
                        if o != base]

        def apply(state: EngineState, c: int, k: int) -> None:
            state.set_policy(c, "flow", *options[k])
            state.wake_dispatch(c)  # a blocked gateway would sleep until the next scrape

        return self._run_interval(sim, make_setup("flow_control", scenario=scenario), len(options), 0, apply)

    def _run_admission(self, sim, scenario):
        """Options: the base admission policy, or a rejection probability (``grid`` levels in
        [0, 1]) for every sheddable band."""
        sheddable = [b for b, p in enumerate(sim.band_priorities) if p < 0]
        if not sheddable:
            raise ConfigError(f"lookahead decision=admission needs sheddable requests (priority < 0); scenario "
                              f"{scenario.name!r} has none")
        levels = [] if self.candidates == "base" else list(np.linspace(0.0, 1.0, self.grid))
        code, params = self.admission_form.code, self.admission_form.params

        def apply(state: EngineState, c: int, k: int) -> None:
            if k == 0:
                state.set_policy(c, "admission", code, params)
                return
            state.set_policy(c, "admission", ADMIT_BAND_PROBS, ())
            state.aprob[c] = 0.0
            state.aprob[c, sheddable] = levels[k - 1]

        return self._run_interval(sim, make_setup("admission", scenario=scenario), 1 + len(levels), 0, apply)

    def _run_interval(self, sim, setup, n_options: int, base: int, apply):
        """Every ``interval_s``: fork one copy per option (x samples), ``apply`` it there, run
        them on, and keep the chosen option (:func:`choose`, against the ``base`` option)
        until the next decision. An option equal to the running one is left undisturbed (a
        duty cycle runs on)."""
        current = base
        while sim.advance(sim.now + self.interval_s) not in ("done", "horizon"):
            start = time.perf_counter()
            copies = self.pool.fork(sim.state, [sim.c], [self.model], n_options, self.samples)
            for j in range(copies.num_clusters):
                if j % n_options != current:
                    apply(copies, j, j % n_options)
            costs = price_copies(copies, np.full(copies.num_clusters, sim.now + self.horizon_s), setup)
            self.plan_seconds += time.perf_counter() - start
            self.decisions += 1
            best = choose(costs.reshape(self.samples, -1), base)
            if best != current:
                current = best
                apply(sim.state, sim.c, best)
        return sim
