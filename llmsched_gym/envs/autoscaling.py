"""``llmsched/Autoscaling-v0``: the number of instances, once per scaling interval.

The single environment is the native vector environment of one cluster (as the other
environments are): :class:`AutoscalingVectorEnv` holds ``num_envs`` clusters in one
batched engine state and advances them together (:func:`~llmsched_gym.autoscaling.advance_fleets`),
stopping only where a cold start ends; the fleets' bookkeeping is
:class:`~llmsched_gym.autoscaling.Fleet`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..autoscaling import Fleet, ScalingView, advance_fleets, check_count, resolve_cold_start
from ..errors import ConfigError
from ..evaluation.metrics import summarize
from ..simulator import SimulatorBatch
from ..validation import ranged
from .base import LLMSchedEnv
from .core import (
    CostTracker,
    EnvKeywords,
    ObsKey,
    Setup,
    build_setup,
    check_env_keywords,
    check_num_envs,
    check_render_mode,
    check_workload_seed,
    draw_workload_seed,
    normalize_obs,
    raw_buffers,
    single_reset_workload_seed,
)
from .docs import OBSERVATION_DOC, fill
from .vector import SLOT_SLACK

DEFAULT_SCALING_INTERVAL_S = 15.0  # Kubernetes HPA's default sync period
DEFAULT_GPU_COST = 0.1  # weighted SLO misses per GPU-second
FLEET_KEYS = [ObsKey("fleet", "4", "frac"), ObsKey("arrival_rate", "1", "count")]


class AutoscalingKeywords(EnvKeywords):
    """Autoscaling-v0's keywords: the common ones (its reward is fixed: SLO misses + GPU
    cost) and these (docs/environments.md). ``initial_instances`` is checked against the
    cluster's instances and ``cold_start_s`` resolved (:mod:`llmsched_gym.autoscaling`)."""

    initial_instances: object = 1
    cold_start_s: object = None
    gpu_cost: ranged(float, ge=0) = DEFAULT_GPU_COST


#: Keywords of this environment besides the common ones.
AUTOSCALING_KEYWORDS = tuple(k for k in AutoscalingKeywords.model_fields if k not in EnvKeywords.model_fields)


def make_autoscaling_setup(**kwargs) -> Setup:
    """Validate Autoscaling-v0's keywords and build its :class:`~.core.Setup` (spaces
    included); ``setup.autoscaling`` holds ``initial_instances``, ``cold_start_s`` (resolved)
    and ``gpu_cost``."""
    check_env_keywords("autoscaling", kwargs, AutoscalingKeywords)
    own = {k: kwargs.pop(k) for k in AUTOSCALING_KEYWORDS if k in kwargs}
    if kwargs.get("router") == "external":
        raise ConfigError("llmsched/Autoscaling-v0: router='external' is not allowed; give a routing policy")
    kwargs.setdefault("horizon", None)
    kwargs.setdefault("control_interval", DEFAULT_SCALING_INTERVAL_S)
    setup = build_setup("autoscaling", FLEET_KEYS, reward="slo", **kwargs)
    cluster = setup.scenario.cluster
    I = cluster.instances
    setup.autoscaling = {"initial_instances": check_count("initial_instances", own.get("initial_instances", 1), I),
                         "cold_start_s": resolve_cold_start(cluster, own.get("cold_start_s")),
                         "gpu_cost": float(own.get("gpu_cost", DEFAULT_GPU_COST))}
    setup.action_space = spaces.MultiDiscrete(np.array([I], np.int64))
    return setup


