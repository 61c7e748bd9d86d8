"""Shared machinery of the environments: configuration, observations, rewards, drivers.

One *driver* runs one simulated cluster for one environment kind (routing, flow
control, admission). The single environments (:mod:`.routing`, :mod:`.flow_control`,
:mod:`.admission`) wrap one driver; the native vector environment (:mod:`.vector`)
holds ``num_envs`` drivers and writes their raw observations into shared
``(num_envs, ...)`` arrays, normalized in one batched pass. Both go through the same
driver code, so a vector sub-environment and a single environment seeded alike follow
the same trajectory for the same actions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel

from ..engine import api
from ..engine.api import CRASHED, DROPPED, EVICTED, EXPIRED, FINISHED, IN_FLIGHT, REJECTED
from ..errors import ConfigError
from ..evaluation.metrics import LazySummary
from ..gateway.policy import AdmissionPolicy, UsageLimitPolicy, make_policy
from ..scenarios import Scenario, ScenarioOverrides, check_scenario_overrides, make_scenario
from ..simulator import hint_form
from ..validation import (
    LIMIT_WHY,
    MAX_SECONDS,
    STRICT,
    Described,
    Duration,
    Name,
    check_number,
    ranged,
)

DEFAULT_SCENARIO = "codegen"
DEFAULT_QPS = 12.0  # codegen: ~0.8 of its published 15 req/s capacity
DEFAULT_HORIZON_S = 60.0
DEFAULT_CONTROL_INTERVAL_S = 0.1
REWARDS = ("ttft", "e2e", "slo")

# ============================================================================ normalization
#: transform name -> (upper bound of the normalized Box, function raw -> normalized).
#: Counts, tokens and times are log-scaled so that realistic values land in [0, 1]:
#: count 1023 -> 1.0, tokens 2**20 - 1 -> 1.0, time 655 s -> 1.0; values are clipped
#: at the upper bound (2.0), which no realistic cluster reaches.
_LOG2 = np.log(2.0)


def _count(x):
    return np.log1p(x) / (10 * _LOG2)


def _tokens(x):
    return np.log1p(x) / (20 * _LOG2)


def _time(x):
    return np.log1p(np.asarray(x) * 100.0) / (16 * _LOG2)


def _ident(x):
    return x


def _request(x):
    y = np.array(x, dtype=float)
    y[..., 0:2] = _tokens(y[..., 0:2])
    y[..., 3] = _time(y[..., 3])
    return y


TRANSFORMS = {"count": (2.0, _count), "tokens": (2.0, _tokens), "time": (2.0, _time),
              "frac": (1.0, _ident), "sat": (4.0, _ident), "request": (2.0, _request)}

OBS_DOC = """\
    =====================  =========  ===========  ==========================================
    key                    shape      normalized   raw quantity
    =====================  =========  ===========  ==========================================
    saturation             (1,)       [0, 4]       llm-d saturation (scraped), clipped at 4
    running                (I,)       [0, 1]       scraped running batch / max_num_seqs
    waiting                (I,)       [0, 2] log   scraped waiting requests (count)
    kv_util                (I,)       [0, 1]       scraped KV-cache utilization
    in_flight              (I,)       [0, 2] log   requests dispatched and not finished
    prefill_tokens         (I,)       [0, 2] log   outstanding (uncomputed) prompt tokens
    band_length            (B,)       [0, 2] log   gateway band queue lengths, band 0 first
    band_oldest_wait       (B,)       [0, 2] log   oldest wait in each band queue (s)
    metric_age             (I,)       [0, 2] log   seconds since each instance's metrics were
                                                   scraped (opt-in: ``observation={"include":
                                                   ["metric_age"]}``; what a gateway knows of a
                                                   scrape outage or a crash, never the fault)
    =====================  =========  ===========  ==========================================

    Log scales: count ``log2(1+x)/10`` (1023 -> 1), tokens ``log2(1+x)/20`` (~1M -> 1),
    time ``log2(1+100 s)/16`` (10 ms -> 0.06, 1 s -> 0.42, 655 s -> 1); all clipped to the
    Box's upper bound. ``observation={"normalize": False}`` returns the raw quantities
    instead (Box ``[0, inf)``; fractions stay in ``[0, 1]``). ``I`` = instances, ``B`` =
    priority bands of the scenario (highest priority first)."""


@dataclass
class ObsKey:
    name: str
    size: str  # "1", "I", "B", or an int as string
    transform: str


COMMON_KEYS = [
    ObsKey("saturation", "1", "sat"), ObsKey("running", "I", "frac"), ObsKey("waiting", "I", "count"),
    ObsKey("kv_util", "I", "frac"), ObsKey("in_flight", "I", "count"), ObsKey("prefill_tokens", "I", "tokens"),
    ObsKey("band_length", "B", "count"), ObsKey("band_oldest_wait", "B", "time"),
]
#: Keys an environment observes only when asked (``observation={"include": [...]}``).
OPTIONAL_KEYS = [ObsKey("metric_age", "I", "time")]


# ============================================================================ seeding
def check_workload_seed(ws) -> int:
    if isinstance(ws, (bool, np.bool_)) or not isinstance(ws, (int, np.integer)) or ws < 0:
        raise ValueError(f"options['workload_seed'] must be an integer >= 0, got {ws!r}")
    return int(ws)


def draw_workload_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31 - 1))


#: The most clusters of one vector environment (they share the engine's arrays).
MAX_ENVS = 4096


def check_num_envs(num_envs) -> int:
    return check_number("num_envs", num_envs, integer=True, ge=1, le=MAX_ENVS, why=LIMIT_WHY)


def single_reset_workload_seed(np_random: np.random.Generator, options: dict | None) -> int:
    """A single env's ``reset``: the workload seed of its episode, ``options["workload_seed"]``
    or one drawn from its generator (already seeded by ``gym.Env.reset``)."""
    options = dict(options or {})
    ws = options.pop("workload_seed", None)
    if options:
        raise ValueError(f"unknown reset option(s) {sorted(options)}; allowed: workload_seed")
    return draw_workload_seed(np_random) if ws is None else check_workload_seed(ws)



# ============================================================================ configuration
def _default_weight(p: int) -> float:
    return float(2.0 ** np.clip(p, -4, 4))


@dataclass
class Setup:
    """Everything fixed for an environment instance (shared by a vector env's clusters)."""

    kind: str
    scenario: Scenario
    horizon: float | None
    reward: str
    reward_scale: float
    unserved_penalty_s: float
    priority_weights: dict
    control_interval: float
    router: object
    flow_control: object
    admission: object
    normalize: bool
    obs_keys: list = field(default_factory=list)
    num_instances: int = 0
    band_priorities: tuple = ()
    sheddable: tuple = ()  # band indices with priority < 0
    flow_action: str = "ceilings"  # FlowControl: what the action sets (FLOW_ACTIONS)
    hint: str | None = None  # Routing: the compiled router whose choice the ``hint`` key shows
    observation_space: spaces.Dict | None = None
    action_space: spaces.Space | None = None

    def sizes(self, key: ObsKey) -> tuple[int, ...]:
        n = {"1": 1, "I": self.num_instances, "B": len(self.band_priorities)}.get(key.size)
        return (int(key.size) if n is None else n,)

    def weight(self, priority) -> np.ndarray:
        p = np.asarray(priority)
        if not p.size:
            return np.zeros(0)
        prios, of = np.unique(p, return_inverse=True)
        out = np.array([self.priority_weights.get(int(v), _default_weight(int(v))) for v in prios.tolist()])
        return out[of.reshape(p.shape)]


def build_setup(kind: str, extra_keys: list[ObsKey], *, scenario=None, reward: str = "ttft", horizon=...,
                observation: dict | None = None, reward_scale: float = 1.0, unserved_penalty_s: float | None = None,
                priority_weights: dict | None = None, control_interval: float = DEFAULT_CONTROL_INTERVAL_S,
                router=None, flow_control=..., admission=None, **overrides) -> Setup:
    """Validate an environment's keywords and build its spaces (see the env docstrings)."""
    if scenario is None:
        scenario = DEFAULT_SCENARIO
        if not any(overrides.get(k) is not None for k in ("qps", "load", "paper_qps")):
            overrides["qps"] = DEFAULT_QPS
    if "horizon_s" in overrides:
        if horizon is not ...:
            raise ConfigError("give horizon or horizon_s, not both")
        horizon = overrides.pop("horizon_s")
    sc = make_scenario(scenario, **overrides)
    if horizon is ...:
        horizon = DEFAULT_HORIZON_S
    if horizon is not None:
        horizon = float(horizon)
        if not horizon > 0:
            raise ConfigError(f"horizon={horizon!r} is invalid; it must be > 0 seconds (or None: run until drained)")
    if reward not in REWARDS:
        raise ConfigError(f"reward={reward!r} is invalid; choose one of {', '.join(REWARDS)}")
    if not (np.isfinite(reward_scale) and reward_scale > 0):
        raise ConfigError(f"reward_scale={reward_scale!r} is invalid; it must be > 0")
    if not control_interval > 0:
        raise ConfigError(f"control_interval={control_interval!r} is invalid; it must be > 0 seconds")
    penalty = sc.gateway.ttl_s if unserved_penalty_s is None else float(unserved_penalty_s)
    if not penalty >= 0:
        raise ConfigError(f"unserved_penalty_s={unserved_penalty_s!r} is invalid; it must be >= 0")
    observation = dict(observation or {})
    unknown = set(observation) - {"normalize", "exclude", "include"}
    if unknown:
        raise ConfigError(f"unknown observation option(s) {sorted(unknown)}; allowed: exclude, include, normalize")
    exclude = set(observation.get("exclude", ()))
    include = observation.get("include", ())
    optional = {k.name: k for k in OPTIONAL_KEYS}
    if isinstance(include, str) or not all(name in optional for name in include):
        raise ConfigError(f"observation include={include!r} is invalid; it must be a list of keys among "
                          f"{', '.join(optional)}")
    keys = COMMON_KEYS + extra_keys + [optional[name] for name in optional if name in include]
    bad = exclude - {k.name for k in keys}
    if bad:
        raise ConfigError(f"observation exclude: unknown key(s) {sorted(bad)}; keys: {', '.join(k.name for k in keys)}")
    keys = [k for k in keys if k.name not in exclude]
    if not keys:
        raise ConfigError("observation: every key excluded")

    # Policies: validate names now (one clear error before any simulation).
    if router is not None:
        make_policy(router, "routing")
    if flow_control is not ... and flow_control is not None:
        make_policy(flow_control, "usage-limit")
    if admission is not None:
        make_policy(admission, "admission")

    specs = sc.specs
    if specs:
        prios = {int(c.priority) for s in specs for c in s.classes}
    else:
        prios = {int(p) for p in np.unique(sc.build_workload(0).priority)}
    bands = tuple(sorted(prios, reverse=True)) or (0,)
    s = Setup(kind=kind, scenario=sc, horizon=horizon, reward=reward, reward_scale=float(reward_scale),
              unserved_penalty_s=penalty, priority_weights=dict(priority_weights or {}),
              control_interval=float(control_interval), router=router, flow_control=flow_control,
              admission=admission, normalize=bool(observation.get("normalize", True)), obs_keys=keys,
              num_instances=sc.cluster.instances, band_priorities=bands,
              sheddable=tuple(b for b, p in enumerate(bands) if p < 0))
    boxes = {}
    for k in keys:
        shape = s.sizes(k)
        if s.normalize:
            high = TRANSFORMS[k.transform][0]
        else:
            high = 1.0 if k.transform == "frac" else np.inf
        boxes[k.name] = spaces.Box(0.0, high, shape, np.float32)
    s.observation_space = spaces.Dict(boxes)
    return s


def raw_buffers(setup: Setup, n: int) -> dict[str, np.ndarray]:
    return {k.name: np.zeros((n, *setup.sizes(k))) for k in setup.obs_keys}


def normalize_obs(setup: Setup, raw: dict[str, np.ndarray], rows=None) -> dict[str, np.ndarray]:
    """Batched normalization of raw observations to fresh float32 arrays."""
    out = {}
    for k in setup.obs_keys:
        x = raw[k.name] if rows is None else raw[k.name][rows]
        if setup.normalize:  # np.clip, without its Python-level overhead
            high, f = TRANSFORMS[k.transform]
            out[k.name] = np.minimum(np.maximum(f(x), 0.0), high).astype(np.float32)
        else:
            out[k.name] = np.maximum(x, 0.0).astype(np.float32)
    return out


# ============================================================================ rewards
class CostTracker:
    """Cumulative episode cost ``C(t)``; a step's reward is ``-(C(t_k) - C(t_{k-1})) * scale``.

    Requests are tracked from arrival while *open* (their cost may still grow); a
    request's cost, once closed, is final. With the default ``ttft`` reward a request
    ``r`` of priority weight ``w_r`` costs ``w_r * T_r`` where ``T_r`` is:

    * its TTFT (first token - arrival) once it has a first token;
    * ``end - arrival + unserved_penalty_s`` if it leaves without one (rejected:
      end = arrival; expired: end = enqueue + TTL; dropped: end = dispatch);
    * ``t_end - arrival`` (censored) if it is still waiting at the episode's end
      (truncation at the horizon), and 0 if it has not arrived.

    ``e2e`` is the same with the finish time instead of the first token. ``slo``
    costs ``w_r`` per request that misses its class's TTFT or TPOT SLO or is
    unserved, charged when known (a request still waiting past its TTFT deadline at
    the end counts; one still in flight within its SLOs does not).
    """

    def __init__(self, setup: Setup, sim):
        self.setup, self.sim = setup, sim
        t = sim.table
        self.table = t
        self.w = setup.weight(t.priority)
        self.target = t.finish_t if setup.reward == "e2e" else t.first_token_t
        if setup.reward == "slo":
            wl = sim.workload
            self.slo_ttft = np.array([wl.slo_ttft_s.get(int(p)) or np.inf for p in t.priority], float) \
                if t.n else np.zeros(0)
            self.slo_tpot = np.array([wl.slo_tpot_s.get(int(p)) or np.inf for p in t.priority], float) \
                if t.n else np.zeros(0)
        self.open = np.zeros(0, np.int64)
        self.ptr = 0
        self.closed = 0.0
        self.total = 0.0
        self.closed_count = 0

    def update(self, t: float, ptr: int, final: bool) -> float:
        """Advance to time ``t`` with ``ptr`` arrivals; returns the step reward."""
        if ptr > self.ptr:
            self.open = np.concatenate([self.open, np.arange(self.ptr, ptr)])
            self.ptr = ptr
        idx = self.open
        if len(idx):
            cost, closed = (self._slo if self.setup.reward == "slo" else self._wait)(idx, t, final)
            if closed.any():
                self.closed += float(cost[closed].sum())
                self.closed_count += int(closed.sum())
                self.open = idx[~closed]
                cost = cost[~closed]
            total = self.closed + float(cost.sum())
        else:
            total = self.closed
        reward = -(total - self.total) * self.setup.reward_scale
        self.total = total
        return reward

    def _wait(self, idx, t, final):
        tb = self.table
        a = tb.arrival[idx]
        stop = self.target[idx]
        known = ~np.isnan(stop)
        out = tb.outcome[idx]
        unserved = ((out == REJECTED) | (out == EXPIRED) | (out == DROPPED)
                    | (((out == EVICTED) | (out == CRASHED)) & ~known))
        end = np.where(known, stop, np.where(unserved, tb.end_t[idx], np.inf))
        upto = np.where(known | unserved, end, t) if final else np.minimum(end, t)
        w = self.w[idx]
        cost = w * (upto - a) + (w * self.setup.unserved_penalty_s) * unserved
        closed = unserved | (known & (stop <= t)) if not final else np.ones(len(idx), bool)
        return cost, closed

    def _slo(self, idx, t, final):
        tb = self.table
        a = tb.arrival[idx]
        ft = tb.first_token_t[idx]
        fin = tb.finish_t[idx]
        out = tb.outcome[idx]
        slo_ttft = self.slo_ttft[idx]
        has_ft = ~np.isnan(ft)
        late = np.where(has_ft, ft - a > slo_ttft, t - a > slo_ttft)
        finished = out == FINISHED
        n_out = tb.output[idx]
        tpot = np.where(n_out > 1, (fin - ft) / np.maximum(n_out - 1, 1), 0.0)
        slow = finished & (np.nan_to_num(tpot, nan=0.0) > self.slo_tpot[idx])
        unserved = (out != IN_FLIGHT) & ~finished
        violated = late | slow | unserved
        closed = violated | finished | final
        return self.w[idx] * violated, closed

    @property
    def waiting(self) -> int:
        """Requests still open (e.g. waiting for their first token)."""
        return len(self.open)


def episode_cost(sim, setup: Setup, t_end: float | None = None) -> float:
    """Closed form of an episode's cost from the request table (ttft/e2e rewards).

    The sum of an episode's rewards equals ``-episode_cost * reward_scale``.
    """
    tb = sim.table
    n = sim.arrived
    return float(request_costs(tb.arrival[:n], (tb.finish_t if setup.reward == "e2e" else tb.first_token_t)[:n],
                               tb.outcome[:n], tb.end_t[:n], tb.priority[:n], sim.now if t_end is None else t_end,
                               setup).sum())


def request_costs(arrival, target, outcome, end, priority, t_end, setup: Setup) -> np.ndarray:
    """Each arrived request's share of :func:`episode_cost` (arrays of any shape; ``target``:
    the first-token or finish times the reward counts, ``t_end``: the clock, broadcastable):
    its priority weight times the seconds until its target, or until the end if it has not
    reached it, plus the penalty if it was never served."""
    unserved = np.isin(outcome, (REJECTED, EXPIRED, DROPPED, EVICTED, CRASHED))
    T = np.where(~np.isnan(target), target - arrival,
                 np.where(unserved, end - arrival + setup.unserved_penalty_s, t_end - arrival))
    return setup.weight(priority) * T


# ============================================================================ external policies
class ExternalCeilings(UsageLimitPolicy):
    """Usage limits set from outside (the FlowControl environment's action)."""

    name = "external-ceilings"

    def __init__(self, values: np.ndarray):
        self.values = values

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        return self.values

    def compiled_form(self):  # the kernel reads the values the driver writes (Simulator.set_ceilings)
        return api.FLOW_FIXED, ()


class ExternalRejection(AdmissionPolicy):
    """Reject a request of band ``b`` with probability ``p[b]`` (drawn from the gateway rng)."""

    name = "external-rejection"

    def __init__(self, band_of: dict, probs: np.ndarray):
        self.band_of, self.probs = band_of, probs

    def admit(self, request, view) -> bool:
        p = self.probs[self.band_of[request.priority]]
        return not (p > 0.0 and view.rng.random() < p)

    def compiled_form(self):  # the kernel reads Simulator.set_rejection_probs
        return api.ADMIT_BAND_PROBS, ()


# ============================================================================ drivers
class Driver:
    """One simulated cluster of one environment kind."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.sim = None
        self._tracker: CostTracker | None = None
        self._req_band_of: np.ndarray | None = None
        self.over = True
        self.steps = 0
        self.observer = None  # a RoutingPolicy kept informed (BaselineAgent)
        self.batched = False  # set by a vector env that places simulators in its shared state
        self._band_index = {p: b for b, p in enumerate(setup.band_priorities)}

    # --- to implement
    def _simulator(self, seed: int):
        raise NotImplementedError

    def _start(self) -> str:
        raise NotImplementedError

    def _apply(self, action) -> str:
        raise NotImplementedError

    def _extra_obs(self, raw: dict, row: int) -> None:
        pass

    # --- common
    def attach_observer(self) -> None:
        """Reset the observer policy for this episode; a router also gets the
        simulator's dispatch/finish hooks (as if it were the simulator's router)."""
        self.observer.reset(self.setup.num_instances, self.sim.rng)
        if self.setup.kind == "routing":
            self.sim.router = self.observer

    def reset(self, seed: int) -> None:
        self.prepare(seed)
        self.start()

    def prepare(self, seed: int) -> None:
        """Build the next episode's simulator; with ``batched`` set it is not started until
        a vector environment has placed it in its shared state (see :meth:`start`)."""
        self.seed = int(seed)
        self.sim = self._simulator(self.seed)

    def start(self) -> None:
        """Begin the episode of the prepared simulator (up to its first decision)."""
        seed = self.seed
        self._tracker = None
        self._req_band_of = None
        self.steps = 0
        self.over = False
        self._sim_bands = np.array([self._band_index[p] for p in self.sim.band_priorities], np.int64)
        if self.observer is not None:
            self.attach_observer()
        status = self._start()
        if status != "route" and self.setup.kind == "routing":
            raise RuntimeError(f"episode (seed {seed}) ended before its first routing decision ({status}); "
                               "is the workload empty or every request rejected?")

    @property
    def tracker(self) -> CostTracker:
        """The episode's cost tracker, built on first use: a vector env's fused step keeps
        its own (docs/environments.md), so most episodes never need this one."""
        if self._tracker is None:
            self._tracker = CostTracker(self.setup, self.sim)
        return self._tracker

    @property
    def _req_band(self) -> np.ndarray:
        """The scenario band of every request of the episode (built on first use)."""
        if self._req_band_of is None:
            prios, of_request = np.unique(self.sim.table.priority, return_inverse=True)
            self._req_band_of = np.array([self._band_index[int(p)] for p in prios], np.int64)[of_request]
        return self._req_band_of

    def step(self, action) -> tuple[float, bool, bool]:
        if self.over:
            raise RuntimeError("the episode is over; call reset() before step()")
        status = self._apply(action)
        self.steps += 1
        terminated = status == "done"
        truncated = status == "horizon"
        self.over = terminated or truncated
        reward = self.tracker.update(self.sim.now, self.sim.arrived, self.over)
        return reward, terminated, truncated

    def write_obs(self, raw: dict, row: int) -> None:
        sim, setup = self.sim, self.setup
        v = sim.current_view()
        for key in raw:
            if key == "saturation":
                raw[key][row, 0] = v.saturation
            elif key == "running":
                raw[key][row] = v.running / setup.scenario.cluster.engine.max_num_seqs
            elif key == "waiting":
                raw[key][row] = v.waiting
            elif key == "kv_util":
                raw[key][row] = v.kv_util
            elif key == "in_flight":
                raw[key][row] = v.in_flight
            elif key == "prefill_tokens":
                raw[key][row] = v.queued_prefill_tokens
            elif key == "band_length":
                raw[key][row] = 0.0
                raw[key][row, self._sim_bands] = v.band_lengths
            elif key == "band_oldest_wait":
                raw[key][row] = 0.0
                raw[key][row, self._sim_bands] = v.band_oldest_wait_s
            elif key == "metric_age":
                raw[key][row] = v.metrics_age_s
        self._extra_obs(raw, row)

    def action_mask(self) -> np.ndarray | None:
        return None

    def info(self) -> dict:
        tr = self.tracker
        return {"sim_time": float(self.sim.now), "arrivals": int(self.sim.arrived),
                "open_requests": tr.waiting, "episode_cost": tr.total}

    def summary(self) -> Mapping:
        """The harness's metrics of this episode so far (``llmsched_gym.evaluation.metrics.summarize``,
        computed when first read: :class:`~llmsched_gym.evaluation.metrics.LazySummary`)."""
        return LazySummary(self.sim)

    def final_info(self) -> dict:
        return {"episode": {"return": -self.tracker.total * self.setup.reward_scale, "length": self.steps,
                            "seed": self.seed, "metrics": self.summary()}}

    def validate_box(self, action, n: int, what: str) -> np.ndarray:
        a = np.asarray(action, dtype=float) if not isinstance(action, np.ndarray) else action.astype(float, copy=False)
        if a.shape != (n,):
            raise ValueError(f"{what}: action must have shape ({n},), got {a.shape}")
        if not (a.min() >= -1e-6 and a.max() <= 1 + 1e-6):  # NaN fails both
            if not np.isfinite(a).all():
                raise ValueError(f"{what}: action has non-finite values: {a}")
            raise ValueError(f"{what}: action values must lie in [0, 1], got {a}")
        return np.minimum(np.maximum(a, 0.0), 1.0)


class RoutingDriver(Driver):
    def _simulator(self, seed):
        s = self.setup
        fc = None if s.flow_control is ... else s.flow_control
        return s.scenario.simulator(seed, router="external", flow_control=fc, batch=not self.batched,
                                    admission=s.admission or "always-admit", horizon_s=s.horizon, hint=s.hint)

    def _start(self):
        return self.sim.advance()

    def check_action(self, action) -> int:
        I = self.setup.num_instances
        a = action
        if isinstance(a, np.ndarray):
            if a.size != 1:
                raise ValueError(f"Routing: action must be one instance index, got an array of shape {a.shape}")
            a = a.reshape(())[()]
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise ValueError(f"Routing: action must be an integer instance index in [0, {I - 1}], got {action!r}")
        if not 0 <= a < I:
            raise ValueError(f"Routing: action {int(a)} is out of range; valid instances are 0..{I - 1}")
        P = self.setup.scenario.cluster.prefill_instances
        if a < P:
            raise ValueError(f"Routing: action {int(a)} is a prefill instance; on this P/D cluster the action is "
                             f"the decode instance, {P}..{I - 1} (the P/D decision picks the prefill instance)")
        return int(a)

    def _apply(self, action):
        self.sim.route(self.check_action(action))
        return self.sim.advance()

    def _extra_obs(self, raw, row):
        sim = self.sim
        if "hint" in raw:  # computed once per decision: a randomized hint router draws from sim.hint_rng
            raw["hint"][row] = 0.0
            if sim.pending_route is not None:
                raw["hint"][row, sim.suggest(sim.pending_route)] = 1.0
        info = sim.pending_info
        if info is None:  # episode over: no current request
            for k in ("prefix_hit", "request"):
                if k in raw:
                    raw[k][row] = 0.0
            return
        if "prefix_hit" in raw:
            raw["prefix_hit"][row] = sim.prefix_hit_tokens(info) / max(info.input_tokens, 1)
        if "request" in raw:
            B = len(self.setup.band_priorities)
            r = raw["request"][row]
            r[0] = info.input_tokens
            r[1] = info.expected_output_tokens
            r[2] = self._band_index[info.priority] / max(B - 1, 1)
            r[3] = sim.now - info.arrival_s

    def action_mask(self):
        sim = self.sim
        I = self.setup.num_instances
        if sim is None or sim.pending_route is None:
            return np.ones(I, bool)
        r = sim.pending_route
        mask = sim.fits(r)
        mask = mask if mask.any() else np.ones(I, bool)
        mask[:self.setup.scenario.cluster.prefill_instances] = False  # P/D: the action is the decode instance
        return mask


class IntervalDriver(Driver):
    """Drivers stepping every ``control_interval`` seconds (flow control, admission)."""

    def _start(self):
        self._t = self.sim.now
        self._prev_ptr = 0
        self._last_arrivals = np.zeros(len(self.setup.band_priorities))
        return "time"

    def _advance(self):
        sim = self.sim
        self._t += self.setup.control_interval
        prev = sim.arrived
        status = sim.advance(self._t)
        if "band_arrival_rate" in self.setup.observation_space.spaces:
            self._last_arrivals = np.bincount(self._req_band[prev:sim.arrived],
                                              minlength=len(self.setup.band_priorities)) / self.setup.control_interval
        return status

    def _extra_obs(self, raw, row):
        if "band_arrival_rate" in raw:
            raw["band_arrival_rate"][row] = self._last_arrivals


class FlowControlDriver(IntervalDriver):
    def _simulator(self, seed):
        s = self.setup
        self.ceilings = np.ones(len(s.band_priorities))
        self.soft_reflective = np.ones(2)  # (ramp, period scale)
        if s.flow_action == "soft-reflective":  # the engine's own duty cycle, parameters set per interval
            self._policy = make_policy("soft-reflective-ceiling", "usage-limit")
        else:
            self._policy = ExternalCeilings(np.ones(1))
        sim = s.scenario.simulator(seed, router=s.router or "llm-d", flow_control=self._policy,
                                   admission=s.admission or "always-admit", horizon_s=s.horizon,
                                   batch=not self.batched)
        if s.flow_action == "ceilings":
            self._policy.values = np.ones(len(sim.band_priorities))
        return sim

    def check_action(self, action) -> np.ndarray:
        n = 2 if self.setup.flow_action == "soft-reflective" else len(self.setup.band_priorities)
        return self.validate_box(action, n, "FlowControl")

    def _apply(self, action):
        a = self.check_action(action)
        if self.setup.flow_action == "soft-reflective":
            params = np.array(soft_reflective_params(a), float)
            if not np.array_equal(params, self.soft_reflective):  # unchanged: the duty cycle runs on undisturbed
                self.soft_reflective = params
                self.sim.set_flow_params(params)
                self.sim.wake_dispatch()
        else:
            self.ceilings = np.minimum.accumulate(a)
            self._policy.values[:] = self.ceilings[self._sim_bands]
            self.sim.set_ceilings(self._policy.values)
            self.sim.wake_dispatch()
        return self._advance()

    def info(self):
        d = super().info()
        if self.setup.flow_action == "soft-reflective":
            d["soft_reflective"] = self.soft_reflective.copy()
        else:
            d["ceilings"] = self.ceilings.copy()
        return d


class AdmissionDriver(IntervalDriver):
    def _simulator(self, seed):
        s = self.setup
        self._probs = np.zeros(len(s.band_priorities))
        band_of = {p: b for b, p in enumerate(s.band_priorities)}
        self._policy = ExternalRejection(band_of, self._probs)
        fc = None if s.flow_control is ... else s.flow_control
        return s.scenario.simulator(seed, router=s.router or "llm-d", flow_control=fc, admission=self._policy,
                                    batch=not self.batched,
                                    horizon_s=s.horizon)

    def check_action(self, action) -> np.ndarray:
        return self.validate_box(action, len(self.setup.sheddable), "Admission")

    def _apply(self, action):
        a = self.check_action(action)
        self._probs[list(self.setup.sheddable)] = a
        self.sim.set_rejection_probs(self._probs[self._sim_bands])
        return self._advance()

    def info(self):
        d = super().info()
        d["rejection_prob"] = self._probs[list(self.setup.sheddable)].copy()
        return d


DRIVERS = {"routing": RoutingDriver, "flow_control": FlowControlDriver, "admission": AdmissionDriver}

ROUTING_KEYS = [ObsKey("prefix_hit", "I", "frac"), ObsKey("request", "4", "request")]
#: Routing-v0 with ``hint=<router>``: one-hot of that compiled router's choice for the current request.
HINT_KEY = ObsKey("hint", "I", "frac")
INTERVAL_KEYS = [ObsKey("band_arrival_rate", "B", "count")]
ALL_OBS_KEYS = COMMON_KEYS + ROUTING_KEYS + INTERVAL_KEYS + OPTIONAL_KEYS + [HINT_KEY]


#: Environment kind -> the name in its id (``llmsched/<name>-v0``), for messages.
ENV_NAMES = {"routing": "Routing", "flow_control": "FlowControl", "admission": "Admission"}
#: Environment kinds defined in their own module (e.g. :mod:`.gateway`): kind -> a function
#: ``(**kwargs) -> Setup`` that validates the keywords and builds the spaces. Such a module
#: also registers its driver in :data:`DRIVERS`, its vector env in ``vector.VECTOR_ENVS``,
#: its name in :data:`ENV_NAMES`, and its id in ``envs/__init__.py``'s ``ENV_IDS``.
SETUP_BUILDERS: dict = {}

class ObservationOptions(BaseModel):
    """An environment's ``observation`` keyword: keys to leave out, optional keys to add
    (:data:`OPTIONAL_KEYS`), and whether values are normalized (docs/environments.md)."""

    model_config = STRICT
    exclude: list[str] | tuple[str, ...] | set[str] = ()
    include: list[str] | tuple[str, ...] = ()
    normalize: bool = True


#: ``priority_weights``: a weight per integer priority.
PriorityWeights = Annotated[dict[int, ranged(float, ge=0)],
                            Described("a mapping {integer priorities (0 critical, -1 sheddable): weight >= 0}")]


class EnvKeywords(ScenarioOverrides):
    """The keywords every environment takes: the scenario's (``make_scenario``'s) and these
    (docs/environments.md). Each environment kind validates its own model, which extends this;
    the defaults shown are :func:`build_setup`'s (a kind may set its own)."""

    scenario: Name | Scenario | Path | None = None
    horizon: Duration | None = None
    observation: ObservationOptions | None = None
    reward_scale: ranged(float, gt=0, le=1e6) = 1.0
    priority_weights: PriorityWeights | None = None
    control_interval: ranged(float, gt=0, le=3600) = DEFAULT_CONTROL_INTERVAL_S


