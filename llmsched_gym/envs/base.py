"""The base class of the single (one-cluster) environments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from .core import ENV_NAMES, check_render_mode, make_setup, single_reset_workload_seed
from .vector import VECTOR_ENVS


class LLMSchedEnv(gym.Env):
    """One simulated cluster; subclasses fix the decision (routing, flow control, admission).

    The cluster is the batch of one of the compiled engine (C = 1): it steps through the
    native vector env's batched path (:mod:`.vector`) without autoreset, so a single env
    and cluster ``i`` of a vector env are the same computation.
    """

    metadata = {"render_modes": []}
    kind = ""

    def __init__(self, *, render_mode=None, **kwargs):
        check_render_mode(f"llmsched/{ENV_NAMES.get(self.kind, self.kind)}-v0", render_mode)
        self.setup = make_setup(self.kind, **kwargs)
        self.observation_space = self.setup.observation_space
        self.action_space = self.setup.action_space
        self._vec = VECTOR_ENVS[self.kind](1, _setup=self.setup)
        self._vec.autoreset = False
        self.driver = self._vec.drivers[0]

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        ws = single_reset_workload_seed(self.np_random, options)
        self._vec._rngs[0] = self.np_random
        obs, infos = self._vec.reset(options={"workload_seed": ws})
        self.driver.over = False
        return self._one(obs), self._info_of(infos)

    def step(self, action):
        if self.driver.over:
            raise RuntimeError("the episode is over; call reset() before step()")
        a = np.asarray([self.driver.check_action(action)])  # validated, with the single env's messages
        vec = self._vec
        if vec._fast:
            rewards, term, trunc, _ = vec._advance_batched(a)
            obs = vec._obs_of(0) if vec._obs_fused else self._one(vec._obs())
            info = vec._info_of(0)
        else:
            obs, rewards, term, trunc, infos = vec.step(a)
            obs, info = self._one(obs), self._info_of(infos)
        terminated, truncated = bool(term[0]), bool(trunc[0])
        if terminated or truncated:
            self.driver.over = True
            info["episode"] = episode = dict(self._vec.last_final_info[0]["episode"])
            episode["metrics"] = dict(episode["metrics"])  # a single env's user gets a plain dict
        self.driver._last_arrivals = self._vec._arrival_rate[0]
        return obs, float(rewards[0]), terminated, truncated, info

    # ------------------------------------------------------------------ helpers
    @property
    def simulator(self):
        """The :class:`~llmsched_gym.simulator.Simulator` of the current episode."""
        return self.driver.sim

    @staticmethod
    def _one(obs: dict) -> dict:
        return {k: v[0] for k, v in obs.items()}

    @staticmethod
    def _info_of(infos: dict) -> dict:
        return {k: v[0] for k, v in infos.items() if not k.startswith("_") and k not in ("final_obs", "final_info")}
