"""Behaviour cloning of the per-instance Routing scorer (:mod:`agents.networks`) on labelled
states: cross-entropy of its masked logits against the teacher's choice (``target="hard"``)
or against a softmax of the candidates' costs (``target="soft"``: instances whose copies
cost about as much as the best one share the target)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch as th

from agents.imitation.collect import Dataset


def logits(policy, obs: dict) -> th.Tensor:
    """The policy's action logits ``(N, I)`` (the scorer's, for a cluster of any size)."""
    return policy.features_extractor.scores(obs)


def masked(x: th.Tensor, masks: th.Tensor) -> th.Tensor:
    return th.where(masks, x, th.full_like(x, -th.inf))


def tensors(data: Dataset) -> tuple[dict, th.Tensor]:
    """The observations and masks of ``data`` as tensors."""
    return {k: th.as_tensor(v, dtype=th.float32) for k, v in data.obs.items()}, th.as_tensor(data.masks)


def act(policy, obs: dict, masks: np.ndarray) -> np.ndarray:
    """The policy's deterministic actions (the masked argmax of its logits)."""
    with th.no_grad():
        x = logits(policy, {k: th.as_tensor(v, dtype=th.float32) for k, v in obs.items()})
        return masked(x, th.as_tensor(masks)).argmax(dim=1).numpy()


def accuracy(policy, data: Dataset) -> float:
    """Share of ``data``'s rows where the policy picks the teacher's label."""
    if not len(data):
        return float("nan")
    return float(np.mean(act(policy, data.obs, data.masks) == data.label))


def soft_targets(costs: np.ndarray, masks: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(-(cost - min cost) / (temperature x the row's cost spread))`` over the
    valid candidates: a scale-free target whose sharpness ``temperature`` sets."""
    c = np.where(masks & np.isfinite(costs), costs, np.inf)
    lo = c.min(axis=1, keepdims=True)
    finite = np.where(np.isfinite(c), c, lo)
    spread = np.maximum(finite.max(axis=1, keepdims=True) - lo, 1e-9)
    z = np.where(np.isfinite(c), -(c - lo) / (temperature * spread), -np.inf)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def fit(policy, data: Dataset, *, epochs: int, batch_size: int, lr: float, seed: int,
        target: Literal["hard", "soft"] = "hard", temperature: float = 0.1, progress=None) -> list[float]:
    """Train ``policy``'s scorer on ``data`` (Adam, minibatches drawn with ``seed``); returns the
    mean loss of each epoch.

    Args:
        policy: an SB3 policy with the per-instance scorer (``MaskableScorerPolicy`` or its residual).
        data: labelled states.
        epochs: passes over ``data``.
        batch_size: rows per gradient step.
        lr: Adam's learning rate.
        seed: seeds the minibatch order (and torch).
        target: ``hard`` (the label) or ``soft`` (:func:`soft_targets` of the costs).
        temperature: the soft target's sharpness.
        progress: called with the epoch's mean loss after each epoch.
    """
    th.manual_seed(seed)
    rng = np.random.default_rng(seed)
    obs, masks = tensors(data)
    if target == "soft":
        y = th.as_tensor(soft_targets(data.costs, data.masks, temperature), dtype=th.float32)
    else:
        y = th.as_tensor(data.label)
    opt = th.optim.Adam(policy.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        total = 0.0
        order = rng.permutation(len(data))
        for b in range(0, len(order), batch_size):
            rows = th.as_tensor(order[b:b + batch_size])
            logp = th.log_softmax(masked(logits(policy, {k: v[rows] for k, v in obs.items()}), masks[rows]), dim=1)
            if target == "soft":
                loss = -(y[rows] * th.where(y[rows] > 0, logp, th.zeros_like(logp))).sum(dim=1).mean()
            else:
                loss = th.nn.functional.nll_loss(logp, y[rows])
            opt.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
            total += loss.item() * len(rows)
        losses.append(total / len(data))
        if progress is not None:
            progress(losses[-1])
    return losses
