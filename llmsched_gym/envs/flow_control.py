"""``llmsched/FlowControl-v0``: set the gateway's per-band usage limits every interval."""

from __future__ import annotations

from .base import LLMSchedEnv
from .docs import ARGS_DOC, OBSERVATION_DOC, REWARDS_DOC, fill


class FlowControlEnv(LLMSchedEnv):
    """
    ## Description

    An LLM serving cluster behind an llm-d-style gateway whose band queues are
    dispatched by flow control (docs/architecture.md): every dispatch cycle sends the head of the
    highest-priority non-empty band, unless the cluster's saturation is at or above
    that band's ceiling. The agent sets the ceilings once per control interval
    (``control_interval``, default 100 ms of simulated time); routing and admission are
    fixed baselines (default ``llm-d`` and always-admit).

    ## Action Space

    ``Box(0, 1, (B,), float32)``: one ceiling per priority band, band 0 = highest
    priority. The environment makes them non-increasing (``ceiling[b] =
    min(action[:b+1])``), so a lower band is never less restricted than a higher one.
    A band is blocked while ``saturation >= ceiling``: 0 always blocks, 1 blocks only
    at saturation >= 1. ``info["ceilings"]`` holds the ceilings applied.

    With ``action="soft-reflective"``: ``Box(0, 1, (2,), float32)``, the parameters of
    the soft-reflective ceiling's own duty cycle, which the engine runs every dispatch
    cycle (band ``i >= 1`` gated from ``s >= 1 - ramp i s/(B-1)``, open one cycle in
    ``round(period_scale s/(1-s))``; ``baselines/flow_control.py``): ``ramp = 2 a[0]``
    and ``period_scale = 4 ** (2 a[1] - 1)``. The action (0.5, 0.5) is the published
    soft-reflective ceiling exactly, so a policy can start there and learn an adjustment
    of its ramp and period. ``info["soft_reflective"]`` holds (ramp, period_scale).

    ## Observation Space

    A ``Dict`` of float32 ``Box``es: the cluster as the gateway sees it, plus

    =====================  =========  ===========  ==========================================
    band_arrival_rate      (B,)       [0, 2] log   arrivals per band in the last interval,
                                                   req/s (count scale)
    =====================  =========  ===========  ==========================================

<<OBS>>

    ## Rewards

<<REWARDS>>

    A step's reward covers one control interval.

    ## Starting State

    The simulator of a fresh workload drawn from the scenario at time 0 (nothing has
    arrived); the first action sets the ceilings for ``[0, control_interval)``.

    ## Episode End

    1. Termination: every request of the workload has finished or left.
    2. Truncation: the simulated clock reaches ``horizon``.

    ## Arguments

<<ARGS>>

    FlowControl keywords: ``control_interval`` (s, default 0.1), ``router`` (routing
    baseline, default ``"llm-d"``), ``admission`` (default ``"always-admit"``) and
    ``action`` (``"ceilings"``, default, or ``"soft-reflective"``; see Action Space).

    ## Version History

    * v0: Initial version. ``action="soft-reflective"`` added later (opt-in; the default
      action and every trajectory under it are unchanged).
    """

    kind = "flow_control"


FlowControlEnv.__doc__ = fill(FlowControlEnv.__doc__, OBS=OBSERVATION_DOC, REWARDS=REWARDS_DOC, ARGS=ARGS_DOC)
