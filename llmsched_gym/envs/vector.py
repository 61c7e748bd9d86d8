"""Native vector environments: ``num_envs`` clusters, batched numpy observations.

``gymnasium.make_vec("llmsched/Routing-v0", num_envs=64, scenario=...)`` builds a
:class:`RoutingVectorEnv` (the ``vector_entry_point``). The clusters share one
:class:`~.core.Setup` (scenario, spaces) and write their raw observations into
``(num_envs, ...)`` arrays that are normalized in one batched pass; rewards,
terminations and truncations are ``(num_envs,)`` arrays, and ``info`` holds one array
per key (with gymnasium's ``_key`` masks).

Autoreset is ``SAME_STEP`` (what SB3's VecEnv does): a cluster whose episode ends is
reset within the same ``step``; its last observation and info are in
``info["final_obs"]`` (object array, ``None`` for clusters that did not end) and
``info["final_info"]``, masked by ``info["_final_obs"]`` / ``info["_final_info"]``, the
layout of ``SyncVectorEnv(autoreset_mode=SAME_STEP)``.

Seeding matches the single environment: ``reset(seed=s)`` seeds cluster ``i``'s
generator as ``env.reset(seed=s + i)`` would, so cluster ``i`` follows the same
trajectory as a single env reset with ``seed=s + i`` under the same actions (also across
autoresets). ``reset(options={"workload_seed": [n0, n1, ...]})`` (or an int ``n``:
``n + i``) fixes the workload seeds of the first episodes.

All clusters live in one batched engine state (:class:`~llmsched_gym.simulator.SimulatorBatch`);
a cluster's next episode is loaded into its slot in place. Steps with a ``ttft`` or
``e2e`` reward are batched: every action is validated first; when every policy of every
cluster is compiled, one compiled call applies the actions, advances every cluster to its
next decision and advances the cost trackers, and one fills the raw and normalized
observations and the action masks (:func:`.batched.step`, :func:`.batched.observe`);
with a Python policy the advance answers its pauses in between. The ``slo`` reward and a
:class:`~.agents.BaselineAgent` observer step cluster by cluster on the same shared state.
Either way a cluster follows exactly the trajectory of a single env (see
``benchmarks/speed/env_speed.py`` for speed).
"""

from __future__ import annotations

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from numba.typed import List

from ..engine.layout import CF_NOW, CI_PTR, ST_DONE, ST_HORIZON, STATUS_NAMES
from ..simulator import SimulatorBatch
from . import batched
from .core import (
    ALL_OBS_KEYS,
    DRIVERS,
    ENV_NAMES,
    TRANSFORMS,
    check_num_envs,
    check_render_mode,
    check_workload_seed,
    draw_workload_seed,
    make_setup,
    normalize_obs,
    raw_buffers,
    soft_reflective_params,
)

#: Slot room per cluster for the next episodes' workloads (a larger one regrows the state):
#: a chatbot episode's prefix units vary by +-15% from one workload seed to the next.
SLOT_SLACK = 1.5


