"""Networks for the llmsched agents.

Routing: a permutation-equivariant *per-instance scorer*. One small MLP, shared by every
instance, scores an instance from its own features (scraped load, router counters, the
current request's prefix hit there) plus the request's features; the action
distribution is a softmax over the instances' scores (masked by MaskablePPO). The critic
pools the same per-instance embeddings (mean and max over instances). Nothing depends
on the number of instances, so a scorer trained on a 4-instance cluster routes a
16-instance one: :meth:`InstanceScorer.scores` takes any ``I``.

The network reads exactly the environment's (normalized) observation ``Dict`` and
derives a few features from it inside the network (``_features``): the un-logged
outstanding prefill tokens, the request's uncached tokens on each instance, their sum
and ``log(in_flight + 1)`` (the ingredients of LMetric's metric; the network learns
how to combine them), and every feature centred on its mean over instances.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

try:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
except ImportError:  # pragma: no cover
    MaskableActorCriticPolicy = None

LN2 = float(np.log(2.0))
#: per-instance raw features + their centred copies + broadcast request/global features
N_INST_FEATS = 10
N_GLOBAL_FEATS = 5


def _unlog(x: th.Tensor, bits: float) -> th.Tensor:
    """Invert the environment's log scale ``log2(1 + v) / bits`` (clipped)."""
    return th.expm1(x.clamp(0, 2) * bits * LN2)


def _features(obs: dict) -> tuple[th.Tensor, th.Tensor]:
    """Per-instance features ``(N, I, F)`` and global features ``(N, G)`` from the env's
    normalized Routing observation (keys of ``llmsched/Routing-v0``)."""
    run, wait, kv = obs["running"], obs["waiting"], obs["kv_util"]
    infl, pre, hit = obs["in_flight"], obs["prefill_tokens"], obs["prefix_hit"]
    req = obs["request"]
    inp = _unlog(req[:, 0:1], 20.0)                       # prompt tokens
    uncached = (1.0 - hit.clamp(0, 1)) * inp              # tokens to prefill on each instance
    backlog = _unlog(pre, 20.0) + uncached                # LMetric's P_i
    n_infl = _unlog(infl, 10.0)                           # in-flight requests
    log_backlog = th.log1p(backlog) / 8.0
    log_bs = th.log1p(n_infl + 1.0) / 2.0
    per = [run, wait * 5.0, kv, infl * 5.0, pre * 3.0, hit, th.log1p(uncached) / 8.0, log_backlog, log_bs,
           log_backlog + log_bs]
    x = th.stack(per, dim=-1)                              # (N, I, F0)
    x = th.cat([x, x - x.mean(dim=1, keepdim=True)], dim=-1)
    g = th.cat([obs["saturation"].clamp(0, 4), req * th.tensor([3.0, 3.0, 1.0, 2.0], device=req.device)], dim=-1)
    return x, g


class InstanceScorer(BaseFeaturesExtractor):
    """Shared per-instance MLP: scores ``(N, I)`` and a pooled critic embedding.

    As an SB3 features extractor it returns ``[scores (I), critic embedding (H)]``; the
    policy (:class:`ScorerPolicy`) uses the first ``I`` entries as the action logits and
    the rest for the value.
    """

    def __init__(self, observation_space: gym.spaces.Dict, hidden: int = 64, critic_hidden: int = 64,
                 linear_gain: float = 30.0):
        self.n_instances = int(observation_space["running"].shape[0])
        super().__init__(observation_space, features_dim=self.n_instances + critic_hidden)
        f_in = 2 * N_INST_FEATS + N_GLOBAL_FEATS
        self.embed = nn.Sequential(nn.Linear(f_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.score_head = nn.Linear(hidden, 1)
        # A direct linear score with a large gain (a higher effective learning rate):
        # sharp routing needs logit gaps of several units between instances whose
        # features differ by ~0.1, which the MLP path alone takes long to reach.
        self.linear = nn.Linear(f_in, 1)
        self.linear_gain = float(linear_gain)
        self.critic = nn.Sequential(nn.Linear(2 * hidden + N_GLOBAL_FEATS, critic_hidden), nn.Tanh())
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        nn.init.orthogonal_(self.score_head.weight, gain=0.01)

    def scores_and_embedding(self, obs: dict) -> tuple[th.Tensor, th.Tensor]:
        x, g = _features(obs)
        N, I, _ = x.shape
        z = th.cat([x, g[:, None, :].expand(N, I, g.shape[-1])], dim=-1)
        h = self.embed(z)
        scores = (self.score_head(h) + self.linear_gain * self.linear(z)).squeeze(-1)
        pooled = th.cat([h.mean(dim=1), h.max(dim=1).values, g], dim=-1)
        return scores, self.critic(pooled)

    def scores(self, obs: dict) -> th.Tensor:
        """Action logits ``(N, I)`` for a cluster of any size ``I``."""
        return self.scores_and_embedding(obs)[0]

    def forward(self, obs: dict) -> th.Tensor:
        s, e = self.scores_and_embedding(obs)
        return th.cat([s, e], dim=-1)


class _Slice(nn.Module):
    def __init__(self, start: int, stop: int | None = None):
        super().__init__()
        self.start, self.stop = start, stop

    def forward(self, x):
        return x[..., self.start:self.stop]


class _ValueHead(nn.Module):
    def __init__(self, start: int, dim: int):
        super().__init__()
        self.start = start
        self.lin = nn.Linear(dim, 1)

    def forward(self, x):
        return self.lin(x[..., self.start:])


class _ScorerMixin:
    """Replaces the flat action/value heads with the scorer's slices."""

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        ext = self.features_extractor
        I = ext.n_instances
        self.action_net = _Slice(0, I)
        self.value_net = _ValueHead(I, ext.features_dim - I)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


def _scorer_kwargs(kwargs: dict) -> dict:
    kwargs.setdefault("features_extractor_class", InstanceScorer)
    kwargs.setdefault("net_arch", dict(pi=[], vf=[]))
    kwargs.setdefault("share_features_extractor", True)
    kwargs.setdefault("ortho_init", False)
    return kwargs


class ScorerPolicy(_ScorerMixin, ActorCriticPolicy):
    """PPO policy: softmax over per-instance scores (see module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **_scorer_kwargs(kwargs))


if MaskableActorCriticPolicy is not None:
    class MaskableScorerPolicy(_ScorerMixin, MaskableActorCriticPolicy):
        """MaskablePPO policy: masked softmax over per-instance scores."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **_scorer_kwargs(kwargs))


class BiasedMlpPolicy(MultiInputActorCriticPolicy):
    """PPO ``MultiInputPolicy`` whose Gaussian starts at ``action_bias`` (e.g. every
    ceiling at 1.0: the static usage limit), so exploration begins around the
    default gateway rather than at ceilings of 0 (everything blocked)."""

    def __init__(self, *args, action_bias: float = 1.0, **kwargs):
        self.action_bias = float(action_bias)
        super().__init__(*args, **kwargs)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        with th.no_grad():
            self.action_net.bias.fill_(self.action_bias)