class _Cluster:
    """One cluster's episode: simulator, fleet, cost tracker and counters."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.sim = None
        self.fleet: Fleet | None = None
        self.tracker: CostTracker | None = None
        self.seed = 0
        self.steps = 0
        self.t = 0.0  # end of the current scaling interval
        self.prev_arrivals = 0
        self.last_arrivals = 0
        self.gpu_s = 0.0  # GPU-seconds at the last step
        self.band_of: np.ndarray = np.zeros(0, np.int64)

    def prepare(self, seed: int) -> None:
        s = self.setup
        self.seed = int(seed)
        self.sim = s.scenario.simulator(self.seed, router=s.router, flow_control=s.flow_control, admission=s.admission,
                                        horizon_s=s.horizon, batch=False)  # unset policies: the scenario's

    def start(self) -> None:
        s, sim = self.setup, self.sim
        a = s.autoscaling
        self.fleet = Fleet(sim, a["initial_instances"], a["cold_start_s"])
        self.tracker = CostTracker(s, sim)
        self.steps = 0
        self.t = sim.now
        self.prev_arrivals = self.last_arrivals = 0
        self.gpu_s = 0.0
        index = {p: b for b, p in enumerate(s.band_priorities)}
        self.band_of = np.array([index[p] for p in sim.band_priorities], np.int64)

    def write_obs(self, raw: dict, row: int) -> None:
        sim, s = self.sim, self.setup
        st, c = sim.state, sim.c
        g0, g1 = int(st.inst_off[c]), int(st.inst_off[c + 1])
        inst = st.instances
        for key in raw:
            if key == "saturation":
                raw[key][row, 0] = sim.saturation
            elif key == "running":
                raw[key][row] = inst.scr_running[g0:g1] / s.scenario.cluster.engine.max_num_seqs
            elif key == "waiting":
                raw[key][row] = inst.scr_waiting[g0:g1]
            elif key == "kv_util":
                raw[key][row] = inst.scr_kv[g0:g1]
            elif key == "in_flight":
                raw[key][row] = inst.inflight[g0:g1]
            elif key == "prefill_tokens":
                raw[key][row] = inst.qprefill[g0:g1]
            elif key in ("band_length", "band_oldest_wait"):
                raw[key][row] = 0.0
                for b, sb in enumerate(self.band_of.tolist()):
                    n = st.bands.len[c, b]
                    if key == "band_length":
                        raw[key][row, sb] = n
                    elif n:
                        raw[key][row, sb] = sim.now - st.requests.enqueued[st.bands.head[c, b]]
            elif key == "fleet":
                k = self.fleet.counts()
                raw[key][row] = np.array([k["serving"], k["starting"] + k["waiting"], k["draining"],
                                          self.fleet.target]) / self.fleet.max_instances
            elif key == "arrival_rate":
                raw[key][row, 0] = self.last_arrivals / s.control_interval

    def info(self) -> dict:
        k = self.fleet.counts()
        return {"sim_time": float(self.sim.now), "arrivals": int(self.sim.arrived), "instances": self.fleet.target,
                "serving": k["serving"], "starting": k["starting"], "draining": k["draining"],
                "gpu_seconds": self.fleet.gpu_seconds(), "slo_misses": float(self.tracker.total),
                "episode_cost": float(self.tracker.total + self.setup.autoscaling["gpu_cost"] * self.gpu_s)}

    def final_info(self) -> dict:
        metrics = summarize(self.sim)
        metrics["gpu_seconds"] = self.fleet.gpu_seconds()
        metrics["cold_starts"] = self.fleet.cold_starts
        cost = self.tracker.total + self.setup.autoscaling["gpu_cost"] * self.gpu_s
        return {"episode": {"return": -cost * self.setup.reward_scale, "length": self.steps, "seed": self.seed,
                            "metrics": metrics}}


class AutoscalingVectorEnv(VectorEnv):
    """Native vector version of :class:`AutoscalingEnv`: ``num_envs`` clusters in one
    batched engine state, ``SAME_STEP`` autoreset (final observation and info in ``info``,
    as the other vector environments). Cluster ``i`` follows the trajectory of a single
    env reset with ``seed=s + i`` under the same actions."""

    kind = "autoscaling"

    def __init__(self, num_envs: int = 1, *, _setup: Setup | None = None, render_mode=None, **kwargs):
        check_render_mode("llmsched/Autoscaling-v0", render_mode)
        check_num_envs(num_envs)
        self.setup = make_autoscaling_setup(**kwargs) if _setup is None else _setup
        self.num_envs = n = int(num_envs)
        self.single_observation_space = self.setup.observation_space
        self.single_action_space = self.setup.action_space
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.render_mode = None
        self.clusters = [_Cluster(self.setup) for _ in range(n)]
        self.batch: SimulatorBatch | None = None
        self.autoreset = True
        self.last_final_info: list[dict | None] = [None] * n
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._raw = raw_buffers(self.setup, n)
        self._final_raw = raw_buffers(self.setup, 1)

    # ------------------------------------------------------------------ API
    def reset(self, *, seed=None, options: dict | None = None):
        seeds = self._per_env("seed", seed)
        options = dict(options or {})
        ws = options.pop("workload_seed", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; allowed: workload_seed")
        wss = self._per_env("options['workload_seed']", ws)
        for i, cl in enumerate(self.clusters):
            if seeds[i] is not None or self._rngs[i] is None:
                self._rngs[i], _ = seeding.np_random(seeds[i])
            cl.prepare(draw_workload_seed(self._rngs[i]) if wss[i] is None else check_workload_seed(wss[i]))
        self.batch = SimulatorBatch([cl.sim for cl in self.clusters], slack=SLOT_SLACK)
        for cl in self.clusters:
            cl.start()
        for i, cl in enumerate(self.clusters):
            cl.write_obs(self._raw, i)
        return normalize_obs(self.setup, self._raw), self._infos()

    def step(self, actions):
        targets = self.check_actions(actions)
        n, s = self.num_envs, self.setup
        for i, cl in enumerate(self.clusters):
            cl.fleet.set_target(int(targets[i]))
            cl.t += s.control_interval
            cl.prev_arrivals = cl.sim.arrived
        status = advance_fleets(self.batch.state, dict(enumerate(self.batch.sims)),
                                {i: cl.fleet for i, cl in enumerate(self.clusters)},
                                {i: cl.t for i, cl in enumerate(self.clusters)})
        rewards = np.zeros(n)
        terminated = np.array([status[i] == "done" for i in range(n)])
        truncated = np.array([status[i] == "horizon" for i in range(n)])
        gpu_cost = s.autoscaling["gpu_cost"]
        for i, cl in enumerate(self.clusters):
            if status[i] == "route":
                raise RuntimeError("Autoscaling-v0: a routing decision is owed; the router must be a policy")
            cl.last_arrivals = cl.sim.arrived - cl.prev_arrivals
            cl.steps += 1
            gpu = cl.fleet.gpu_seconds()
            rewards[i] = cl.tracker.update(cl.sim.now, cl.sim.arrived, bool(terminated[i] or truncated[i])) \
                - gpu_cost * (gpu - cl.gpu_s) * s.reward_scale
            cl.gpu_s = gpu
        infos = {}
        done = terminated | truncated
        if done.any():
            final_obs = np.full(n, None, dtype=object)
            final_info: dict = {}
            for i in np.flatnonzero(done).tolist():
                cl = self.clusters[i]
                cl.write_obs(self._final_raw, 0)
                final_obs[i] = {k: v[0] for k, v in normalize_obs(s, self._final_raw).items()}
                fi = cl.info()
                fi.update(cl.final_info())
                self.last_final_info[i] = fi
                final_info = self._add_info(final_info, fi, i)
                if self.autoreset:
                    self._next_episode(i)
            infos = {"final_obs": final_obs, "_final_obs": done.copy(), "final_info": final_info,
                     "_final_info": done.copy()}
        for i, cl in enumerate(self.clusters):
            cl.write_obs(self._raw, i)
        return normalize_obs(s, self._raw), rewards, terminated, truncated, {**self._infos(), **infos}

    def check_actions(self, actions) -> np.ndarray:
        """Instances per cluster from a batch of actions (``action[0] + 1`` instances)."""
        I = self.setup.scenario.cluster.instances
        a = np.asarray(actions)
        if a.ndim <= 1:  # one number per environment
            a = a.reshape(-1, 1)
        if a.shape != (self.num_envs, 1):
            raise ValueError(f"Autoscaling: actions must have shape ({self.num_envs}, 1), got {a.shape}")
        if not np.issubdtype(a.dtype, np.integer):
            if not (np.issubdtype(a.dtype, np.floating) and np.isfinite(a).all() and (a == np.round(a)).all()):
                raise ValueError(f"Autoscaling: actions must be integers (instances - 1), got {a.ravel()}")
        bad = np.flatnonzero((a[:, 0] < 0) | (a[:, 0] >= I))
        if len(bad):
            raise ValueError(f"Autoscaling: action {a[bad[0], 0]} of environment {int(bad[0])} is out of range; "
                             f"valid actions are 0..{I - 1} (1..{I} instances)")
        return a[:, 0].astype(np.int64) + 1

    @property
    def simulators(self) -> list:
        """The current episode's simulator of every cluster."""
        return [cl.sim for cl in self.clusters]

    @property
    def fleets(self) -> list[Fleet]:
        """The current episode's fleet of every cluster."""
        return [cl.fleet for cl in self.clusters]

    def close_extras(self, **kwargs) -> None:
        self.clusters = []

    # ------------------------------------------------------------------ helpers
    def _per_env(self, what: str, value) -> list:
        n = self.num_envs
        if value is None:
            return [None] * n
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return [int(value) + i for i in range(n)]
        out = list(value)
        if len(out) != n:
            raise ValueError(f"{what} needs one value per environment ({n}), got {len(out)}")
        return out

    def _next_episode(self, i: int) -> None:
        cl = self.clusters[i]
        cl.prepare(draw_workload_seed(self._rngs[i]))
        self.batch.replace(i, cl.sim)  # a larger workload regrows the state: every simulator rebinds its table
        for other in self.clusters:
            if other is not cl:
                other.tracker.table = other.sim.table
        cl.start()

    def _infos(self) -> dict:
        per = [cl.info() for cl in self.clusters]
        mask = np.ones(self.num_envs, bool)
        out = {}
        for k in per[0]:
            out[k] = np.array([p[k] for p in per])
            out["_" + k] = mask
        return out


