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

Residual routing (``--policy residual``): :class:`ResidualLMetricScorer` starts *at*
LMetric. Its logits are LMetric's ``-(log P_i + log(BS_i + 1))``, recovered exactly from
the observation (:func:`lmetric_score`), times a learned gain, plus the scorer's learned
correction initialised to zero, so the untrained deterministic policy routes exactly
as ``lmetric-no-detector`` (the hotspot detector's sliding-window state is not in the
observation).

Residual flow control (``--policy residual`` on ``llmsched/FlowControl-v0``, which then
uses ``action="soft-reflective"``): :class:`ResidualSoftReflectivePolicy` is a Gaussian
PPO policy whose mean is ``0.5 + W h(obs)`` with ``W`` initialised to zero, so the
untrained deterministic action is exactly ``(0.5, 0.5)``: ramp 1, period scale 1, the
published soft-reflective ceiling, run by the engine's own duty cycle.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from agents import routing_obs
from agents.routing_obs import LN2

try:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
except ImportError:  # pragma: no cover
    MaskableActorCriticPolicy = None

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


def _on_cpu(obs: dict) -> dict:
    return {k: obs[k].detach().cpu().numpy() for k in routing_obs.LMETRIC_KEYS}


def lmetric_score(obs: dict) -> th.Tensor:
    """LMetric's metric ``P_i (BS_i + 1)`` per instance, ``(N, I)`` float64, recovered
    exactly from the environment's normalized Routing observation
    (:func:`agents.routing_obs.lmetric_score`)."""
    return th.as_tensor(routing_obs.lmetric_score(_on_cpu(obs)), device=obs["request"].device)


def lmetric_logits(obs: dict) -> th.Tensor:
    """``-log(max(P_i (BS_i + 1), 0.5))`` (float64): its argmax is LMetric's choice
    (:func:`agents.routing_obs.lmetric_logits`)."""
    return th.as_tensor(routing_obs.lmetric_logits(_on_cpu(obs)), device=obs["request"].device)


class ResidualLMetricScorer(InstanceScorer):
    """The per-instance scorer as a *residual* on LMetric: logits =
    ``base_gain * lmetric_logits(obs) + correction``, where the correction is the
    :class:`InstanceScorer`'s MLP + linear score, both output layers initialised to zero.

    At initialisation the correction is exactly 0, so the deterministic policy (the
    argmax, taken in float64 by :meth:`decision_scores`) routes exactly as LMetric
    without its hotspot detector; ``base_gain`` (> 0, learned as a log) sets how sharply
    the stochastic policy follows LMetric during exploration (with 1.0 it is the plain
    softmax of ``-(log P_i + log(BS_i + 1))``).
    """

    def __init__(self, observation_space: gym.spaces.Dict, hidden: int = 64, critic_hidden: int = 64,
                 linear_gain: float = 30.0, base_gain: float = 1.0, learn_base_gain: bool = True):
        super().__init__(observation_space, hidden=hidden, critic_hidden=critic_hidden, linear_gain=linear_gain)
        if not base_gain > 0:
            raise ValueError(f"base_gain={base_gain!r} is invalid; it must be > 0")
        nn.init.zeros_(self.score_head.weight)
        nn.init.zeros_(self.score_head.bias)
        self.log_base_gain = nn.Parameter(th.tensor(float(np.log(base_gain))), requires_grad=bool(learn_base_gain))

    def correction(self, obs: dict) -> tuple[th.Tensor, th.Tensor]:
        """The learned correction ``(N, I)`` and the critic embedding."""
        return super().scores_and_embedding(obs)

    def decision_scores(self, obs: dict) -> th.Tensor:
        """Float64 logits for the deterministic choice (argmax, first index on ties)."""
        corr, _ = self.correction(obs)
        return self.log_base_gain.double().exp() * lmetric_logits(obs) + corr.double()

    def scores_and_embedding(self, obs: dict) -> tuple[th.Tensor, th.Tensor]:
        corr, emb = self.correction(obs)
        base = lmetric_logits(obs).to(corr.dtype)
        return self.log_base_gain.exp() * base + corr, emb


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