class RewardKeywords(EnvKeywords):
    """The keywords of an environment whose reward can be chosen."""

    reward: Name = "ttft"
    unserved_penalty_s: ranged(float, ge=0, le=MAX_SECONDS) | None = None


class DecisionEnvKeywords(RewardKeywords):
    """Routing-v0's, FlowControl-v0's and Admission-v0's keywords (``action``: FlowControl-v0's
    action mode, :data:`FLOW_ACTIONS`; ``hint``: Routing-v0's hinted compiled router)."""

    action: object = "ceilings"
    hint: Name | None = None


def check_render_mode(env: str, render_mode) -> None:
    """Gymnasium passes ``render_mode`` to every environment; these render nothing, so
    None (the default) is the one value they take."""
    if render_mode is not None:
        raise ConfigError(f"{env}: render_mode={render_mode!r} is invalid; this environment renders nothing "
                          "(render_modes is empty), give None")


def check_env_keywords(kind: str, kwargs: dict, model: type[EnvKeywords] = DecisionEnvKeywords) -> None:
    """Names, types and ranges of an environment's constructor keywords (``model``: its kind's)."""
    check_scenario_overrides(kwargs, model=model, label=f"llmsched/{ENV_NAMES.get(kind, kind)}-v0")


# ====================================================================== optional extras


