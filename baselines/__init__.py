"""Hand-coded reference policies (docs/architecture.md), registered by name on import.

Families: :mod:`.admission`, :mod:`.flow_control` (usage limits), :mod:`.routing`,
:mod:`.autoscaling` (scaling policies) and :mod:`.pd` (P/D disaggregation decisions).
Build one with :func:`llmsched_gym.gateway.policy.make_policy`, e.g. ``make_policy("lmetric")``.
"""

from . import admission, autoscaling, flow_control, lookahead, pd, routing  # noqa: F401  (registration side effects)
