"""Lookahead planning on forked clusters: how far from optimal a gateway heuristic is.

At every routing decision the planner copies the cluster as it stands into one slot per
candidate instance (``EngineState.fork``: queues, running batches, prefix caches, the
random generator), sends the pending request of copy ``k`` to candidate ``k``, lets every
copy run on for ``horizon_s`` seconds under the base heuristic (compiled, all copies in one
batched call), prices each copy with the Routing environment's own cost (TTFT per request,
priority-weighted, censored at the copy's end, unserved requests charged the penalty:
``llmsched_gym.envs.core.episode_cost``), and sends the request where its copy cost least.

The real cluster is routed from Python (``Simulator.take_over_routing``); its state keeps
the base router's books (llm-d's and SGLang's prefix indexes, tokens sent) and the state it
keeps at decision time (round-robin's pointer, LMetric's detector window, Preble's TPOT
window), updated by every decision as if the router had taken it itself, so a copy handed
back to the compiled router continues exactly as the heuristic would
(``tests/test_lookahead.py``, ``tests/test_route_state.py``).

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

``decision=gateway`` plans Gateway-v0's three decisions together, once every ``interval_s``:
the options are the base combination as it is (``base``, ``base_flow``, ``base_admission``)
and Gateway-v0 actions around it, each part moved alone: the admission part at ``grid``
levels (rejection probabilities 0..1 for every sheddable band, or the probabilistic
admitter's ``k`` scale at 0.25..0.75), the flow part likewise (0.25..0.75: the soft-reflective
parameters or the constant ceilings' scales), and each instance avoided in routing (its
LMetric score x 4). The action modes follow the base combination, whose action is the centre:
``always-admit`` gives ``admission_action="rejection"``, a ``probabilistic`` admitter
``"probabilistic"``; ``base_flow=none`` (no flow control) gives ``flow_action="none"``, a
soft-reflective ceiling ``"soft-reflective"``, ``static-usage-limit`` or ``priority-holdback``
``"scaled-ceilings"``; the router must be LMetric (the routing part weights its score). An
action is applied to a copy with the environment's own mapping
(``llmsched_gym.envs.gateway.gateway_knobs``) and priced with Gateway-v0's cost.

``decision=autoscaling`` plans the fleet size at the base scaler's decisions
(``base_scaler``, every ``interval_s``: ``llmsched_gym.autoscaling.run_autoscaled``, the
fleet it asks for at time 0 starting warm): the options are the scaler's decision and the
fleets ``target - grid // 2 .. target + grid // 2`` (with ``grid=3``: scale down, hold, scale
up; Autoscaling-v0's action). Each copy carries the fleet's books (pending cold starts,
drains, GPU time: ``Fleet.forked``; the serving set is in the engine state) and its own
copy of the scaler, which decides on in the copy every ``interval_s`` after the first; it is
priced with Autoscaling-v0's cost (weighted SLO misses plus ``gpu_cost`` x GPU-seconds). The
horizon should outlast a cold start (Qwen3-14B on an H100: 44.8 s), or scaling up never pays
within it. Under ``mpc`` a draining copy's stop time sees only the requests of the real
workload's length (``Fleet`` reads the request table), not sampled ones past it.

Every decision refuses a fault schedule, and ``mpc`` a trace (it needs an arrival model).

Runs as a gateway controller: ``compare --policies 'lmetric-no-detector;gateway=lookahead'``,
``compare --policies 'lmetric-no-detector;gateway=lookahead:mode=mpc,samples=4'``,
``compare --scenario codegen --paper-qps 16 --policies 'soft-reflective-ceiling;gateway=lookahead:decision=flow'``,
``compare --scenario codegen --paper-qps 16 --policies 'probabilistic;gateway=lookahead:decision=admission'``,
``compare --scenario chat --paper-qps 80 --policies 'gateway=lookahead:decision=gateway,base=lmetric,base_flow=none,horizon_s=3'``,
``compare --scenario bursty-codegen --policies 'gateway=lookahead:decision=autoscaling,base_scaler=queue-aware,interval_s=15,horizon_s=90'``.
A base with more than one parameter (``probabilistic:k=0.05664,power=17.137``) does not fit a
spec string (its commas part the planner's own parameters): give it as a keyword,
``make_policy("lookahead:decision=gateway", "gateway", base_admission="probabilistic:k=0.05664,power=17.137")``
(``benchmarks/studies/headroom.py`` does).
"""

from __future__ import annotations

import copy
import time
from typing import Literal

import numpy as np

