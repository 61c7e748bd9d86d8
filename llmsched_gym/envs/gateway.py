"""``llmsched/Gateway-v0``: admission, flow control and routing together, every interval.

One module and its registration (``envs/__init__.py``): the setup builder, the driver
(one cluster, the path of the ``slo`` reward and of observers), the native vector env
and the single env. The routing part runs inside the compiled engine: the action's
per-instance values set the factors ``route_w`` by which ``ROUTER_LMETRIC_WEIGHTED``
multiplies LMetric's score, so every request is still routed on its own, in the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np
from gymnasium import spaces

from ..engine import api
from ..engine.api import compiled_form
from ..errors import ConfigError
from ..gateway.policy import RoutingPolicy, make_policy
from . import batched
from .base import LLMSchedEnv
from .core import (
    DRIVERS,
    ENV_NAMES,
    INTERVAL_KEYS,
    SETUP_BUILDERS,
    ExternalCeilings,
    ExternalRejection,
    IntervalDriver,
    RewardKeywords,
    Setup,
    build_setup,
    check_env_keywords,
)
from .docs import ARGS_DOC, OBSERVATION_DOC, REWARDS_DOC, fill
from .vector import VECTOR_ENVS, LLMSchedVectorEnv

KIND = "gateway"
#: ``admission_action``: per-band rejection probabilities (Admission-v0's action), or a
#: scale of the engine's probabilistic admitter's ``k``.
ADMISSION_ACTIONS = ("rejection", "probabilistic")
#: ``flow_action``: per-band ceilings (FlowControl-v0's default), the soft-reflective
#: ceiling's ramp and period scale (FlowControl-v0's ``action="soft-reflective"``), per-band
#: scales of a base policy's constant ceilings (``static-usage-limit`` or
#: ``priority-holdback``, whose ceilings may exceed 1), or no flow control (no gateway
#: queue: every admitted request is routed on arrival).
FLOW_ACTIONS = ("ceilings", "soft-reflective", "scaled-ceilings", "none")
#: The base policies of ``flow_action="scaled-ceilings"``: usage limits whose per-band
#: ceilings do not depend on the saturation.
CONSTANT_CEILING_CODES = {api.FLOW_STATIC: "static-usage-limit", api.FLOW_HOLDBACK: "priority-holdback"}
#: Range of the routing factors: ``4 ** (1 - 2 a)``, from 4 (a = 0) to 1/4 (a = 1).
ROUTE_RANGE = 4.0
#: Range of the probabilistic admitter's ``k`` scale: ``16 ** (2 a - 1)``, 1/16 .. 16.
ADMISSION_RANGE = 16.0
#: Range of the ceiling scales: ``2 ** (2 a - 1)``, 1/2 .. 2.
CEILING_RANGE = 2.0
#: The keywords of Gateway-v0 beyond those of every environment.


class GatewayKeywords(RewardKeywords):
    """Gateway-v0's keywords: the common ones and its action modes."""

    admission_action: Literal[ADMISSION_ACTIONS] = "rejection"
    flow_action: Literal[FLOW_ACTIONS] = "ceilings"


def route_weights(a: np.ndarray) -> np.ndarray:
    """Factors on LMetric's per-instance scores of routing actions ``a`` in [0, 1]:
    ``4 ** (1 - 2 a)`` (0.5 -> 1.0 exactly: LMetric; 1 -> 1/4, preferred; 0 -> 4, avoided)."""
    return np.power(ROUTE_RANGE, 1.0 - 2.0 * np.asarray(a, dtype=float))


def admission_scale(a: np.ndarray) -> np.ndarray:
    """Scale of the probabilistic admitter's ``k`` of actions ``a``: ``16 ** (2 a - 1)``
    (0.5 -> 1.0 exactly)."""
    return np.power(ADMISSION_RANGE, 2.0 * np.asarray(a, dtype=float) - 1.0)


def ceiling_scales(a: np.ndarray) -> np.ndarray:
    """Factors on the base policy's per-band ceilings of ``scaled-ceilings`` actions ``a``:
    ``2 ** (2 a - 1)`` (0.5 -> 1.0 exactly: the base policy)."""
    return np.power(CEILING_RANGE, 2.0 * np.asarray(a, dtype=float) - 1.0)