class AutoscalingEnv(gym.Env):
    """
    ## Description

    An LLM serving cluster whose fleet the agent sizes: once per scaling interval
    (``control_interval``, default 15 s of simulated time, Kubernetes HPA's sync period)
    it sets the number of instances. The cluster's ``instances`` is the largest fleet;
    every instance is simulated throughout and routing, flow control and admission are
    the scenario's (or the ``router`` / ``flow_control`` / ``admission`` keywords').

    * A started instance serves after a cold start (``cold_start_s``; default the
      model x hardware preset of ``llmsched_gym.autoscaling.cold_start_preset``, or the
      scenario's ``cluster.cold_start_s``): container start + weights over the storage
      bandwidth + engine initialization (Qwen3-14B on an H100: 44.8 s).
    * A removed instance stops taking requests and drains: it finishes its running and
      queued requests, then stops. Scaling up again while it drains serves at once.
    * Instances are used lowest index first and removed highest first, so the serving
      instances are always the first ``S``: an instance taken back behind one still
      starting waits, loaded, until that one serves.
    * The episode starts with ``initial_instances`` instances (default 1) warm.

    ## Action Space

    ``MultiDiscrete([I])``: one entry per pool (one pool today, the cluster's);
    ``action[0] + 1`` is the number of instances wanted, 1 .. ``I``.

    ## Observation Space

    A ``Dict`` of float32 ``Box``es over every instance of the largest fleet (draining
    and stopped ones included), plus

    =====================  =========  ===========  ==========================================
    fleet                  (4,)       [0, 1]       serving, starting (or waiting behind a
                                                   starting one), draining, and asked-for
                                                   instances, as fractions of ``I``
    arrival_rate           (1,)       [0, 2] log   arrivals per second in the last interval
                                                   (count scale)
    =====================  =========  ===========  ==========================================

<<OBS>>

    ## Rewards

    Minus the SLO misses and the GPU-seconds of the interval:
    ``r = -(misses + gpu_cost x gpu_seconds) x reward_scale``. ``misses`` counts the
    requests found in the interval to miss their class's TTFT or TPOT SLO or to be
    unserved, each weighted by its priority weight (``priority_weights``; default
    ``2**priority`` clipped to [1/16, 16]: critical 1, sheddable 0.5); the ``slo`` reward
    of the other environments. ``gpu_seconds`` is ``tp`` x the instance-seconds spent
    starting, serving or draining with work. ``gpu_cost`` (default 0.1) prices a
    GPU-second in weighted misses. An episode's return is ``-(weighted misses + gpu_cost x
    GPU-seconds)``: with the workload fixed, maximizing it maximizes SLO attainment over
    all arrivals less a GPU-seconds cost.

    ## Starting State

    A fresh workload drawn from the scenario at time 0, ``initial_instances`` serving;
    the first action sets the fleet for ``[0, control_interval)``.

    ## Episode End

    1. Termination: every request of the workload has finished or left (the default,
       ``horizon=None``).
    2. Truncation: the simulated clock reaches ``horizon`` (if given).

    ## Arguments

    ``gymnasium.make("llmsched/Autoscaling-v0", **kwargs)`` (``gymnasium.make_vec(..., num_envs=N)``:
    the native vector env). ``scenario`` and its overrides, ``horizon`` (default
    ``None``: until drained), ``reward_scale``, ``priority_weights``, ``observation``,
    ``control_interval`` (the scaling interval, s, default 15), ``router``,
    ``flow_control``, ``admission`` (default: the scenario's), ``initial_instances``
    (default 1), ``cold_start_s`` (default: the scenario's, else the preset) and
    ``gpu_cost`` (default 0.1). ``reset(options={"workload_seed": n})`` builds exactly
    ``scenario.simulator(n)``. ``info`` carries ``sim_time``, ``arrivals``, ``instances``
    (asked for), ``serving``, ``starting``, ``draining``, ``gpu_seconds``, ``slo_misses``,
    ``episode_cost``, and at the end ``episode`` (return, length, workload seed,
    ``metrics.summarize`` of the run with ``gpu_seconds`` and ``cold_starts``). Bad
    actions raise ``ValueError``; bad keywords ``ConfigError``.

    ## Version History

    * v0: Initial version.
    """

    metadata = {"render_modes": []}
    kind = "autoscaling"

    def __init__(self, *, render_mode=None, **kwargs):
        check_render_mode("llmsched/Autoscaling-v0", render_mode)
        self.setup = make_autoscaling_setup(**kwargs)
        self.observation_space = self.setup.observation_space
        self.action_space = self.setup.action_space
        self._vec = AutoscalingVectorEnv(1, _setup=self.setup)
        self._vec.autoreset = False
        self._over = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        ws = single_reset_workload_seed(self.np_random, options)
        self._vec._rngs[0] = self.np_random
        obs, infos = self._vec.reset(options={"workload_seed": ws})
        self._over = False
        return self._one(obs), self._info_of(infos)

    def step(self, action):
        if self._over:
            raise RuntimeError("the episode is over; call reset() before step()")
        a = np.asarray(action)
        if a.shape not in ((1,), ()):
            raise ValueError(f"Autoscaling: action must have shape (1,), got {a.shape}")
        obs, rewards, term, trunc, infos = self._vec.step(a.reshape(1, 1))
        info = self._info_of(infos)
        terminated, truncated = bool(term[0]), bool(trunc[0])
        if terminated or truncated:
            self._over = True
            info["episode"] = self._vec.last_final_info[0]["episode"]
        return self._one(obs), float(rewards[0]), terminated, truncated, info

    @property
    def simulator(self):
        """The :class:`~llmsched_gym.simulator.Simulator` of the current episode."""
        return self._vec.clusters[0].sim

    @property
    def fleet(self) -> Fleet:
        """The :class:`~llmsched_gym.autoscaling.Fleet` of the current episode."""
        return self._vec.clusters[0].fleet

    def scaling_view(self) -> ScalingView:
        """What a scaling policy sees now (arrivals: those of the last interval), so that a
        baseline can drive the env: ``env.step([policy.scale(env.scaling_view()) - 1])``
        follows ``autoscaling.run_autoscaled(sim, policy, control_interval, initial_instances)``."""
        cl = self._vec.clusters[0]
        return cl.fleet.view(self.setup.control_interval, cl.last_arrivals)

    _one = staticmethod(LLMSchedEnv._one)  # the row of a one-cluster vector step, as the other single envs
    _info_of = staticmethod(LLMSchedEnv._info_of)


AutoscalingEnv.__doc__ = fill(AutoscalingEnv.__doc__, OBS=OBSERVATION_DOC)
