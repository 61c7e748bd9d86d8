"""``llmsched/Routing-v0``: pick an instance for every dispatched request."""

from __future__ import annotations

import numpy as np

from .base import LLMSchedEnv
from .docs import ARGS_DOC, OBSERVATION_DOC, REWARDS_DOC, fill


class RoutingEnv(LLMSchedEnv):
    """
    ## Description

    An LLM serving cluster behind an llm-d-style gateway (admission, priority band
    queues, routing, vLLM-like instances; docs/architecture.md). The agent is the router: each
    step is one request leaving the gateway, and the agent picks the instance that
    serves it. Admission and flow control are fixed baselines (default: always admit,
    no flow control, so every request is routed on arrival).

    ## Action Space

    ``Discrete(I)``: the instance index for the current request. ``info["action_mask"]``
    and ``action_masks()`` (for sb3-contrib's ``MaskablePPO``) give the instances that
    can hold the request (its prompt + output fit in the instance's KV capacity and
    ``max_model_len``); the cluster is homogeneous, so the mask is all ``True`` except
    for a request no instance can hold, where it is also all ``True`` (the request is
    dropped whatever the choice).

    ## Observation Space

    A ``Dict`` of float32 ``Box``es: the cluster as the gateway sees it, plus

    =====================  =========  ===========  ==========================================
    prefix_hit             (I,)       [0, 1]       cached prompt tokens of the current request
                                                   on each instance / its prompt length
    request                (4,)       [0, 2]       current request: prompt tokens (log),
                                                   expected output tokens (log), band index /
                                                   (B-1), time since arrival (log time)
    =====================  =========  ===========  ==========================================

<<OBS>>

    ## Rewards

<<REWARDS>>

    A step's reward covers the simulated time from the previous routing decision to
    this one.

    ## Starting State

    The simulator of a fresh workload drawn from the scenario, run up to the first
    routing decision (the first admitted request).

    ## Episode End

    1. Termination: every request of the workload has finished or left.
    2. Truncation: the simulated clock reaches ``horizon`` (requests still in the system
       are in flight; their waits are counted up to the horizon).

    ## Arguments

<<ARGS>>

    Routing-only keywords: ``flow_control`` (usage-limit baseline, default ``None``: no
    gateway queue) and ``admission`` (default ``"always-admit"``).

    ```python
    >>> import gymnasium as gym, llmsched_gym
    >>> env = gym.make("llmsched/Routing-v0", scenario="codegen", qps=10, horizon=20)
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(info["action_mask"].argmax())
    ```

    ## Version History

    * v0: Initial version.
    """

    kind = "routing"

    def action_masks(self) -> np.ndarray:
        """Valid instances for the current request (bool, shape ``(I,)``)."""
        return self.driver.action_mask()


RoutingEnv.__doc__ = fill(RoutingEnv.__doc__, OBS=OBSERVATION_DOC, REWARDS=REWARDS_DOC, ARGS=ARGS_DOC)
