"""Roll out episodes in Routing-v0's native vector env and record the teacher's labels on
every state visited (behaviour cloning: the teacher acts; DAgger: a mixture of teacher and
student acts, the teacher labels).

Each batch of episodes starts from workload seeds given by the caller (the declared
training seeds, ``agents/declared_seeds.yaml``): a cluster whose episode ends is no longer
labelled (the vector env autoresets it to a workload seed of its own drawing, which is
simulated, not recorded), and the batch ends when every cluster's first episode has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agents.imitation.labeller import RoutingLabeller


@dataclass
class Dataset:
    """States, action masks and the teacher's answer, one row per labelled decision.

    Args:
        obs: the environment's observation per key, ``(N, ...)`` float32.
        masks: the action masks, ``(N, I)``.
        label: the teacher's choice, ``(N,)``.
        costs: each instance's mean cost over the sampled futures, ``(N, I)`` (``inf`` where
            it was not a candidate).
        seeds: the workload seed of each row's episode.
        own: the base heuristic's own choice, ``(N,)``.
    """

    obs: dict = field(default_factory=dict)
    masks: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    label: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    costs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    seeds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    own: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.label)

    @staticmethod
    def concat(parts: "list[Dataset]") -> "Dataset":
        """The rows of every part, in order."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return Dataset()
        return Dataset({k: np.concatenate([p.obs[k] for p in parts]) for k in parts[0].obs},
                       np.concatenate([p.masks for p in parts]), np.concatenate([p.label for p in parts]),
                       np.concatenate([p.costs for p in parts]), np.concatenate([p.seeds for p in parts]),
                       np.concatenate([p.own for p in parts]))

    def save(self, path) -> None:
        """The rows as one ``.npz`` (observation keys prefixed ``obs_``), for refitting without relabelling."""
        np.savez_compressed(path, **{f"obs_{k}": v for k, v in self.obs.items()}, masks=self.masks, label=self.label,
                            costs=self.costs, seeds=self.seeds, own=self.own)

    @staticmethod
    def load(path) -> "Dataset":
        with np.load(path) as z:
            return Dataset({k[4:]: z[k] for k in z.files if k.startswith("obs_")}, z["masks"], z["label"],
                           z["costs"], z["seeds"], z["own"])

    def subset(self, rows: np.ndarray) -> "Dataset":
        return Dataset({k: v[rows] for k, v in self.obs.items()}, self.masks[rows], self.label[rows],
                       self.costs[rows], self.seeds[rows], self.own[rows])


def rollout(labeller: RoutingLabeller, seeds: list[int], student=None, beta: float = 1.0,
            rng: np.random.Generator | None = None, progress=None) -> Dataset:
    """One batch of episodes, one per cluster of the labeller's vector env, from workload
    ``seeds`` (one per cluster), every decision labelled by the teacher.

    Args:
        labeller: the teacher on its vector env.
        seeds: workload seeds, one per cluster.
        student: ``student(obs, masks) -> actions`` (None: the teacher acts).
        beta: probability that the teacher's label is the action taken at a decision
            (DAgger's mixture; 1: behaviour cloning).
        rng: draws the mixture (needed when ``student`` is given and ``beta < 1``).
        progress: called with the number of decisions labelled at each step.
    """
    vec = labeller.vec
    n = vec.num_envs
    obs, _ = vec.reset(seed=int(seeds[0]), options={"workload_seed": [int(s) for s in seeds]})
    live = np.ones(n, bool)
    parts = []
    I = vec.setup.num_instances
    while live.any():
        masks = vec.action_masks()
        lab = labeller.label(np.flatnonzero(live))
        rows = lab.clusters
        costs = np.full((len(rows), I), np.inf)
        np.put_along_axis(costs, lab.candidates, lab.costs.mean(axis=1), axis=1)
        parts.append(Dataset({k: v[rows].copy() for k, v in obs.items()}, masks[rows].copy(), lab.label, costs,
                             np.asarray(seeds, np.int64)[rows], lab.own))
        actions = masks.argmax(axis=1)  # finished clusters run another episode, unrecorded
        actions[rows] = lab.label
        if student is not None and beta < 1.0:
            own = student({k: v[rows] for k, v in obs.items()}, masks[rows])
            take = rng.random(len(rows)) >= beta
            actions[rows[take]] = own[take]
        obs, _, terminated, truncated, _ = vec.step(actions)
        live[rows] &= ~(terminated[rows] | truncated[rows])
        if progress is not None:
            progress(len(rows))
    return Dataset.concat(parts)
