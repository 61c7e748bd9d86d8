"""Residual policies with a small parameter vector ``theta``: exactly a heuristic at 0.

Each acts on a batch of the environment's normalized observations (``(N, ...)`` numpy
arrays, float32 as the environments return them) with one ``theta`` row per cluster
(``thetas``: ``(N, dim)``), in float64, without a per-cluster Python loop:

* :class:`RoutingResidual` (``llmsched/Routing-v0``): logits = LMetric's logits recovered
  from the observation (:func:`agents.routing_obs.lmetric_logits`, which
  ``agents.networks`` uses too) + ``theta . f_i``, with ``f_i`` a few per-instance
  features centred over the instances; the argmax over the action mask (first index on
  ties). At ``theta = 0`` it routes exactly as ``lmetric-no-detector``. With Routing-v0's
  ``hint=<router>`` the base is the one-hot of that router's pick instead (exactly that
  router at ``theta = 0``).
* :class:`FlowResidual` (``llmsched/FlowControl-v0``, ``action="soft-reflective"``):
  action = ``clip(0.5 + Theta h(obs), 0, 1)`` with ``Theta`` a ``2 x H`` matrix over a
  few cluster-level features; (0.5, 0.5) is the published soft-reflective ceiling.
* :class:`GatewayResidual` (``llmsched/Gateway-v0``): the environment's centre action (its
  base combination) + a correction: the routing factors from centred per-instance features
  with weights shared by every instance, the admission and flow parts from cluster-level
  features.
"""

from __future__ import annotations

import numpy as np

from agents.routing_obs import lmetric_logits, lmetric_parts, unlog

#: Per-instance routing features (centred over instances): the raw observation columns and
#: the ingredients of LMetric's metric, so ``theta`` can reweight prefill against batch size.
ROUTING_FEATURES = ("running", "waiting", "kv_util", "in_flight", "prefill_tokens", "prefix_hit",
                    "log_uncached", "log_backlog", "log_batch")
#: The hint router's logit lead (the features' scale is ~0.1-1 per unit of theta).
HINT_GAIN = 1.0
#: Per-instance features of Gateway-v0's routing factors (centred over instances).
GATEWAY_INSTANCE_FEATURES = ("running", "waiting", "kv_util", "in_flight", "prefill_tokens")


def _centred(x: np.ndarray) -> np.ndarray:
    """Features ``(N, I, F)`` minus their mean over the instances."""
    return x - x.mean(axis=1, keepdims=True)


def routing_features(obs: dict) -> np.ndarray:
    """The centred per-instance features ``(N, I, F)`` of :data:`ROUTING_FEATURES`."""
    prefill, batch = lmetric_parts(obs)
    inp = unlog(obs["request"][:, 0:1], 20.0)
    uncached = np.maximum(inp - np.round(obs["prefix_hit"].astype(np.float64) * inp), 0.0)
    cols = [obs[k].astype(np.float64) for k in ROUTING_FEATURES[:6]]
    cols += [np.log1p(uncached) / 8.0, np.log1p(prefill) / 8.0, np.log(batch + 2.0) / 2.0]
    return _centred(np.stack(cols, axis=-1))


def cluster_features(obs: dict) -> np.ndarray:
    """Cluster-level features ``(N, H)`` of an interval environment: 1 (a constant
    correction), saturation, the instance means of running, waiting and KV use, and each
    band's queue length, oldest wait and arrival rate."""
    f = [np.ones((obs["saturation"].shape[0], 1)), obs["saturation"]]
    f += [obs[k].mean(axis=1, keepdims=True) for k in ("running", "waiting", "kv_util")]
    f += [obs[k] for k in ("band_length", "band_oldest_wait", "band_arrival_rate")]
    return np.concatenate([x.astype(np.float64) for x in f], axis=1)


def cluster_feature_names(bands: int) -> list[str]:
    """Names of :func:`cluster_features`' columns for ``bands`` bands."""
    per_band = [f"{k}[{b}]" for k in ("band_length", "band_oldest_wait", "band_arrival_rate") for b in range(bands)]
    return ["bias", "saturation", "running_mean", "waiting_mean", "kv_util_mean"] + per_band


