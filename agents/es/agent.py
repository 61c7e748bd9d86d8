"""A CMA-ES agent (``agent.json`` with ``"algo": "cmaes"``) as ``agent:PATH``.

:class:`EsAgent` offers what :mod:`agents.policy`'s adapters use from a loaded SB3 model:
``meta``, ``env_id``, ``kind``, ``obs_exclude``, ``control_interval``, ``flow_action``,
``check_instances``, ``normalize`` (the identity: the residual reads the environment's
normalized observation) and ``model.predict(obs, deterministic=True)``; for routing also
:meth:`route_logits`, the float64 logits the router takes the argmax of.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from agents.es.residual import KINDS, RESIDUALS, make_residual
from llmsched_gym.errors import ConfigError


def is_es_agent(path: "str | Path") -> bool:
    """Whether ``path`` is a directory whose ``agent.json`` was written by ``--algo cmaes``."""
    meta = Path(path) / "agent.json"
    return meta.is_file() and json.loads(meta.read_text()).get("algo") == "cmaes"


class EsAgent:
    """The residual policy and ``theta`` saved in ``PATH/agent.json``."""

    def __init__(self, path: "str | Path"):
        self.meta = json.loads((Path(path) / "agent.json").read_text())
        self.env_id = self.meta["env_id"]
        if self.env_id not in RESIDUALS:
            raise ConfigError(f"agent:{path}: {self.env_id!r} has no residual policy")
        self.kind = KINDS[self.env_id]
        kw = dict(self.meta.get("env_kwargs") or {})
        if kw.get("priority_weights"):  # JSON keeps the integer priorities as strings
            kw["priority_weights"] = {int(p): w for p, w in kw["priority_weights"].items()}
        rate = dict(zip([self.meta["rate_kind"]] if self.meta.get("rate_kind") else [], self.meta.get("rates", [])))
        self.residual = make_residual(self.env_id, {"scenario": self.meta["scenario"], **rate, **kw})
        self.theta = np.asarray(self.meta["theta"], np.float64)[None]
        if self.theta.shape[1] != self.residual.dim:
            raise ConfigError(f"agent:{path}: theta has {self.theta.shape[1]} values; the residual needs "
                              f"{self.residual.dim}")
        self.obs_exclude = tuple((kw.get("observation") or {}).get("exclude", ()))
        self.control_interval = float(kw.get("control_interval", 0.1))
        self.flow_action = str(kw.get("action", "ceilings"))
        self.model = self

    def check_instances(self, num_instances: int) -> None:
        """Any cluster size works: the features are per instance with shared weights, or means."""

    def normalize(self, obs: dict) -> dict:
        return obs

    def route_logits(self, obs: dict) -> np.ndarray:
        """Routing: float64 logits ``(1, I)`` of a batch of one observation."""
        return self.residual.logits(obs, self.theta)

    def predict(self, obs: dict, deterministic: bool = True):
        """The action of a batch of one observation (SB3's ``predict`` shape)."""
        return self.residual.act(obs, self.theta), None