from baselines.planning import CopyPool, FutureModel, Pending, choose, price_copies, routing_costs
from llmsched_gym.autoscaling import advance_fleets, run_autoscaled
from llmsched_gym.engine.api import (
    ADMIT_ALWAYS,
    ADMIT_BAND_PROBS,
    ADMIT_PROBABILISTIC,
    ADMIT_PY,
    FLOW_FIXED,
    FLOW_HOLDBACK,
    FLOW_NONE,
    FLOW_PY,
    FLOW_SOFT_REFLECTIVE,
    FLOW_STATIC,
    ROUTER_LMETRIC_WEIGHTED,
    ROUTER_PY,
    EngineState,
    compiled_form,
)
from llmsched_gym.envs.autoscaling import make_autoscaling_setup
from llmsched_gym.envs.core import make_setup, slo_violations
from llmsched_gym.envs.gateway import flow_params, gateway_knobs
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import GatewayController, make_policy, register_policy
from llmsched_gym.validation import ranged

#: The code a policy's compiled form has when it has none (it runs in Python), per role.
PY_CODES = {"routing": ROUTER_PY, "usage-limit": FLOW_PY, "admission": ADMIT_PY}
#: Gateway-v0's action modes whose base (centre) is a base policy of these codes.
GATEWAY_ADMISSION = {ADMIT_ALWAYS: "rejection", ADMIT_PROBABILISTIC: "probabilistic"}
GATEWAY_FLOW = {FLOW_NONE: "none", FLOW_SOFT_REFLECTIVE: "soft-reflective", FLOW_STATIC: "scaled-ceilings",
                FLOW_HOLDBACK: "scaled-ceilings"}

#: Seconds a copy runs past a decision, and between flow decisions.
PlanSeconds = ranged(float, gt=0, le=600)