#: FlowControl-v0's ``action`` modes: per-band ceilings, or the soft-reflective ceiling's
#: (ramp, period scale) (see :func:`soft_reflective_params`).
FLOW_ACTIONS = ("ceilings", "soft-reflective")


def soft_reflective_params(action):
    """``(ramp, period_scale)`` of a FlowControl ``action="soft-reflective"`` action ``a``
    (or of columns: ``a`` of shape ``(2, n)``): ``ramp = 2 a[0]`` in [0, 2],
    ``period_scale = 4 ** (2 a[1] - 1)`` in [1/4, 4]; (0.5, 0.5) is the published
    soft-reflective ceiling (1, 1) exactly."""
    a = np.asarray(action, dtype=float)
    return 2.0 * a[0], np.power(4.0, 2.0 * a[1] - 1.0)


def make_setup(kind: str, **kwargs) -> Setup:
    """Setup of one environment kind, with its action space."""
    if kind in SETUP_BUILDERS:
        return SETUP_BUILDERS[kind](**kwargs)
    check_env_keywords(kind, kwargs)
    flow_action = kwargs.pop("action", "ceilings")
    if kind != "flow_control" and flow_action != "ceilings":
        raise ConfigError(f"action={flow_action!r} applies to llmsched/FlowControl-v0 only")
    hint = kwargs.pop("hint", None)
    if hint is not None:
        if kind != "routing":
            raise ConfigError(f"hint={hint!r} applies to llmsched/Routing-v0 only")
        hint_form(hint)  # a compiled router: one clear error before any simulation
    if flow_action not in FLOW_ACTIONS:
        raise ConfigError(f"action={flow_action!r} is invalid; choose one of {', '.join(FLOW_ACTIONS)}")
    fixed = {"routing": "router", "flow_control": "flow_control", "admission": "admission"}.get(kind)
    if fixed in kwargs and kwargs[fixed] is not None:
        raise ConfigError(f"{fixed}= is the agent's decision in this environment; it cannot be set")
    if kind == "routing":
        setup = build_setup(kind, ROUTING_KEYS + ([HINT_KEY] if hint is not None else []), **kwargs)
        setup.hint = hint
        setup.action_space = spaces.Discrete(setup.num_instances)
    elif kind == "flow_control":
        setup = build_setup(kind, INTERVAL_KEYS, **kwargs)
        setup.flow_action = flow_action
        n = 2 if flow_action == "soft-reflective" else len(setup.band_priorities)
        setup.action_space = spaces.Box(0.0, 1.0, (n,), np.float32)
    elif kind == "admission":
        setup = build_setup(kind, INTERVAL_KEYS, **kwargs)
        if not setup.sheddable:
            raise ConfigError(f"scenario {setup.scenario.name!r} has no sheddable class (priority < 0); "
                              "the Admission environment needs at least one")
        setup.action_space = spaces.Box(0.0, 1.0, (len(setup.sheddable),), np.float32)
    else:
        raise ConfigError(f"unknown environment kind {kind!r}")
    return setup