class LLMSchedVectorEnv(VectorEnv):
    """``num_envs`` independent clusters of one environment kind (see module docstring)."""

    kind = ""

    def __init__(self, num_envs: int = 1, *, _setup=None, render_mode=None, **kwargs):
        check_render_mode(f"llmsched/{ENV_NAMES.get(self.kind, self.kind)}-v0", render_mode)
        check_num_envs(num_envs)
        self.setup = make_setup(self.kind, **kwargs) if _setup is None else _setup
        self.num_envs = n = int(num_envs)
        self.single_observation_space = self.setup.observation_space
        self.single_action_space = self.setup.action_space
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.render_mode = None
        self.drivers = [DRIVERS[self.kind](self.setup) for _ in range(n)]
        for d in self.drivers:
            d.batched = True
        self.batch: SimulatorBatch | None = None
        self.autoreset = True  # False: a single env's engine (a finished cluster waits for reset)
        self.last_final_info: list[dict | None] = [None] * n  # each cluster's last episode-end info
        self._batched_ok = self.setup.reward in ("ttft", "e2e")
        self._observed = False  # whether a driver has an observer (see refresh_observers)
        B = len(self.setup.band_priorities)
        self._t = np.zeros(n)  # interval kinds: end of the current control interval
        self._arrival_rate = np.zeros((n, B))  # band_arrival_rate of the last interval
        self._ceilings = np.ones((n, B))  # FlowControl: the last action (cumulative minimum)
        self._soft = np.ones((n, 2))  # FlowControl action="soft-reflective": (ramp, period scale)
        self._probs = np.zeros((n, B))  # Admission: rejection probability per band
        self._sheddable = np.array(self.setup.sheddable, np.int64)
        self._trk = np.zeros((batched.N_T, n))
        self._steps = np.zeros(n, np.int64)
        self._sim_bands = np.zeros((n, 0), np.int64)  # see _band_tables
        self._wband = np.zeros((n, 0))
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._final_raw = raw_buffers(self.setup, 1)
        self._python = np.zeros(n, bool)  # per cluster: whether the kernel may pause for a Python policy
        self._compiled = False  # no cluster may: steps are one fused call (see _step_fused)
        self._fused_buffers()

    def _fused_buffers(self) -> None:
        """The raw observations as column blocks of one array (every key of
        batched.RAW_KEYS, observed or not; ``self._raw`` holds views of the observed ones),
        the normalized observations likewise in one float32 array, and the action masks:
        the compiled observation pass takes each as a single argument."""
        n, s = self.num_envs, self.setup
        sizes = {k.name: s.sizes(k)[0] for k in ALL_OBS_KEYS}
        self._raw_off = np.cumsum([0] + [sizes[k] for k in batched.RAW_KEYS]).astype(np.int64)
        self._raw_flat = np.zeros((n, int(self._raw_off[-1])))
        keys = s.obs_keys
        at = {k: (int(self._raw_off[j]), int(self._raw_off[j + 1])) for j, k in enumerate(batched.RAW_KEYS)}
        self._raw = {k.name: self._raw_flat[:, slice(*at[k.name])] for k in keys}
        self._obs_index = np.array([batched.RAW_KEYS.index(k.name) for k in keys], np.int64)
        self._obs_codes = np.array([batched.NORM_CODES[k.transform] for k in keys], np.int64)
        self._obs_high = np.array([TRANSFORMS[k.transform][0] for k in keys])
        self._out_off = np.cumsum([0] + [sizes[k.name] for k in keys]).astype(np.int64)
        self._out_flat = np.zeros((n, int(self._out_off[-1])), np.float32)
        self._out_cols = [(k.name, slice(int(self._out_off[j]), int(self._out_off[j + 1])))
                          for j, k in enumerate(keys)]
        self._obs_fused = False  # whether the last observation pass was the compiled one
        self._masks = np.ones((n, s.num_instances), bool)
        self._status = np.zeros(n, np.int64)
        self._prev = np.zeros(n, np.int64)
        self._no_end = np.full(n, np.inf)

    # ------------------------------------------------------------------ API
    def reset(self, *, seed=None, options: dict | None = None):
        n = self.num_envs
        if seed is None:
            seeds = [None] * n
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"reset(seed=...) needs one seed per environment ({n}), got {len(seeds)}")
        options = dict(options or {})
        ws = options.pop("workload_seed", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; allowed: workload_seed")
        if ws is None:
            wss = [None] * n
        elif isinstance(ws, (int, np.integer)) and not isinstance(ws, bool):
            wss = [int(ws) + i for i in range(n)]
        else:
            wss = list(ws)
            if len(wss) != n:
                raise ValueError(f"options['workload_seed'] needs one seed per environment ({n}), got {len(wss)}")
        for i, d in enumerate(self.drivers):
            if seeds[i] is not None or self._rngs[i] is None:
                self._rngs[i], _ = seeding.np_random(seeds[i])
            d.prepare(draw_workload_seed(self._rngs[i]) if wss[i] is None else check_workload_seed(wss[i]))
        self.batch = SimulatorBatch([d.sim for d in self.drivers], slack=SLOT_SLACK)
        self.refresh_observers()
        self._trk[:] = 0.0
        self._steps[:] = 0
        for d in self.drivers:
            d.start()
        self._band_tables(range(n))
        self._episode_start(range(n))
        self._python = np.array([d.sim.needs_python for d in self.drivers])
        self._compiled = self._batched_ok and not self._python.any() and not self._faults()
        self._write_obs()
        return self._obs(), self._infos()

    def _faults(self) -> bool:
        """Whether a cluster runs a fault schedule: its actions apply at pause points between
        compiled calls (SimulatorBatch.advance_clusters), so steps do not take the fused call."""
        return any(d.sim.faults is not None for d in self.drivers)

    @property
    def _fast(self) -> bool:
        """Whether steps take the fully batched path (see the module docstring)."""
        return self._batched_ok and not self._observed

    def refresh_observers(self) -> None:
        """Take note of the drivers' observers (reset does; so does a BaselineAgent attaching one)."""
        self._observed = any(d.observer is not None for d in self.drivers)

    def step(self, actions):
        if self._fast:
            return self._step_batched(self._check_batched_actions(actions))
        n = self.num_envs
        actions = self._check_actions(actions)
        for i, d in enumerate(self.drivers):  # validate every action before any cluster moves
            d.check_action(actions[i])
        rewards = np.zeros(n)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        final_obs = final_info = None
        infos = {}
        for i, d in enumerate(self.drivers):
            rewards[i], terminated[i], truncated[i] = d.step(actions[i])
            if terminated[i] or truncated[i]:
                if final_obs is None:
                    final_obs = np.full(n, None, dtype=object)
                    final_info = {}
                d.write_obs(self._final_raw, 0)
                final_obs[i] = {k: v[0] for k, v in normalize_obs(self.setup, self._final_raw).items()}
                fi = self._driver_info(d)
                fi.update(d.final_info())
                self.last_final_info[i] = fi
                final_info = self._add_info(final_info, fi, i)
                if self.autoreset:
                    self._next_episode(i)
            d.write_obs(self._raw, i)
        self._obs_fused = False
        infos = self._infos()
        if final_obs is not None:
            done = terminated | truncated
            infos["final_obs"], infos["_final_obs"] = final_obs, done.copy()
            infos["final_info"], infos["_final_info"] = final_info, done.copy()
        return self._obs(), rewards, terminated, truncated, infos

    def _step_batched(self, actions: np.ndarray):
        """One step of every cluster in a few compiled calls (see the module docstring)."""
        rewards, terminated, truncated, ended = self._advance_batched(actions)
        return self._obs(), rewards, terminated, truncated, {**self._infos(), **ended}

    def _advance_batched(self, actions: np.ndarray):
        """Apply validated actions and advance every cluster: (rewards, terminated,
        truncated, the final_obs / final_info entries of the clusters whose episode ended);
        the observations are in the buffers (:meth:`_obs`)."""
        if self._compiled:
            return self._step_fused(actions)
        n = self.num_envs
        st = self.batch.state
        s = self.setup
        until = np.inf
        if self.kind == "routing":
            batched.route_all(st.req_i, st.req_f, st.unit_i, st.inst_i, st.inst_f, st.ent, st.clu_i, st.clu_f,
                              st.heap_t, st.heap_r, st.bkey, st.ix, st.win_t, st.win_c, st.ccount, st.lat_p, actions)
        else:
            self._apply_interval_actions(actions)
            until = self._t
            prev = st.clu_i[CI_PTR].copy()
        status = SimulatorBatch.advance_clusters(st, dict(enumerate(self.batch.sims)), list(range(n)), until)
        if self.kind != "routing" and "band_arrival_rate" in self._raw:
            batched.arrival_rates(st.req_i, st.clu_i, self._sim_bands, prev, s.control_interval,
                                  self._arrival_rate)
        status = np.array([STATUS_NAMES.index(x) for x in status])
        terminated, truncated = status == ST_DONE, status == ST_HORIZON
        done = terminated | truncated
        self._steps += 1
        rewards = np.zeros(n)
        batched.track_costs(st.req_i, st.req_f, st.clu_i, st.clu_f, self._trk, self._wband,
                            s.reward == "e2e", s.unserved_penalty_s, s.reward_scale, done, rewards)
        ended = self._end_episodes(done) if done.any() else {}
        self._write_obs()
        return rewards, terminated, truncated, ended

    def _step_fused(self, actions: np.ndarray):
        """_advance_batched when every policy is compiled: one compiled call applies the
        actions, advances every cluster and its cost tracker, one fills the observations."""
        st, s, n = self.batch.state, self.setup, self.num_envs
        routing = self.kind == "routing"
        if routing:
            choices, until = actions, self._no_end
        else:
            self._apply_interval_actions(actions)
            choices, until = self._prev, self._t  # no routing choices
        terminated, truncated, rewards = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n)
        ended = batched.step(*st.arrays(), routing, choices, until, self._prev, s.control_interval,
                             self._arrival_rate, self._sim_bands, self._trk, self._wband, s.reward == "e2e",
                             s.unserved_penalty_s, s.reward_scale, self._steps, self._status, terminated, truncated,
                             rewards)
        final = self._end_episodes(terminated | truncated) if ended else {}
        self._observe()
        return rewards, terminated, truncated, final

    def _apply_interval_actions(self, actions: np.ndarray) -> None:
        """FlowControl: the ceilings (cumulative minimum); Admission: the rejection
        probabilities; either way the end of the next control interval."""
        st, s = self.batch.state, self.setup
        if self.kind == "flow_control" and s.flow_action == "soft-reflective":
            self._soft[:, 0], self._soft[:, 1] = soft_reflective_params(actions.T)
            batched.apply_flow_params(self._soft, st.num_bands, st.bq, st.clu_f)
        elif self.kind == "flow_control":
            batched.apply_ceilings(actions, self._sim_bands, st.num_bands, st.bq, st.clu_f, self._ceilings,
                                   st.ceil_ext, True)
        else:
            batched.apply_rejection(actions, self._sheddable, self._sim_bands, st.num_bands, self._probs, st.aprob)
        self._t += s.control_interval

    def _end_episodes(self, done: np.ndarray) -> dict:
        """Record the final observation and info of every cluster in ``done`` and start
        its next episode (autoreset); returns their final_obs / final_info entries."""
        n, s = self.num_envs, self.setup
        final_obs = np.full(n, None, dtype=object)
        final_info = {}
        if self._compiled:  # the action masks of the last step (not the hint: drawn once per decision)
            st = self.batch.state
            batched.action_masks(st.req_i, st.inst_i, st.clu_i, self._masks)
        per = self._infos()
        for i in np.flatnonzero(done).tolist():
            d = self.drivers[i]
            d._last_arrivals = self._arrival_rate[i].copy()
            d.write_obs(self._final_raw, 0)
            final_obs[i] = {k: v[0] for k, v in normalize_obs(s, self._final_raw).items()}
            fi = {k: per[k][i] for k in per if not k.startswith("_")}
            fi["episode"] = {"return": -self._trk[batched.T_TOTAL, i] * s.reward_scale,
                             "length": int(self._steps[i]), "seed": d.seed, "metrics": d.summary()}
            self.last_final_info[i] = fi
            final_info = self._add_info(final_info, fi, i)
            if self.autoreset:
                self._next_episode(i)
        return {"final_obs": final_obs, "_final_obs": done.copy(), "final_info": final_info,
                "_final_info": done.copy()}

    def _next_episode(self, i: int) -> None:
        """Start cluster ``i``'s next episode in its slot of the shared state."""
        d = self.drivers[i]
        d.prepare(draw_workload_seed(self._rngs[i]))
        self.batch.replace(i, d.sim)
        self._trk[:, i] = 0.0
        self._steps[i] = 0
        d.start()
        self._band_tables([i])
        self._episode_start([i])
        self._python[i] = d.sim.needs_python
        self._compiled = self._batched_ok and not self._python.any() and not self._faults()

    def _episode_start(self, clusters) -> None:
        """The interval kinds' per-episode state (as IntervalDriver._start and _simulator set it)."""
        for i in clusters:
            self._t[i] = self.drivers[i].sim.now
            self._arrival_rate[i] = 0.0
            self._ceilings[i] = 1.0
            self._soft[i] = 1.0
            self._probs[i] = 0.0

    def _check_batched_actions(self, actions) -> np.ndarray:
        if self.kind != "routing":
            return self._check_box_actions(actions)
        a = self._check_actions(actions)
        I = self.setup.num_instances
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"Routing: actions must be one integer instance index per environment, got {a!r}")
        bad = np.flatnonzero((a < 0) | (a >= I))
        if len(bad):
            raise ValueError(f"Routing: action {int(a[bad[0]])} of environment {int(bad[0])} is out of range; "
                             f"valid instances are 0..{I - 1}")
        P = self.setup.scenario.cluster.prefill_instances
        bad = np.flatnonzero(a < P)
        if len(bad):
            raise ValueError(f"Routing: action {int(a[bad[0]])} of environment {int(bad[0])} is a prefill instance; "
                             f"on this P/D cluster the action is the decode instance, {P}..{I - 1}")
        return a.astype(np.int64)

    def _check_box_actions(self, actions) -> np.ndarray:
        """Every cluster's action validated as the single env's ``validate_box`` does."""
        what = ENV_NAMES.get(self.kind, self.kind)
        k = self.setup.action_space.shape[0]
        a = np.asarray(actions, dtype=float)
        if a.shape != (self.num_envs, k):
            raise ValueError(f"{what}: actions must have shape ({self.num_envs}, {k}), got {a.shape}")
        bad = ~np.isfinite(a).all(axis=1)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{what}: action of environment {i} has non-finite values: {a[i]}")
        bad = ((a < -1e-6) | (a > 1 + 1e-6)).any(axis=1)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{what}: action values must lie in [0, 1], got {a[i]} for environment {i}")
        return np.clip(a, 0.0, 1.0)

    def _band_tables(self, clusters) -> None:
        """Per cluster: the scenario band and the priority weight of each simulator band."""
        B = max(self.batch.state.num_bands, len(self.setup.band_priorities))
        if self._sim_bands.shape[1] < B:
            self._sim_bands = np.zeros((self.num_envs, B), np.int64)
            self._wband = np.zeros((self.num_envs, B))
            clusters = range(self.num_envs)
        for i in clusters:
            d = self.drivers[i]
            k = len(d._sim_bands)
            self._sim_bands[i, :k] = d._sim_bands
            self._wband[i, :k] = self.setup.weight(np.array(d.sim.band_priorities))

    def _write_obs(self) -> None:
        """Every cluster's raw observation into ``self._raw``."""
        if self._compiled and self._fast:
            self._observe()
            return
        self._obs_fused = False
        if not self._fast:
            for i, d in enumerate(self.drivers):
                d.write_obs(self._raw, i)
            return
        st, s = self.batch.state, self.setup
        raw = [self._raw_flat[:, a:b] for a, b in zip(self._raw_off[:-1], self._raw_off[1:])]
        batched.common_obs(st.req_f, st.inst_i, st.inst_f, st.clu_i, st.clu_f, st.bq, self._sim_bands, *raw[:8])
        if self.kind == "routing":
            batched.routing_obs(st.req_i, st.req_f, st.unit_i, st.inst_i, st.ent, st.clu_i, st.clu_f,
                                self._sim_bands, len(s.band_priorities), raw[8], raw[9])
        else:
            raw[10][:] = self._arrival_rate
        batched.metric_age(st.inst_f, st.clu_i, st.clu_f, raw[11])
        if "hint" in self._raw:
            batched.hint_obs(st.req_i, st.req_f, st.inst_i, st.inst_f, st.unit_i, st.ent, st.clu_i, st.clu_f, st.bkey,
                             st.ix, st.win_t, st.win_c, st.ccount, st.lat_p, self._hint_rngs(), raw[12])

    def _observe(self) -> None:
        """The compiled observation pass: raw and normalized observations, action masks."""
        st, s = self.batch.state, self.setup
        hinted = "hint" in self._raw
        batched.observe(st.req_i, st.req_f, st.unit_i, st.inst_i, st.inst_f, st.ent, st.clu_i, st.clu_f, st.bq,
                        st.bkey, st.ix, st.win_t, st.win_c, st.ccount, st.lat_p,
                        self._hint_rngs() if hinted else st.rngs, hinted,
                        self._sim_bands, len(s.band_priorities), self.kind == "routing", self._raw_flat,
                        self._raw_off, self._arrival_rate, self._obs_index, self._obs_codes, self._obs_high,
                        s.normalize, self._out_flat, self._out_off, self._masks)
        self._obs_fused = True

    def _hint_rngs(self) -> List:
        """The simulators' ``hint_rng``, one per cluster (the ``hint`` key's draws)."""
        rngs = List()
        for d in self.drivers:
            rngs.append(d.sim.hint_rng)
        return rngs

    def _obs(self) -> dict[str, np.ndarray]:
        """The normalized observations of the last observation pass (fresh arrays)."""
        if self._obs_fused:
            return {k: self._out_flat[:, cols].copy() for k, cols in self._out_cols}
        return normalize_obs(self.setup, self._raw)

    def _obs_of(self, i: int) -> dict[str, np.ndarray]:
        """Cluster ``i``'s normalized observation of the last compiled pass (views of one
        fresh array)."""
        row = self._out_flat[i].copy()
        return {k: row[cols] for k, cols in self._out_cols}

    def _info_of(self, i: int) -> dict:
        """Cluster ``i``'s info on the fast path (what a single env returns)."""
        st = self.batch.state
        info = {"sim_time": float(st.clu_f[CF_NOW, i]), "arrivals": int(st.clu_i[CI_PTR, i]),
                "open_requests": int(self._trk[batched.T_OPEN, i]),
                "episode_cost": float(self._trk[batched.T_TOTAL, i])}
        if self.kind == "routing":
            if not self._obs_fused:  # else the compiled pass filled them
                batched.action_masks(st.req_i, st.inst_i, st.clu_i, self._masks)
            info["action_mask"] = self._masks[i].copy()
        elif self.kind == "flow_control":
            if self.setup.flow_action == "soft-reflective":
                info["soft_reflective"] = self._soft[i].copy()
            else:
                info["ceilings"] = self._ceilings[i].copy()
        else:
            info["rejection_prob"] = self._probs[i, list(self.setup.sheddable)]
        return info

    def action_masks(self) -> np.ndarray:
        """Valid actions per cluster, ``(num_envs, I)`` (Routing only)."""
        if self.kind != "routing":
            raise AttributeError(f"{type(self).__name__} has a continuous action space; no action masks")
        return np.stack([d.action_mask() for d in self.drivers])

    @property
    def simulators(self) -> list:
        """The current episode's simulator of every cluster."""
        return [d.sim for d in self.drivers]

    def close_extras(self, **kwargs) -> None:
        self.drivers = []

    # ------------------------------------------------------------------ helpers
    def _check_actions(self, actions):
        n = self.num_envs
        a = np.asarray(actions)
        if a.ndim == 0 or a.shape[0] != n:
            raise ValueError(f"{type(self).__name__}.step: expected one action per environment "
                             f"(leading dimension {n}), got shape {a.shape}")
        return a

    def _driver_info(self, d) -> dict:
        info = d.info()
        if self.kind == "routing":
            info["action_mask"] = d.action_mask()
        return info

    def _infos(self) -> dict:
        if self._fast:
            st = self.batch.state
            if self.kind == "routing" and not self._obs_fused:  # else the compiled pass filled them
                batched.action_masks(st.req_i, st.inst_i, st.clu_i, self._masks)
            vals = {"sim_time": st.clu_f[CF_NOW].copy(), "arrivals": st.clu_i[CI_PTR].copy(),
                    "open_requests": self._trk[batched.T_OPEN].astype(np.int64),
                    "episode_cost": self._trk[batched.T_TOTAL].copy()}
            if self.kind == "routing":
                vals["action_mask"] = self._masks.copy()
            elif self.kind == "flow_control":
                if self.setup.flow_action == "soft-reflective":
                    vals["soft_reflective"] = self._soft.copy()
                else:
                    vals["ceilings"] = self._ceilings.copy()
            else:
                vals["rejection_prob"] = self._probs[:, list(self.setup.sheddable)]
            mask = np.ones(self.num_envs, bool)
            out = {}
            for k, v in vals.items():
                out[k], out["_" + k] = v, mask
            return out
        per = [self._driver_info(d) for d in self.drivers]
        mask = np.ones(self.num_envs, bool)
        out = {}
        for k in per[0]:
            out[k] = np.array([p[k] for p in per])
            out["_" + k] = mask
        return out


class RoutingVectorEnv(LLMSchedVectorEnv):
    """Native vector version of :class:`~llmsched_gym.envs.RoutingEnv`."""

    kind = "routing"


class FlowControlVectorEnv(LLMSchedVectorEnv):
    """Native vector version of :class:`~llmsched_gym.envs.FlowControlEnv`."""

    kind = "flow_control"


class AdmissionVectorEnv(LLMSchedVectorEnv):
    """Native vector version of :class:`~llmsched_gym.envs.AdmissionEnv`."""

    kind = "admission"


VECTOR_ENVS = {"routing": RoutingVectorEnv, "flow_control": FlowControlVectorEnv, "admission": AdmissionVectorEnv}
