"""Paired candidate evaluation: every candidate ``theta`` runs the same workload seeds.

:class:`PairedEvaluator` runs ``candidates x seeds`` clusters in ONE native vector
environment (``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``): cluster
``c`` runs candidate ``c // S`` on workload seed ``seeds[c % S]``, one batched ``step``
advances them all, and the residual acts for every cluster at once with its own ``theta``
row. The fitness of a cluster is the environment's own episode cost (``episode_cost`` in
its final info: lower is better). Clusters of one batch do not interact (the engine gives
cluster ``c`` of a batch exactly the results of that cluster alone), so a candidate's cost
on a seed does not depend on what else runs beside it, nor on how the population is split
over worker processes (:func:`evaluate_task`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import llmsched_gym  # noqa: F401  (registers the environments)
from agents.es.residual import make_residual


class PairedEvaluator:
    """Episode costs of candidate parameter vectors on shared workload seeds.

    Args:
        env_id: ``llmsched/Routing-v0``, ``llmsched/FlowControl-v0`` or ``llmsched/Gateway-v0``.
        env_kwargs: the environment's keywords (scenario, rate, horizon, ...).
    """

    def __init__(self, env_id: str, env_kwargs: dict):
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self._env = None
        self.residual = make_residual(env_id, env_kwargs)
        self.steps = 0  # environment steps taken (cluster steps, all clusters)

    def _vector_env(self, n: int):
        if self._env is None or self._env.num_envs != n:
            if self._env is not None:
                self._env.close()
            self._env = gym.make_vec(self.env_id, num_envs=n, vectorization_mode="vector_entry_point",
                                     **self.env_kwargs)
            self._env.autoreset = False  # a finished cluster waits; its first episode is the sample
        return self._env

    def costs(self, thetas: np.ndarray, seeds: "list[int]") -> np.ndarray:
        """Episode cost ``(P, S)`` of each candidate (rows of ``thetas``) on each seed."""
        thetas = np.asarray(thetas, np.float64)
        P, S = len(thetas), len(seeds)
        env = self._vector_env(P * S)
        per_cluster = np.repeat(thetas, S, axis=0)
        ws = [int(s) for s in seeds] * P
        obs, info = env.reset(seed=ws, options={"workload_seed": ws})
        cost = np.full(P * S, np.nan)
        done = np.zeros(P * S, bool)
        while not done.all():
            action = self.residual.act(obs, per_cluster, info.get("action_mask"))
            obs, _, terminated, truncated, info = env.step(action)
            self.steps += int((~done).sum())
            ended = (terminated | truncated) & ~done
            if ended.any():
                cost[ended] = info["final_info"]["episode_cost"][ended]
                done |= ended
        return cost.reshape(P, S)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


_EVALUATORS: dict = {}


def evaluate_task(task: tuple) -> tuple[np.ndarray, int]:
    """One backend task ``(env_id, env_kwargs, thetas, seeds)`` -> (costs ``(P, S)``,
    environment steps); the evaluator (its vector env) is kept per process."""
    env_id, env_kwargs, thetas, seeds = task
    key = (env_id, repr(sorted(env_kwargs.items())))
    ev = _EVALUATORS.get(key)
    if ev is None:
        ev = _EVALUATORS[key] = PairedEvaluator(env_id, env_kwargs)
    before = ev.steps
    return ev.costs(thetas, seeds), ev.steps - before
