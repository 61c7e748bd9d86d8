"""Hand-coded reference policies (docs/architecture.md), registered by name on import.

Families: :mod:`.admission`, :mod:`.flow_control` (usage limits) and :mod:`.routing`.
Build one with :func:`llmsched_gym.gateway.policy.make_policy`, e.g. ``make_policy("lmetric")``.
"""

from . import admission, flow_control, routing  # noqa: F401  (registration side effects)
