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
    can hold the request, each by its own capacity: its prompt + output fit in that
    instance's KV blocks and ``max_model_len``. On a homogeneous cluster the mask is all
    ``True`` or all ``False``; on a mixed fleet (e.g. ``mixed-chatbot``: 8 x H20, 4 x A100
    TP2, 4 x L40S TP2, 13,878 to 53,199 KV blocks each) a long request may fit some
    instances only. A request no instance can hold gets an all-``True`` mask (it is dropped
    whatever the choice). On a P/D cluster the prefill instances are ``False``: the action is
    the decode instance.

    ## Observation Space

    A ``Dict`` of float32 ``Box``es: the cluster as the gateway sees it, plus

    =====================  =========  ===========  ==========================================
    prefix_hit             (I,)       [0, 1]       cached prompt tokens of the current request
                                                   on each instance / its prompt length
    request                (4,)       [0, 2]       current request: prompt tokens (log),
                                                   expected output tokens (log), band index /
                                                   (B-1), time since arrival (log time)
    hint                   (I,)       [0, 1]       only with ``hint=<router>``: one-hot of the
                                                   instance that compiled router would pick
                                                   for the current request now
    =====================  =========  ===========  ==========================================

    ``hint``: the router's choice in the state the agent's own decisions produced. Its
    books (prefix index, tokens sent) and route-time state (round-robin's pointer, LMetric's
    detector window, Preble's TPOT window) follow every dispatch as if it had chosen each
    instance itself, so an agent that always follows the hint is that router, request for
    request. A randomized router (``random``, ``bailian-sampling``, the random tie-breaks of
    ``jsq`` or ``llm-d``, ...) draws from its own generator, a copy of the episode's gateway
    generator taken at its start: observing the hint never changes the run.

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
    gateway queue), ``admission`` (default ``"always-admit"``) and ``hint`` (default
    ``None``: no ``hint`` key; a compiled router's name or spec, e.g. ``"lmetric"`` or
    ``"bailian:lam=0.7"``, adds it; an unknown or Python-only router is a ``ConfigError``
    listing the compiled ones).

    ```python
    >>> import gymnasium as gym, llmsched_gym
    >>> env = gym.make("llmsched/Routing-v0", scenario="codegen", qps=10, horizon=20)
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(info["action_mask"].argmax())
    ```

    ## Version History

    * v0: Initial version. The ``hint`` keyword and observation key were added later in v0;
      without ``hint`` the observation space is unchanged.
    """

    kind = "routing"

    def action_masks(self) -> np.ndarray:
        """Valid instances for the current request (bool, shape ``(I,)``)."""
        return self.driver.action_mask()


RoutingEnv.__doc__ = fill(RoutingEnv.__doc__, OBS=OBSERVATION_DOC, REWARDS=REWARDS_DOC, ARGS=ARGS_DOC)
