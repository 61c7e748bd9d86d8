"""llm-d-router's demand-driven in-flight eviction (docs/architecture.md, "Demand-driven eviction").

With flow control's ``enableEviction``, llm-d-router (``pkg/epp/flowcontrol``, 2026) revokes
in-flight lower-priority requests when a higher band is blocked by saturation
(``controller/internal/reclamation.go``):

* **trigger**: a dispatch cycle breaks at a band whose ceiling the saturation ``s`` has
  reached (head-of-line blocking); from that band down, the first band with queued
  requests, a priority strictly above the next victim's, a ceiling > 0 and ``s`` at or
  above it is the demand;
* **sizing**: ``n = max(1, ceil((s - ceiling) / credit))`` with ``credit = s / in_flight``
  (the mean request's share of the saturation), at most ``max_revocations_per_decision``
  and the evictable count;
* **victims** (``eviction-sheddable-filter``, ``eviction-priority-then-time-ordering``):
  sheddable requests only (priority < 0), the lowest priority first, the most recently
  dispatched among equals, each of a priority below the demand's;
* **pacing**: no new decision until every revocation is confirmed (its stream ended) and
  ``confirmation_grace_s`` has passed, the time the freed capacity takes to show in the
  saturation (engine abort, KV release, scrape).

The simulator ends a revoked request's stream at once (outcome ``evicted``, a miss for
every SLO metric); its instance drops it at the end of the step in progress (vLLM handles
aborts between steps), or at once if it is waiting, or when it arrives if it is still on
its way, freeing its KV blocks (their cached prefix stays reusable).
"""

from __future__ import annotations

from dataclasses import fields

from ..errors import ConfigError
from ..validation import config_dataclass, ranged


@config_dataclass("eviction", frozen=True)
class EvictionConfig:
    """Demand-driven eviction's parameters; the defaults are llm-d-router's (its Go
    config's ``MaxRevocationsPerDecision`` and ``EvictionConfirmationGrace``, which its
    EndpointPickerConfig does not expose: there eviction is ``enableEviction: true``).

    Args:
        max_revocations_per_decision: most requests one decision revokes (default 2, >= 1).
        confirmation_grace_s: seconds after a revocation before the next decision
            (default 0.5, >= 0; llm-d's value for scraped saturation detectors).
    """

    max_revocations_per_decision: ranged(int, ge=1) = 2
    confirmation_grace_s: ranged(float, ge=0) = 0.5

    @classmethod
    def from_value(cls, v: "EvictionConfig | dict | bool | None",
                   source: str = "gateway.eviction") -> "EvictionConfig | None":
        """None or False: off; True: llm-d's defaults; a mapping with these field names;
        errors name the field."""
        if v is None or v is False:
            return None
        if v is True:
            return cls()
        if isinstance(v, EvictionConfig):
            return v
        if not isinstance(v, dict):
            raise ConfigError(f"{source} must be true, false or a mapping, got {v!r}")
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(v) - allowed)
        if unknown:
            raise ConfigError(f"{source}: unknown field {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
        try:
            return cls(**v)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
