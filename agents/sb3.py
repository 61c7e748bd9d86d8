"""Bridge to stable-baselines3: a gymnasium ``VectorEnv`` as an SB3 ``VecEnv``.

>>> import gymnasium as gym, llmsched_gym
>>> from agents.sb3 import to_sb3_vec_env
>>> venv = to_sb3_vec_env(gym.make_vec("llmsched/Routing-v0", num_envs=8, scenario="codegen", qps=10))
>>> from stable_baselines3 import PPO
>>> PPO("MultiInputPolicy", venv, n_steps=64).learn(1024)   # doctest: +SKIP

The vector env must autoreset in ``SAME_STEP`` mode (the native vector envs do;
``SyncVectorEnv(..., autoreset_mode=AutoresetMode.SAME_STEP)`` works too), which is
SB3's convention: at an episode's end the returned observation is already the next
episode's first, and ``infos[i]["terminal_observation"]`` holds the last one, with
``infos[i]["TimeLimit.truncated"]`` set when the episode was truncated (not
terminated) so that SB3 bootstraps its value. ``infos[i]["episode"]`` carries
``{"r": return, "l": length}`` at an episode's end (what ``VecMonitor`` reports), and
``infos[i]["episode_metrics"]`` the harness's summary of that episode
(``llmsched_gym.evaluation.metrics.summarize``: ``["classes"][cls]["ttft_mean"]``, ...; a
``LazySummary``, summarized when first read),
un-batched from the vector env's ``info["final_info"]["episode"]["metrics"]`` (only for
the sub-environments whose episode ended; absent if the vector env does not report it).
Action masks for sb3-contrib's ``MaskablePPO``: ``venv.action_masks()`` and
``venv.env_method("action_masks")``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
from gymnasium.vector import AutoresetMode

try:
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as e:  # pragma: no cover
    raise ImportError('agents.sb3 needs the [rl] extra (stable-baselines3): pip install -e ".[rl]"') from e


class Sb3VecEnv(VecEnv):
    """An SB3 ``VecEnv`` over a gymnasium ``VectorEnv`` with SAME_STEP autoreset."""

    def __init__(self, venv):
        mode = venv.metadata.get("autoreset_mode")
        if mode not in (AutoresetMode.SAME_STEP, "SameStep", AutoresetMode.SAME_STEP.value):
            raise ValueError(f"to_sb3_vec_env needs a vector env with SAME_STEP autoreset, got {mode!r}")
        self.venv = venv
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions = None
        self._ep_return = np.zeros(self.num_envs)
        self._ep_length = np.zeros(self.num_envs, np.int64)
        self._t0 = time.time()

    # ------------------------------------------------------------------ VecEnv API
    def reset(self):
        seed = None if any(s is None for s in self._seeds) else [int(s) for s in self._seeds]
        opts = [o for o in self._options if o]
        obs, _ = self.venv.reset(seed=seed, options=opts[0] if opts else None)
        self._reset_seeds()
        self._reset_options()
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return obs

    def step_async(self, actions) -> None:
        self._actions = actions

    def step_wait(self):
        obs, rew, term, trunc, info = self.venv.step(self._actions)
        dones = term | trunc
        self._ep_return += rew
        self._ep_length += 1
        infos = [{} for _ in range(self.num_envs)]
        if dones.any():
            final_obs = info.get("final_obs")
            for i in np.flatnonzero(dones):
                d = infos[i]
                d["terminal_observation"] = final_obs[i]
                d["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
                d["episode"] = {"r": float(self._ep_return[i]), "l": int(self._ep_length[i]),
                                "t": round(time.time() - self._t0, 6)}
                metrics = episode_metrics(info, i)
                if metrics is not None:
                    d["episode_metrics"] = metrics
                self._ep_return[i] = 0.0
                self._ep_length[i] = 0
        return obs, rew.astype(np.float32), dones, infos

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name, indices=None):
        return [getattr(self.venv, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name, value, indices=None) -> None:
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
        idx = self._indices(indices)
        if method_name == "action_masks":
            masks = self.action_masks()
            return [masks[i] for i in idx]
        out = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [out] * len(idx)

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False] * len(self._indices(indices))

    def has_attr(self, attr_name) -> bool:
        if attr_name == "action_masks":
            return hasattr(self.venv, "action_masks") and getattr(self.venv, "kind", "routing") == "routing"
        return hasattr(self.venv, attr_name)

    def action_masks(self) -> np.ndarray:
        """``(num_envs, n_actions)`` bool: valid actions of every sub-environment."""
        return self.venv.action_masks()

    def get_images(self):
        return [None] * self.num_envs

    def _indices(self, indices):
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)


def unbatch_info(infos: dict, i: int) -> dict:
    """Sub-environment ``i``'s entries of a gymnasium vector info (dict of arrays with
    ``_key`` masks, nested dicts recursively): plain Python values, masked-out keys left out."""
    out = {}
    for k, v in infos.items():
        if k.startswith("_"):
            continue
        mask = infos.get("_" + k)
        if mask is not None and not bool(mask[i]):
            continue
        if isinstance(v, dict):
            out[k] = unbatch_info(v, i)
        else:
            x = v[i]
            out[k] = x.item() if isinstance(x, np.generic) else x
    return out


def episode_metrics(infos: dict, i: int) -> "Mapping | None":
    """The harness summary of sub-environment ``i``'s finished episode, from a vector env's
    ``info["final_info"]["episode"]["metrics"]`` (``None`` if it is not there)."""
    fi = infos.get("final_info")
    if not isinstance(fi, dict):
        return None
    mask = infos.get("_final_info")
    if mask is not None and not bool(mask[i]):
        return None
    ep = fi.get("episode")
    if not isinstance(ep, dict) or "metrics" not in ep:
        return None
    m = ep.get("_metrics")
    if m is not None and not bool(m[i]):
        return None
    metrics = ep["metrics"]
    if isinstance(metrics, dict):
        return unbatch_info(metrics, i)
    x = metrics[i]  # an object array of per-env summaries (LazySummary: read on demand)
    return x if isinstance(x, Mapping) else None


def to_sb3_vec_env(env) -> Sb3VecEnv:
    """Adapt a gymnasium ``VectorEnv`` (SAME_STEP autoreset) to stable-baselines3."""
    return Sb3VecEnv(env)
