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

The clusters' event loops are independent Python/numpy simulations stepped one after
the other; batching removes the per-env wrapper, dict and normalization overheads but
not the simulation itself (see ``benchmarks/env_speed.py``).
"""

from __future__ import annotations

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .base import check_workload_seed, draw_workload_seed
from .core import DRIVERS, make_setup, normalize_obs, raw_buffers


class LLMSchedVectorEnv(VectorEnv):
    """``num_envs`` independent clusters of one environment kind (see module docstring)."""

    kind = ""

    def __init__(self, num_envs: int = 1, **kwargs):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} is invalid; it must be an integer >= 1")
        self.setup = make_setup(self.kind, **kwargs)
        self.num_envs = n = int(num_envs)
        self.single_observation_space = self.setup.observation_space
        self.single_action_space = self.setup.action_space
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.render_mode = None
        self.drivers = [DRIVERS[self.kind](self.setup) for _ in range(n)]
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._raw = raw_buffers(self.setup, n)
        self._final_raw = raw_buffers(self.setup, 1)

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
            d.reset(draw_workload_seed(self._rngs[i]) if wss[i] is None else check_workload_seed(wss[i]))
            d.write_obs(self._raw, i)
        return normalize_obs(self.setup, self._raw), self._infos()

    def step(self, actions):
        n = self.num_envs
        actions = self._check_actions(actions)
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
                final_info = self._add_info(final_info, fi, i)
                d.reset(draw_workload_seed(self._rngs[i]))
            d.write_obs(self._raw, i)
        infos = self._infos()
        if final_obs is not None:
            done = terminated | truncated
            infos["final_obs"], infos["_final_obs"] = final_obs, done.copy()
            infos["final_info"], infos["_final_info"] = final_info, done.copy()
        return normalize_obs(self.setup, self._raw), rewards, terminated, truncated, infos

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
