"""The base class of the single (one-cluster) environments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from .core import DRIVERS, make_setup, normalize_obs, raw_buffers


def check_workload_seed(ws) -> int:
    if isinstance(ws, (bool, np.bool_)) or not isinstance(ws, (int, np.integer)) or ws < 0:
        raise ValueError(f"options['workload_seed'] must be an integer >= 0, got {ws!r}")
    return int(ws)


def draw_workload_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31 - 1))


class LLMSchedEnv(gym.Env):
    """One simulated cluster; subclasses fix the decision (routing, flow control, admission)."""

    metadata = {"render_modes": []}
    kind = ""

    def __init__(self, **kwargs):
        self.setup = make_setup(self.kind, **kwargs)
        self.observation_space = self.setup.observation_space
        self.action_space = self.setup.action_space
        self.driver = DRIVERS[self.kind](self.setup)
        self._raw = raw_buffers(self.setup, 1)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        ws = options.pop("workload_seed", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; allowed: workload_seed")
        ws = draw_workload_seed(self.np_random) if ws is None else check_workload_seed(ws)
        self.driver.reset(ws)
        return self._obs(), self._info()

    def step(self, action):
        reward, terminated, truncated = self.driver.step(action)
        info = self._info()
        if terminated or truncated:
            info.update(self.driver.final_info())
        return self._obs(), float(reward), terminated, truncated, info

    # ------------------------------------------------------------------ helpers
    @property
    def simulator(self):
        """The :class:`~llmsched_gym.simulator.Simulator` of the current episode."""
        return self.driver.sim

    def _obs(self) -> dict:
        self.driver.write_obs(self._raw, 0)
        return {k: v[0] for k, v in normalize_obs(self.setup, self._raw).items()}

    def _info(self) -> dict:
        return self.driver.info()
