"""Gymnasium environments (docs/environments.md), registered on ``import llmsched_gym``:

* ``llmsched/Routing-v0`` (:class:`RoutingEnv`): one step per dispatched request.
* ``llmsched/FlowControl-v0`` (:class:`FlowControlEnv`): per-band usage limits every interval.
* ``llmsched/Admission-v0`` (:class:`AdmissionEnv`): rejection probabilities every interval.
* ``llmsched/Autoscaling-v0`` (:class:`AutoscalingEnv`): the number of instances every
  scaling interval (:mod:`.autoscaling`).
* ``llmsched/Gateway-v0`` (:class:`GatewayEnv`): admission, flow control and routing together
  every interval (:mod:`.gateway`).

Each has a native vector version (``gymnasium.make_vec(id, num_envs=N, ...)``) and
adapts to stable-baselines3 with :func:`agents.sb3.to_sb3_vec_env`.
"""

from __future__ import annotations

import gymnasium

from .admission import AdmissionEnv
from .agents import BaselineAgent, run_episode
from .autoscaling import AutoscalingEnv, AutoscalingVectorEnv
from .core import CostTracker, Setup, episode_cost
from .flow_control import FlowControlEnv
from .gateway import GatewayEnv, GatewayVectorEnv
from .routing import RoutingEnv
from .vector import AdmissionVectorEnv, FlowControlVectorEnv, LLMSchedVectorEnv, RoutingVectorEnv

ENV_IDS = {
    "llmsched/Routing-v0": ("RoutingEnv", "RoutingVectorEnv"),
    "llmsched/FlowControl-v0": ("FlowControlEnv", "FlowControlVectorEnv"),
    "llmsched/Admission-v0": ("AdmissionEnv", "AdmissionVectorEnv"),
    "llmsched/Autoscaling-v0": ("AutoscalingEnv", "AutoscalingVectorEnv"),
    "llmsched/Gateway-v0": ("GatewayEnv", "GatewayVectorEnv"),
}


def register_envs() -> None:
    """Register the environments with gymnasium (idempotent)."""
    for env_id, (cls, vcls) in ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=f"llmsched_gym.envs:{cls}",
                               vector_entry_point=f"llmsched_gym.envs:{vcls}")


register_envs()

__all__ = ["AdmissionEnv", "AdmissionVectorEnv", "AutoscalingEnv", "AutoscalingVectorEnv", "BaselineAgent",
           "CostTracker", "ENV_IDS", "FlowControlEnv", "FlowControlVectorEnv", "GatewayEnv", "GatewayVectorEnv",
           "LLMSchedVectorEnv", "RoutingEnv", "RoutingVectorEnv", "Setup", "episode_cost", "register_envs",
           "run_episode"]