class _ResidualMixin:
    """Deterministic actions from the float64 residual logits (exactly LMetric's choice at
    initialisation; float32 probabilities could merge near-ties)."""

    def _predict(self, observation, deterministic: bool = False, action_masks=None):
        if not deterministic:
            if action_masks is None:
                return super()._predict(observation, deterministic=False)
            return super()._predict(observation, deterministic=False, action_masks=action_masks)
        logits = self.features_extractor.decision_scores(observation)
        if action_masks is not None:
            m = th.as_tensor(np.asarray(action_masks), dtype=th.bool, device=logits.device).reshape(logits.shape)
            logits = th.where(m, logits, th.full_like(logits, -th.inf))
        return th.argmax(logits, dim=1)


def _residual_kwargs(kwargs: dict) -> dict:
    kwargs.setdefault("features_extractor_class", ResidualLMetricScorer)
    return _scorer_kwargs(kwargs)


class ResidualScorerPolicy(_ResidualMixin, _ScorerMixin, ActorCriticPolicy):
    """PPO policy: LMetric's logits plus a learned per-instance correction (zero at init)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **_residual_kwargs(kwargs))


if MaskableActorCriticPolicy is not None:
    class MaskableScorerPolicy(_ScorerMixin, MaskableActorCriticPolicy):
        """MaskablePPO policy: masked softmax over per-instance scores."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **_scorer_kwargs(kwargs))

    class MaskableResidualScorerPolicy(_ResidualMixin, _ScorerMixin, MaskableActorCriticPolicy):
        """MaskablePPO policy: masked softmax over LMetric's logits plus a learned
        per-instance correction (zero at init: the deterministic policy is LMetric)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **_residual_kwargs(kwargs))


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


class ResidualSoftReflectivePolicy(BiasedMlpPolicy):
    """PPO policy for FlowControl-v0 with ``action="soft-reflective"``: a learned
    adjustment of the soft-reflective ceiling's ramp and period.

    The action ``a`` in ``[0, 1]^2`` sets the engine's own soft-reflective ceiling each
    control interval (``llmsched_gym.envs.core.soft_reflective_params``: ramp ``2 a[0]``,
    period scale ``4 ** (2 a[1] - 1)``). The Gaussian's mean is ``action_bias + W h(obs)``,
    ``h`` the usual MLP latent; ``W`` (the final layer, ``action_net``) starts at zero and
    its bias at 0.5, so at initialisation the mean is exactly 0.5 (float32: 0 * finite
    = 0, 0.5 is representable) whatever the observation, and the deterministic policy *is*
    ``soft-reflective-ceiling`` (ramp 1, period scale 1). The correction is learned from
    the observation through ``W`` (its gradient is ``h``, non-zero) and the MLP behind it.

    Exploration: ``log_std_init`` (set by ``--policy residual``, docs/agents.md) -2.0,
    std 0.135 in action units: about +-0.27 in ramp and a factor 4 ** 0.27 = 1.45 in
    period scale per standard deviation, so sampled actions stay near the baseline and
    rarely reach the action bounds (0.5 is 3.7 std from either).
    """

    def __init__(self, *args, action_bias: float = 0.5, **kwargs):
        super().__init__(*args, action_bias=action_bias, **kwargs)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)  # action_net.bias = action_bias
        with th.no_grad():
            self.action_net.weight.zero_()


class ResidualGatewayPolicy(ResidualSoftReflectivePolicy):
    """PPO policy for Gateway-v0 (``--policy residual``): the Gaussian's mean starts at
    exactly the environment's centre action (``action_centre``, the training script passes
    ``setup.centre``: 0.5 for every parameter-mode value and routing factor, 0 for rejection
    probabilities), which is its base combination request for request, and learns
    per-interval adjustments of admission, flow control and the per-instance factors on
    LMetric's score (docs/environments.md). Same construction as
    :class:`ResidualSoftReflectivePolicy`: the final layer starts at zero, its bias at the
    centre (0, 0.5 and 1 are exact in float32)."""

    def __init__(self, *args, action_centre: "list[float] | None" = None, **kwargs):
        self.action_centre = None if action_centre is None else [float(v) for v in action_centre]
        super().__init__(*args, **kwargs)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        if self.action_centre is not None:
            with th.no_grad():
                self.action_net.bias.copy_(th.tensor(self.action_centre, dtype=self.action_net.bias.dtype))
