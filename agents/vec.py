"""SB3 helpers for training: a mixture of vector envs, fixed held-out workloads, the
best model's normalization statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from llmsched_gym.errors import ConfigError


class ConcatVecEnv(VecEnv):
    """Several SB3 VecEnvs with the same spaces, stepped as one (a training mixture)."""

    def __init__(self, venvs):
        self.venvs = list(venvs)
        first = self.venvs[0]
        for v in self.venvs[1:]:
            if v.observation_space != first.observation_space or v.action_space != first.action_space:
                raise ConfigError("curriculum: every scenario must give the same observation/action spaces "
                                  "(same number of instances and priority bands)")
        self.bounds = np.cumsum([0] + [v.num_envs for v in self.venvs])
        super().__init__(int(self.bounds[-1]), first.observation_space, first.action_space)
        self._actions = None

    def _split(self, x):
        return [x[a:b] for a, b in zip(self.bounds[:-1], self.bounds[1:])]

    def reset(self):
        for v, s, o in zip(self.venvs, self._split(self._seeds), self._split(self._options)):
            if all(x is not None for x in s):
                v.seed(int(s[0]))
            if o and o[0]:
                v.set_options(o[0])
        obs = [v.reset() for v in self.venvs]
        self._reset_seeds()
        self._reset_options()
        return self._cat(obs)

    def _cat(self, obs):
        if isinstance(obs[0], dict):
            return {k: np.concatenate([o[k] for o in obs]) for k in obs[0]}
        return np.concatenate(obs)

    def step_async(self, actions):
        for v, a in zip(self.venvs, self._split(actions)):
            v.step_async(a)

    def step_wait(self):
        res = [v.step_wait() for v in self.venvs]
        obs = self._cat([r[0] for r in res])
        return obs, np.concatenate([r[1] for r in res]), np.concatenate([r[2] for r in res]), \
            sum((list(r[3]) for r in res), [])

    def action_masks(self):
        return np.concatenate([v.action_masks() for v in self.venvs])

    def close(self):
        for v in self.venvs:
            v.close()

    def _which(self, indices):
        idx = range(self.num_envs) if indices is None else ([indices] if isinstance(indices, int) else indices)
        return [(int(np.searchsorted(self.bounds, i, side="right") - 1), i) for i in idx]

    def get_attr(self, attr_name, indices=None):
        return [self.venvs[k].get_attr(attr_name, [i - self.bounds[k]])[0] for k, i in self._which(indices)]

    def set_attr(self, attr_name, value, indices=None):
        for v in self.venvs:
            v.set_attr(attr_name, value)

    def env_method(self, method_name, *args, indices=None, **kwargs):
        if method_name == "action_masks":
            m = self.action_masks()
            return [m[i] for _, i in self._which(indices)]
        return [self.venvs[k].env_method(method_name, *args, indices=[i - self.bounds[k]], **kwargs)[0]
                for k, i in self._which(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False for _ in self._which(indices)]

    def has_attr(self, attr_name):
        return all(v.has_attr(attr_name) for v in self.venvs)

    def get_images(self):
        return [None] * self.num_envs


def fixed_seed_venv(venv, first_seed: int):
    """Wrap ``venv`` so that each reset uses workload seeds ``first_seed + i`` (held out)."""
    from stable_baselines3.common.vec_env import VecEnvWrapper

    class _Fixed(VecEnvWrapper):
        def reset(self):
            parts = getattr(self.venv, "venvs", [self.venv])
            k = first_seed
            for p in parts:
                p.set_options({"workload_seed": [k + i for i in range(p.num_envs)]})
                k += p.num_envs
            return self.venv.reset()

        def step_wait(self):
            return self.venv.step_wait()

        def action_masks(self):
            return self.venv.action_masks()

    return _Fixed(venv)


class SaveBestStats(BaseCallback):
    """``callback_on_new_best`` of the EvalCallback: saves the training env's VecNormalize
    statistics at the moment a new best model is saved (``best/vecnormalize.pkl`` next to
    ``best/best_model.zip``). They are the statistics that model's held-out evaluation
    used (the EvalCallback copies them to the evaluation env before evaluating) and that
    it was trained with; the final ones belong to the final model."""

    def __init__(self, path):
        super().__init__()
        self.path = Path(path)

    def _on_step(self) -> bool:
        vn = self.model.get_vec_normalize_env()
        if vn is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            vn.save(str(self.path / "vecnormalize.pkl"))
        return True