class RoutingResidual:
    """A heuristic's logits + ``theta . f_i`` (see the module docstring); ``dim`` = 9.

    The base is LMetric's logits recovered from the observation, or, when the environment
    observes Routing-v0's ``hint`` (``hint=<compiled router>``), ``HINT_GAIN`` times the
    one-hot of that router's pick: at ``theta = 0`` the policy is that router, and the
    correction changes a pick only where it outweighs the gain.
    """

    feature_names = ROUTING_FEATURES

    def __init__(self, setup=None):
        self.dim = len(ROUTING_FEATURES)
        self.hint = getattr(setup, "hint", None)
        self.heuristic = self.hint or "lmetric-no-detector"

    def logits(self, obs: dict, thetas: np.ndarray) -> np.ndarray:
        """Float64 logits ``(N, I)``; ``thetas`` ``(N, dim)``."""
        base = HINT_GAIN * obs["hint"].astype(np.float64) if self.hint else lmetric_logits(obs)
        return base + np.einsum("nif,nf->ni", routing_features(obs), thetas)

    def act(self, obs: dict, thetas: np.ndarray, mask: "np.ndarray | None" = None) -> np.ndarray:
        """The instance per cluster ``(N,)`` int64: the argmax over the mask."""
        z = self.logits(obs, thetas)
        if mask is not None:
            z = np.where(mask, z, -np.inf)
        return np.argmax(z, axis=1).astype(np.int64)


class FlowResidual:
    """``clip(0.5 + Theta h(obs), 0, 1)`` for FlowControl-v0's soft-reflective action;
    ``theta`` is ``Theta`` (2 x H) row-major."""

    heuristic = "soft-reflective-ceiling"

    def __init__(self, setup):
        if getattr(setup, "flow_action", None) != "soft-reflective":
            raise ValueError("FlowResidual needs FlowControl-v0 with action='soft-reflective'")
        self.feature_names = cluster_feature_names(len(setup.band_priorities))
        self.dim = 2 * len(self.feature_names)

    def act(self, obs: dict, thetas: np.ndarray, mask=None) -> np.ndarray:
        """``(N, 2)`` actions in [0, 1] (ramp, period), float64."""
        W = thetas.reshape(len(thetas), 2, -1)
        return np.clip(0.5 + np.einsum("nah,nh->na", W, cluster_features(obs)), 0.0, 1.0)


class GatewayResidual:
    """The centre action of Gateway-v0 + a correction (see the module docstring):
    ``theta`` = the shared per-instance weights of the routing factors
    (:data:`GATEWAY_INSTANCE_FEATURES`), then the ``K x H`` matrix of the admission and
    flow parts over :func:`cluster_features` (row-major)."""

    def __init__(self, setup):
        self.centre = np.asarray(setup.centre, np.float64)
        self.route = setup.route
        self.other = np.r_[np.arange(setup.adm.start, setup.adm.stop), np.arange(setup.flow.start, setup.flow.stop)]
        self.feature_names = cluster_feature_names(len(setup.band_priorities))
        self.n_inst = len(GATEWAY_INSTANCE_FEATURES)
        self.dim = self.n_inst + len(self.other) * len(self.feature_names)
        self.heuristic = f"Gateway-v0 centre action ({setup.router}, {setup.admission_action} admission, " \
                         f"flow {setup.flow_action})"

    def act(self, obs: dict, thetas: np.ndarray, mask=None) -> np.ndarray:
        """``(N, A)`` actions in [0, 1], float64."""
        n = len(thetas)
        a = np.repeat(self.centre[None], n, axis=0)
        per = _centred(np.stack([obs[k].astype(np.float64) for k in GATEWAY_INSTANCE_FEATURES], axis=-1))
        a[:, self.route] += np.einsum("nif,nf->ni", per, thetas[:, :self.n_inst])
        if len(self.other):
            W = thetas[:, self.n_inst:].reshape(n, len(self.other), -1)
            a[:, self.other] += np.einsum("nkh,nh->nk", W, cluster_features(obs))
        return np.clip(a, 0.0, 1.0)


#: Environment id -> its residual class.
RESIDUALS = {"llmsched/Routing-v0": RoutingResidual, "llmsched/FlowControl-v0": FlowResidual,
             "llmsched/Gateway-v0": GatewayResidual}
#: Environment id -> its kind (``make_setup``'s first argument).
KINDS = {"llmsched/Routing-v0": "routing", "llmsched/FlowControl-v0": "flow_control",
         "llmsched/Gateway-v0": "gateway"}
#: Environment keywords a residual needs (FlowControl: the soft-reflective action).
RESIDUAL_ENV_KWARGS = {"llmsched/FlowControl-v0": {"action": "soft-reflective"}}


def make_residual(env_id: str, env_kwargs: dict):
    """The residual policy of ``env_id`` for the environment ``env_kwargs`` describe."""
    from llmsched_gym.envs.core import make_setup

    return RESIDUALS[env_id](make_setup(KINDS[env_id], **env_kwargs))