def scaled_ceilings(a: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Per-band ceilings of ``scaled-ceilings`` actions ``a`` (last axis: the bands): the
    base ceilings times :func:`ceiling_scales`, then their cumulative minimum (a lower band
    never gets more than a higher one, as with ``flow_action="ceilings"``)."""
    return np.minimum.accumulate(np.asarray(base, float) * ceiling_scales(a), axis=-1)


def flow_params(a: np.ndarray, base: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """``(ramp, period_scale)`` of soft-reflective actions ``a`` (shape ``(2,)`` or ``(2, n)``):
    ``ramp = base_ramp x 2 a[0]``, ``period_scale = base_period_scale x 4 ** (2 a[1] - 1)``;
    (0.5, 0.5) is the base policy exactly (with the published base, FlowControl-v0's
    ``soft_reflective_params``)."""
    a = np.asarray(a, dtype=float)
    return base[0] * (2.0 * a[0]), base[1] * np.power(4.0, 2.0 * a[1] - 1.0)


@dataclass
class GatewayKnobs:
    """What one Gateway-v0 action sets (:func:`gateway_knobs`); ``None``: a part its modes lack."""

    rejection: np.ndarray | None  # per scenario band, rejection probabilities (admission_action="rejection")
    admission_k: float | None  # the probabilistic admitter's k (admission_action="probabilistic")
    soft_reflective: np.ndarray | None  # (ramp, period scale) (flow_action="soft-reflective")
    ceilings: np.ndarray | None  # per scenario band (flow_action="ceilings" or "scaled-ceilings")
    weights: np.ndarray  # per instance, factors on LMetric's score


def gateway_knobs(s: "GatewaySetup", a: np.ndarray) -> GatewayKnobs:
    """The knobs one action ``a`` (a checked action of setup ``s``'s space) sets: the one
    mapping from action to knobs, used by the environment's driver and by the lookahead
    planner (``baselines/lookahead.py``, ``decision=gateway``)."""
    rejection = k = soft = ceilings = None
    if s.admission_action == "rejection":
        rejection = np.zeros(len(s.band_priorities))
        rejection[list(s.sheddable)] = a[s.adm]
    else:
        k = s.base_k * float(admission_scale(a[s.adm])[0])
    if s.flow_action == "soft-reflective":
        soft = np.array(flow_params(a[s.flow], s.base_flow), float)
    elif s.flow_action == "ceilings":
        ceilings = np.minimum.accumulate(a[s.flow])
    elif s.flow_action == "scaled-ceilings":
        ceilings = scaled_ceilings(a[s.flow], s.base_ceilings)
    return GatewayKnobs(rejection, k, soft, ceilings, route_weights(a[s.route]))


class WeightedLMetric(RoutingPolicy):
    """LMetric (``base``: an ``lmetric`` or ``lmetric-no-detector`` policy) with each
    instance's score multiplied by a factor the Gateway environment sets every interval
    (``route_w`` in the engine state, 1.0 until set). It runs only in the compiled
    engine (``ROUTER_LMETRIC_WEIGHTED``), where the factors live."""

    name = "lmetric-weighted"

    def __init__(self, base: RoutingPolicy):
        self.form = compiled_form(base, api.ROUTER_PY)
        if self.form.code != api.ROUTER_LMETRIC:
            raise ConfigError(f"router={base.name!r} is invalid for Gateway-v0: its routing part weights LMetric's "
                              "score; choose lmetric or lmetric-no-detector (with their parameters)")

    def route(self, request, view) -> int:
        raise ConfigError("lmetric-weighted runs only in the compiled engine (Gateway-v0's router)")

    def compiled_form(self):
        return api.CompiledForm(api.ROUTER_LMETRIC_WEIGHTED, self.form.params, self.form.needs)


# ====================================================================== setup
@dataclass
class GatewaySetup(Setup):
    """A :class:`~.core.Setup` with the layout of Gateway-v0's action."""

    admission_action: str = "rejection"
    base_k: float = 0.0  # probabilistic admission: the base admitter's k
    base_flow: tuple = (1.0, 1.0)  # soft-reflective: the base (ramp, period scale)
    base_ceilings: np.ndarray | None = None  # scaled-ceilings: the base policy's per-band ceilings
    adm: slice = field(default_factory=lambda: slice(0, 0))  # the action's parts
    flow: slice = field(default_factory=lambda: slice(0, 0))
    route: slice = field(default_factory=lambda: slice(0, 0))
    centre: np.ndarray | None = None  # the action of the base combination (see GatewayEnv)


def _base_policy(value, default: str, role: str, code: int, what: str, keyword: str, mode: str):
    """The spec of a parameter-mode part's base policy (``None``: ``default``) and its
    compiled parameters; it must compile to ``code``."""
    spec = default if value is None else value
    form = compiled_form(make_policy(spec, role), -1)
    if form.code != code:
        raise ConfigError(f"{keyword}={value!r} is invalid with {mode}: the action scales the parameters of "
                          f"{what}; give {default} (with its parameters)")
    return spec, form.params


def make_gateway_setup(**kwargs) -> GatewaySetup:
    """Validate Gateway-v0's keywords and build its spaces (see :class:`GatewayEnv`)."""
    check_env_keywords(KIND, kwargs, GatewayKeywords)
    adm_mode = kwargs.pop("admission_action", "rejection")
    flow_mode = kwargs.pop("flow_action", "ceilings")
    router = kwargs.pop("router", None) or "lmetric"
    WeightedLMetric(make_policy(router, "routing"))  # validates it
    base_k, base_flow = 0.0, (1.0, 1.0)
    adm, fc = kwargs.pop("admission", None), kwargs.pop("flow_control", None)
    if adm_mode == "probabilistic":
        adm, params = _base_policy(adm, "probabilistic", "admission", api.ADMIT_PROBABILISTIC,
                                   "the engine's probabilistic admitter", "admission",
                                   "admission_action='probabilistic'")
        base_k = params[0]
    elif adm is not None:
        raise ConfigError("admission= is the agent's decision with admission_action='rejection'; it cannot be set "
                          "(with admission_action='probabilistic' it is the admitter the action scales)")
    if flow_mode == "soft-reflective":
        fc, base_flow = _base_policy(fc, "soft-reflective-ceiling", "usage-limit", api.FLOW_SOFT_REFLECTIVE,
                                     "the soft-reflective ceiling", "flow_control", "flow_action='soft-reflective'")
    elif flow_mode == "scaled-ceilings":
        fc = "static-usage-limit" if fc is None else fc
        if compiled_form(make_policy(fc, "usage-limit"), -1).code not in CONSTANT_CEILING_CODES:
            raise ConfigError(f"flow_control={fc!r} is invalid with flow_action='scaled-ceilings': the action scales "
                              f"constant per-band ceilings; give {' or '.join(CONSTANT_CEILING_CODES.values())} "
                              "(with their parameters)")
    elif fc is not None:
        raise ConfigError(f"flow_control= cannot be set with flow_action={flow_mode!r} (with "
                          "flow_action='soft-reflective' or 'scaled-ceilings' it is the policy the action scales)")
    s = build_setup(KIND, INTERVAL_KEYS, router=router, flow_control=fc, admission=adm, **kwargs)
    if not s.sheddable:
        raise ConfigError(f"scenario {s.scenario.name!r} has no sheddable class (priority < 0); "
                          "Gateway-v0's admission part needs at least one")
    B, S, I = len(s.band_priorities), len(s.sheddable), s.num_instances
    n_adm = S if adm_mode == "rejection" else 1
    n_flow = {"ceilings": B, "soft-reflective": 2, "scaled-ceilings": B, "none": 0}[flow_mode]
    base_ceilings = None
    if flow_mode == "scaled-ceilings":  # constant and non-increasing (both base policies)
        base_ceilings = np.asarray(make_policy(fc, "usage-limit").ceilings(0.0, B), float)
    setup = GatewaySetup(**{f.name: getattr(s, f.name) for f in fields(Setup)}, admission_action=adm_mode,
                         base_k=base_k, base_flow=base_flow, base_ceilings=base_ceilings, adm=slice(0, n_adm),
                         flow=slice(n_adm, n_adm + n_flow), route=slice(n_adm + n_flow, n_adm + n_flow + I))
    setup.flow_action = flow_mode
    n = n_adm + n_flow + I
    setup.action_space = spaces.Box(0.0, 1.0, (n,), np.float32)
    centre = np.full(n, 0.5, np.float32)
    if adm_mode == "rejection":
        centre[setup.adm] = 0.0
    if flow_mode == "ceilings":
        centre[setup.flow] = 1.0
    setup.centre = centre
    return setup


# ====================================================================== one cluster
class GatewayDriver(IntervalDriver):
    """One cluster of Gateway-v0 (the ``slo`` reward's and observers' path)."""

    def _simulator(self, seed):
        s = self.setup
        B = len(s.band_priorities)
        self._probs = np.zeros(B)
        self.ceilings = np.ones(B)
        self.soft_reflective = np.array(s.base_flow, float)
        self.k = s.base_k
        self.weights = np.ones(s.num_instances)
        if s.admission_action == "rejection":
            admission = ExternalRejection({p: b for b, p in enumerate(s.band_priorities)}, self._probs)
        else:
            admission = make_policy(s.admission, "admission")
        if s.flow_action in ("ceilings", "scaled-ceilings"):
            flow = ExternalCeilings(np.ones(1))
        elif s.flow_action == "soft-reflective":
            flow = make_policy(s.flow_control, "usage-limit")
        else:
            flow = None
        router = WeightedLMetric(make_policy(s.router, "routing"))
        sim = s.scenario.simulator(seed, router=router, flow_control=flow, admission=admission,
                                   horizon_s=s.horizon, batch=not self.batched)
        if s.flow_action in ("ceilings", "scaled-ceilings"):
            flow.values = np.ones(len(sim.band_priorities))  # scaled: the base's, from _start
        self._flow_policy = flow
        return sim

    def check_action(self, action) -> np.ndarray:
        return self.validate_box(action, self.setup.action_space.shape[0], "Gateway")

    def _apply(self, action):
        s, sim = self.setup, self.sim
        knobs = gateway_knobs(s, self.check_action(action))
        if knobs.rejection is not None:
            self._probs[:] = knobs.rejection
            sim.set_rejection_probs(self._probs[self._sim_bands])
        else:
            self.k = knobs.admission_k
            sim.state.set_policy(sim.c, "admission", None, (self.k,))
        if knobs.soft_reflective is not None:
            if not np.array_equal(knobs.soft_reflective, self.soft_reflective):  # unchanged: the duty cycle runs on
                self.soft_reflective = knobs.soft_reflective
                sim.set_flow_params(knobs.soft_reflective)
                sim.wake_dispatch()
        elif s.flow_action == "ceilings":
            self.ceilings = knobs.ceilings
            self._set_ceilings(wake=True)
        elif s.flow_action == "scaled-ceilings":
            if not np.array_equal(knobs.ceilings, self.ceilings):  # unchanged: no extra dispatch cycle
                self.ceilings = knobs.ceilings
                self._set_ceilings(wake=True)
        self.weights = knobs.weights
        sim.state.set_route_weights([sim.c], self.weights[None])
        return self._advance()

    def _start(self):
        if self.setup.base_ceilings is not None:  # the base policy's ceilings until an action changes them
            self.ceilings = self.setup.base_ceilings.copy()
            self._set_ceilings(wake=False)
        return super()._start()

    def _set_ceilings(self, wake: bool) -> None:
        values = self.ceilings[self._sim_bands]
        self._flow_policy.values = values
        self.sim.set_ceilings(values)
        if wake:
            self.sim.wake_dispatch()

    def info(self):
        d = super().info()
        d.update(_part_infos(self.setup, self._probs[list(self.setup.sheddable)], self.k, self.ceilings,
                             self.soft_reflective, self.weights))
        return d


def _part_infos(s: GatewaySetup, probs, k, ceilings, soft, weights) -> dict:
    """The info entries of the applied action (one cluster's values, or rows of all)."""
    d = {"rejection_prob": probs} if s.admission_action == "rejection" else {"admission_k": k}
    if s.flow_action == "soft-reflective":
        d["soft_reflective"] = soft
    elif s.flow_action in ("ceilings", "scaled-ceilings"):
        d["ceilings"] = ceilings
    d["route_weights"] = weights
    return d


# ====================================================================== vector
class GatewayVectorEnv(LLMSchedVectorEnv):
    """Native vector version of :class:`GatewayEnv`."""

    kind = KIND

    def __init__(self, num_envs: int = 1, **kwargs):
        super().__init__(num_envs, **kwargs)
        s, n = self.setup, self.num_envs
        self._k = np.full(n, s.base_k)
        self._soft = np.tile(np.array(s.base_flow, float), (n, 1))
        self._weights = np.ones((n, s.num_instances))

    def _apply_interval_actions(self, actions: np.ndarray) -> None:
        st, s = self.batch.state, self.setup
        if s.admission_action == "rejection":
            batched.apply_rejection(np.ascontiguousarray(actions[:, s.adm]), self._sheddable, self._sim_bands,
                                    st.num_bands, self._probs, st.aprob)
        else:
            self._k[:] = s.base_k * admission_scale(actions[:, s.adm.start])
            st.clusters.a0[:self.num_envs] = self._k  # the admission's first parameter
        if s.flow_action == "soft-reflective":
            self._soft[:, 0], self._soft[:, 1] = flow_params(actions[:, s.flow].T, s.base_flow)
            batched.apply_flow_params(self._soft, st.num_bands, st.bq, st.clu_f)
        elif s.flow_action == "ceilings":
            batched.apply_ceilings(np.ascontiguousarray(actions[:, s.flow]), self._sim_bands, st.num_bands, st.bq,
                                   st.clu_f, self._ceilings, st.ceil_ext, True)
        elif s.flow_action == "scaled-ceilings":  # unchanged ceilings: no extra dispatch cycle, as the base policy
            batched.apply_ceilings(scaled_ceilings(actions[:, s.flow], s.base_ceilings), self._sim_bands,
                                   st.num_bands, st.bq, st.clu_f, self._ceilings, st.ceil_ext, False)
        self._weights[:] = route_weights(actions[:, s.route])
        st.set_route_weights(np.arange(self.num_envs), self._weights)
        self._t += s.control_interval

    def _episode_start(self, clusters) -> None:
        super()._episode_start(clusters)
        s = self.setup
        for i in clusters:
            self._k[i] = s.base_k
            self._soft[i] = s.base_flow
            if s.base_ceilings is not None:  # the driver's _start wrote them to the engine state
                self._ceilings[i] = s.base_ceilings
            self._weights[i] = 1.0

    def _parts(self, rows) -> dict:
        s = self.setup
        return _part_infos(s, self._probs[rows][..., list(s.sheddable)], self._k[rows], self._ceilings[rows],
                           self._soft[rows], self._weights[rows])

    def _info_of(self, i: int) -> dict:
        info = super()._info_of(i)
        info.pop("rejection_prob")
        info.update({k: v.copy() if isinstance(v, np.ndarray) else float(v) for k, v in self._parts(i).items()})
        return info

    def _infos(self) -> dict:
        out = super()._infos()
        if self._fast:  # else the drivers' info() gave these
            out.pop("rejection_prob")
            out.pop("_rejection_prob")
            mask = np.ones(self.num_envs, bool)
            for k, v in self._parts(slice(None)).items():
                out[k], out["_" + k] = v.copy(), mask
        return out


# ====================================================================== single env
class GatewayEnv(LLMSchedEnv):
    """
    ## Description

    An LLM serving cluster behind an llm-d-style gateway, with the agent in charge of the
    gateway's three decisions at once, once per control interval (``control_interval``,
    default 100 ms of simulated time): admission (which sheddable arrivals to reject),
    flow control (when the priority band queues dispatch) and routing (which instance
    each request goes to). Routing stays per request and compiled: the action sets, for
    the interval, a factor per instance on LMetric's score ``(queued prefill + uncached
    tokens) x (in flight + 1)``, and the engine's router picks the lowest weighted score
    for every request as it leaves the gateway (with LMetric's hotspot detector, as
    configured by ``router``).

    ## Action Space

    ``Box(0, 1, (A + F + I,), float32)``, three parts in this order:

    1. Admission, ``A`` values. ``admission_action="rejection"`` (default): the rejection
       probability of each sheddable band (priority < 0), as Admission-v0 (``A`` = S, the
       sheddable bands). ``admission_action="probabilistic"``: one value ``a`` that scales
       the engine's probabilistic admitter (``admission``, default ``"probabilistic"``:
       reject a sheddable request with probability ``min(k s**power, 1)``): ``k = k_base
       x 16 ** (2 a - 1)`` (``A`` = 1; the admitter treats every sheddable band alike).
    2. Flow control, ``F`` values. ``flow_action="ceilings"`` (default): one ceiling per
       band, made non-increasing, as FlowControl-v0 (``F`` = B).
       ``flow_action="soft-reflective"``: the parameters of the engine's soft-reflective
       duty cycle (``flow_control``, default ``"soft-reflective-ceiling"``), ``ramp =
       ramp_base x 2 a[0]`` and ``period_scale = period_scale_base x 4 ** (2 a[1] - 1)``
       (``F`` = 2), as FlowControl-v0's ``action="soft-reflective"``.
       ``flow_action="scaled-ceilings"``: one factor per band on the constant ceilings of a
       base usage limit (``flow_control``, default ``"static-usage-limit"``, or a
       ``priority-holdback`` spec): ``ceiling_b = base_b x 2 ** (2 a[b] - 1)`` (1/2 .. 2x
       the base), made non-increasing (``F`` = B). Unlike ``"ceilings"`` it reaches
       ceilings above 1: with llm-d's utilization detector a ceiling of 1.2 holds a band
       only once the mean endpoint is past 1.2 of its queue or KV threshold.
       ``flow_action="none"``: no flow control, no gateway queue (``F`` = 0): every
       admitted request is routed when it arrives.
    3. Routing, ``I`` values (one per instance): instance ``i``'s LMetric score is
       multiplied by ``4 ** (1 - 2 a[i])`` for the interval (1 -> x1/4, preferred; 0 -> x4,
       avoided; 0.5 -> x1, LMetric itself).

    The centre action (``env.unwrapped.setup.centre``, also ``BaselineAgent("centre",
    env)``): 0.5 for every parameter-mode value and every instance, 0 for rejection
    probabilities, 1 for ceilings (0.5 for ceiling scales). Except with ``flow_action="ceilings"`` it reproduces a
    baseline combination request for request: ``router`` with the admission part's base
    (``admission``, default ``probabilistic``; with ``"rejection"``: ``always-admit``) and
    the flow part's (``flow_control``, default ``soft-reflective-ceiling``, with
    ``"scaled-ceilings"`` ``static-usage-limit``; with ``"none"``: no flow control), so a policy can start there and learn adjustments. ``info`` holds
    the values applied: ``rejection_prob`` or ``admission_k``, ``ceilings`` or
    ``soft_reflective`` (ramp, period scale; none without flow control), and
    ``route_weights`` (the factors).

    ## Observation Space

    A ``Dict`` of float32 ``Box``es, the keys of the interval environments (FlowControl-v0,
    Admission-v0): the cluster as the gateway sees it, including the per-instance
    quantities LMetric's score is made of (``in_flight``, ``prefill_tokens``) and the
    scraped load (``running``, ``waiting``, ``kv_util``), plus

    =====================  =========  ===========  ==========================================
    band_arrival_rate      (B,)       [0, 2] log   arrivals per band in the last interval,
                                                   req/s (count scale)
    =====================  =========  ===========  ==========================================

<<OBS>>

    ## Rewards

<<REWARDS>>

    A step's reward covers one control interval. Rejecting costs the rejected request's
    ``unserved_penalty_s`` (weighted) at once, so shedding pays only when it saves more
    waiting than it costs.

    ## Starting State

    The simulator of a fresh workload drawn from the scenario at time 0 (nothing has
    arrived); the first action applies to ``[0, control_interval)``.

    ## Episode End

    1. Termination: every request of the workload has finished or left.
    2. Truncation: the simulated clock reaches ``horizon``.

    ## Arguments

<<ARGS>>

    Gateway keywords: ``control_interval`` (s, default 0.1); ``admission_action``
    (``"rejection"``, default, or ``"probabilistic"``) and ``flow_action``
    (``"ceilings"``, default, ``"soft-reflective"``, ``"scaled-ceilings"`` or ``"none"``), see
    Action Space; ``router``
    (default ``"lmetric"``; ``lmetric`` or ``lmetric-no-detector`` with their parameters:
    the LMetric the routing part weights); ``admission`` (only with
    ``admission_action="probabilistic"``: the admitter the action scales, a
    ``probabilistic`` spec) and ``flow_control`` (only with
    ``flow_action="soft-reflective"``: a ``soft-reflective-ceiling`` spec; with
    ``"scaled-ceilings"``: a ``static-usage-limit`` or ``priority-holdback`` spec). A scenario
    without a sheddable class is refused with ``ConfigError``.

    ## Version History

    * v0: Initial version. ``flow_action="scaled-ceilings"`` was added later (issue #16);
      the other modes and the defaults are unchanged.
    """

    kind = KIND


GatewayEnv.__doc__ = fill(GatewayEnv.__doc__, OBS=OBSERVATION_DOC, REWARDS=REWARDS_DOC, ARGS=ARGS_DOC)

# Registration of the kind (the gymnasium id is registered by envs/__init__.py).
SETUP_BUILDERS[KIND] = make_gateway_setup
DRIVERS[KIND] = GatewayDriver
VECTOR_ENVS[KIND] = GatewayVectorEnv
ENV_NAMES[KIND] = "Gateway"
