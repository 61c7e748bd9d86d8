"""``llmsched/Admission-v0``: set a rejection probability per sheddable band every interval."""

from __future__ import annotations

from .base import LLMSchedEnv
from .docs import ARGS_DOC, OBSERVATION_DOC, REWARDS_DOC, fill


class AdmissionEnv(LLMSchedEnv):
    """
    ## Description

    An LLM serving cluster behind an llm-d-style gateway. The agent is the admission
    controller: once per control interval (default 100 ms of simulated time) it sets,
    for each sheddable band (priority < 0), the probability that an arriving request of
    that band is rejected (drawn from the gateway's seeded generator). Critical
    requests are always admitted. Routing and flow control are fixed baselines
    (default ``llm-d`` routing, no flow control).

    ## Action Space

    ``Box(0, 1, (S,), float32)``: rejection probability of each sheddable band, in
    band order (highest priority first). ``info["rejection_prob"]`` holds the values
    applied. A scenario without a sheddable class is refused with ``ConfigError``.

    ## Observation Space

    A ``Dict`` of float32 ``Box``es: the cluster as the gateway sees it, plus

    =====================  =========  ===========  ==========================================
    band_arrival_rate      (B,)       [0, 2] log   arrivals per band in the last interval,
                                                   req/s (count scale)
    =====================  =========  ===========  ==========================================

<<OBS>>

    ## Rewards

<<REWARDS>>

    A step's reward covers one control interval. Rejecting costs the rejected
    request's ``unserved_penalty_s`` (weighted) at once, so shedding pays only when it
    saves more waiting than it costs.

    ## Starting State

    The simulator of a fresh workload drawn from the scenario at time 0.

    ## Episode End

    1. Termination: every request of the workload has finished or left.
    2. Truncation: the simulated clock reaches ``horizon``.

    ## Arguments

<<ARGS>>

    Admission keywords: ``control_interval`` (s, default 0.1), ``router`` (default
    ``"llm-d"``) and ``flow_control`` (usage-limit baseline, default ``None``).

    ## Version History

    * v0: Initial version.
    """

    kind = "admission"


AdmissionEnv.__doc__ = fill(AdmissionEnv.__doc__, OBS=OBSERVATION_DOC, REWARDS=REWARDS_DOC, ARGS=ARGS_DOC)