@register_policy("lookahead")
class LookaheadPlanner(GatewayController):
    """Route each request (or set flow control, admission, Gateway-v0's action or the fleet
    size every ``interval_s``) where a forked copy of the cluster, run on ``horizon_s``
    seconds, cost least (see the module docstring).

    Args:
        decision: ``routing`` (every request), ``flow`` (the usage limit), ``admission``,
            ``gateway`` (Gateway-v0's action) or ``autoscaling`` (the fleet size), every
            ``interval_s``.
        mode: ``oracle`` (the copies see the true future arrivals) or ``mpc`` (sampled futures).
        horizon_s: seconds each copy runs past the decision.
        base: the compiled router the copies continue with, and whose choice
            ``candidates=base`` offers.
        candidates: every option (``all``: each serving instance, or the flow grid), or only
            the base policy's own (``base``).
        base_flow: the compiled usage limit ``decision=flow`` keeps or replaces by a
            soft-reflective setting; with ``decision=gateway`` the base combination's
            (``none``: no flow control).
        interval_s: seconds between flow, admission, gateway or scaling decisions.
        grid: settings per soft-reflective parameter (odd: centred on the base's), the
            rejection levels in [0, 1] of ``decision=admission``, the levels of each part of
            ``decision=gateway``, the fleet sizes around the target of ``decision=autoscaling``.
        samples: ``mpc``: sampled futures per candidate (common to all candidates).
        base_admission: the compiled admission policy ``decision=admission`` keeps or
            overrides; with ``decision=gateway`` the base combination's.
        base_scaler: the scaling policy ``decision=autoscaling`` starts from, whose decision
            ``candidates=base`` offers.
    """

    name = "lookahead"
    description = ("lookahead planner on forked clusters (oracle: sees future arrivals, not deployable; "
                   "mpc: sampled futures)")

    def __init__(self, decision: Literal["routing", "flow", "admission", "gateway", "autoscaling"] = "routing",
                 mode: Literal["oracle", "mpc"] = "oracle", horizon_s: PlanSeconds = 1.0,
                 base: str = "lmetric-no-detector", candidates: Literal["all", "base"] = "all",
                 base_flow: str = "soft-reflective-ceiling", interval_s: PlanSeconds = 1.0,
                 grid: ranged(int, ge=1, le=9) = 3, samples: ranged(int, ge=1, le=64) = 4,
                 base_admission: str = "probabilistic", base_scaler: str = "queue-aware"):
        if grid % 2 == 0:  # the declared ranges are checked before this runs (make_policy, the constructor)
            raise ConfigError(f"lookahead grid={grid!r} is invalid; it must be odd (the base setting is the centre)")
        if base_flow == "none" and decision != "gateway":
            raise ConfigError(f"lookahead base_flow='none' is invalid with decision={decision}; no flow control is "
                              "a base of decision=gateway only")
        self.form = self._compiled(base, "routing", "base")
        self.flow_form = None if base_flow == "none" else self._compiled(base_flow, "usage-limit", "base_flow")
        self.reflective = self._compiled("soft-reflective-ceiling", "usage-limit", "base_flow")
        self.admission_form = self._compiled(base_admission, "admission", "base_admission")
        try:
            make_policy(base_scaler, "scaling")
        except ConfigError as e:
            raise ConfigError(f"lookahead base_scaler={base_scaler!r} is invalid: {e}") from None
        self.decision, self.mode, self.horizon_s, self.base, self.candidates = (
            decision, mode, float(horizon_s), base, candidates)
        self.base_flow, self.interval_s, self.grid = base_flow, float(interval_s), int(grid)
        self.base_admission, self.base_scaler = base_admission, base_scaler
        self.samples = int(samples) if mode == "mpc" else 1
        self.decisions, self.plan_seconds = 0, 0.0
        self.fleet = None  # decision=autoscaling: the real cluster's fleet, after run

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
                   "admission": {"admission": self.base_admission}, "autoscaling": {},  # the scenario's policies
                   "gateway": {"router": self.base, "admission": self.base_admission,
                               "flow_control": None if self.flow_form is None else self.base_flow}}[self.decision]
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
        return {"routing": self._run_routing, "flow": self._run_flow, "admission": self._run_admission,
                "gateway": self._run_gateway, "autoscaling": self._run_autoscaling}[self.decision](sim, scenario)

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

    def _gateway_setup(self, scenario):
        """Gateway-v0's setup whose centre is the base combination: its action modes follow
        the base policies (always-admit: rejection probabilities, a probabilistic admitter: its
        ``k`` scaled; no flow control, a soft-reflective ceiling, or constant ceilings scaled)."""
        adm = GATEWAY_ADMISSION.get(self.admission_form.code)
        flow = GATEWAY_FLOW.get(FLOW_NONE if self.flow_form is None else self.flow_form.code)
        if adm is None:
            raise ConfigError(f"lookahead decision=gateway: base_admission={self.base_admission!r} is invalid; "
                              "Gateway-v0 plans around always-admit or a probabilistic admitter (with its parameters)")
        if flow is None:
            raise ConfigError(f"lookahead decision=gateway: base_flow={self.base_flow!r} is invalid; Gateway-v0 plans "
                              "around none, a soft-reflective-ceiling, static-usage-limit or priority-holdback spec")
        kw = {"admission_action": adm, "flow_action": flow, "router": self.base, "control_interval": self.interval_s}
        if adm == "probabilistic":
            kw["admission"] = self.base_admission
        if flow != "none":
            kw["flow_control"] = self.base_flow
        try:
            return make_setup("gateway", scenario=scenario, **kw)
        except ConfigError as e:
            raise ConfigError(f"lookahead decision=gateway: {e}") from None

    def _gateway_actions(self, setup) -> list[np.ndarray]:
        """Gateway-v0 actions beside the base: its admission part, then its flow part, at each
        of ``grid`` levels (every value of the part alike, the rest at the centre; probabilities
        0..1, parameter scales 0.25..0.75), and each instance avoided (routing factor 4)."""
        if self.candidates == "base":
            return []
        centre = setup.centre.astype(float)
        wide, narrow = np.linspace(0.0, 1.0, self.grid), np.linspace(0.25, 0.75, self.grid)
        parts = [(setup.adm, wide if setup.admission_action == "rejection" else narrow),
                 (setup.flow, wide if setup.flow_action == "ceilings" else narrow)]
        out = []
        for part, levels in parts:
            for level in levels if part.stop > part.start else ():
                a = centre.copy()
                a[part] = level
                if not np.array_equal(a, centre):
                    out.append(a)
        for i in range(setup.route.start, setup.route.stop):
            a = centre.copy()
            a[i] = 0.0
            out.append(a)
        return out

    def _run_gateway(self, sim, scenario):
        """Options: the base combination as it is, and Gateway-v0 actions
        (:meth:`_gateway_actions`) applied through the environment's own mapping
        (:func:`~llmsched_gym.envs.gateway.gateway_knobs`)."""
        setup = self._gateway_setup(scenario)
        actions = self._gateway_actions(setup)
        index = {p: b for b, p in enumerate(setup.band_priorities)}
        bands = np.array([index[p] for p in sim.band_priorities], np.int64)  # the simulator's bands, in the setup's
        B = len(bands)
        flow = (FLOW_NONE, ()) if self.flow_form is None else (self.flow_form.code, self.flow_form.params)
        admission = self.admission_form

        def apply(state: EngineState, c: int, k: int) -> None:
            if k == 0:
                state.set_policy(c, "router", self.form.code, self.form.params)
                state.set_policy(c, "flow", *flow)
                state.set_policy(c, "admission", admission.code, admission.params)
            else:
                knobs = gateway_knobs(setup, actions[k - 1])
                state.set_policy(c, "router", ROUTER_LMETRIC_WEIGHTED, self.form.params)
                state.set_route_weights([c], knobs.weights[None])
                if knobs.rejection is not None:
                    state.set_policy(c, "admission", ADMIT_BAND_PROBS, ())
                    state.aprob[c, :B] = knobs.rejection[bands]
                else:
                    state.set_policy(c, "admission", admission.code, (knobs.admission_k, *admission.params[1:]))
                if knobs.soft_reflective is not None:
                    state.set_policy(c, "flow", FLOW_SOFT_REFLECTIVE, knobs.soft_reflective)
                elif knobs.ceilings is not None:
                    state.set_policy(c, "flow", FLOW_FIXED, ())
                    state.ceil_ext[c, :B] = knobs.ceilings[bands]
            state.wake_dispatch(c)  # a blocked gateway would sleep until the next scrape

        return self._run_interval(sim, setup, 1 + len(actions), 0, apply)

    def _run_autoscaling(self, sim, scenario):
        """The base scaler decides every ``interval_s`` (``autoscaling.run_autoscaled``: the
        fleet it asks for at time 0 starts warm; Autoscaling-v0's cold start and cost); the
        options are its decision and the fleets ``target - grid // 2 .. target + grid // 2``
        (scale down, hold, scale up with ``grid=3``). Each copy carries the fleet's books
        (``Fleet.forked``) and a copy of the scaler, which decides on in the copy after the
        first interval."""
        try:
            setup = make_autoscaling_setup(scenario=scenario, control_interval=self.interval_s)
        except ConfigError as e:
            raise ConfigError(f"lookahead decision=autoscaling: {e}") from None
        slo = (sim.workload.slo_ttft_s, sim.workload.slo_tpot_s)
        def override(fleet, policy, n: int) -> int:
            self.fleet = fleet
            I, half = fleet.max_instances, self.grid // 2
            others = [] if self.candidates == "base" else range(fleet.target - half, fleet.target + half + 1)
            options = [n] + [t for t in others if 1 <= t <= I and t != n]
            start = time.perf_counter()
            copies = self.pool.fork(sim.state, [sim.c], [self.model], len(options), self.samples)
            costs = self._price_fleets(sim, copies, fleet, policy, options, setup, slo)
            self.plan_seconds += time.perf_counter() - start
            self.decisions += 1
            return options[choose(costs, 0)]

        sim, self.fleet = run_autoscaled(sim, self.base_scaler, self.interval_s, None,
                                         setup.autoscaling["cold_start_s"], override=override)
        return sim

    def _price_fleets(self, sim, copies: EngineState, fleet, policy, options: list[int], setup, slo) -> np.ndarray:
        """Each copy's Autoscaling-v0 cost after ``horizon_s`` seconds (weighted SLO misses of
        the requests that arrived in it, plus ``gpu_cost`` x its GPU-seconds), as ``samples``
        x options: copy ``j`` asks for ``options[j % len(options)]`` instances now, then its
        own copy of the scaler decides every ``interval_s``."""
        k, K = len(options), copies.num_clusters
        sims = dict(enumerate(sim.bound_copies(copies)))
        fleets = {j: fleet.forked(s) for j, s in sims.items()}
        policies = {j: copy.deepcopy(policy) for j in sims}
        for j, f in fleets.items():
            f.set_target(options[j % k])
        t, end = sim.now, sim.now + self.horizon_s
        seen = {j: s.arrived for j, s in sims.items()}
        while True:
            t = min(t + self.interval_s, end)
            advance_fleets(copies, sims, fleets, dict.fromkeys(sims, t))
            if t >= end:
                break
            for j, f in fleets.items():
                view = f.view(self.interval_s, sims[j].arrived - seen[j])
                seen[j] = sims[j].arrived
                f.set_target(int(np.clip(policies[j].scale(view), 1, f.max_instances)))
        req, clu = copies.requests, copies.clusters
        out = np.empty(K)
        for j in range(K):
            rows = slice(int(clu.req0[j]), int(clu.req0[j] + clu.ptr[j]))  # the requests that arrived
            p = req.priority[rows]
            classes, of = np.unique(p, return_inverse=True)
            bounds = [np.array([d.get(int(q)) or np.inf for q in classes], float)[of] for d in slo]
            missed = slo_violations(req.arrival[rows], req.first[rows], req.finish[rows], req.outcome[rows],
                                    req.output[rows], *bounds, float(clu.now[j]))
            out[j] = float((setup.weight(p) * missed).sum()) + setup.autoscaling["gpu_cost"] * fleets[j].gpu_seconds()
        return out.reshape(self.samples, -1)

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
