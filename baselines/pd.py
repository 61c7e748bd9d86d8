"""Prefill/decode disaggregation decisions (docs/architecture.md, "Prefill/decode
disaggregation"): whether a request on a cluster with a prefill pool
(``ClusterConfig.prefill_instances``) prefills on a prefill instance and decodes on the
decode instance the router chose, or runs whole there.

Each decision runs inside the compiled engine (``compiled_form``); :meth:`disaggregate`
is the same rule in Python. ``uncached_tokens`` is the prompt minus its prefix cached on
the chosen decode instance; ``prefill_queue`` counts the requests waiting on the prefill
pool (dispatched there, not yet scheduled).
"""

from __future__ import annotations

from llmsched_gym.engine import api
from llmsched_gym.gateway.policy import PDPolicy, register_policy
from llmsched_gym.validation import MAX_REQUESTS, NonNegativeTokens, ranged


@register_policy("pd-aggregated")
class AlwaysAggregated(PDPolicy):
    """Never disaggregate: every instance serves whole requests (the same GPUs deployed
    aggregated; a cluster's pools are ignored)."""

    name = "pd-aggregated"
    description = "Never disaggregate: every instance serves whole requests (pools ignored)."
    disaggregates = False

    def disaggregate(self, uncached_tokens: int, prefill_queue: int) -> bool:
        return False


@register_policy("pd-always")
class AlwaysDisaggregated(PDPolicy):
    """Disaggregate every request with more than one output token (vLLM's
    disaggregated-prefill proxy; llm-d's default decider, ``always-disagg-pd-decider``)."""

    name = "pd-always"
    description = "Disaggregate every request (vLLM's P/D proxy, llm-d's default decider)."

    def disaggregate(self, uncached_tokens: int, prefill_queue: int) -> bool:
        return True

    def compiled_form(self) -> tuple[int, tuple]:
        return api.PD_DECIDE_ALWAYS, ()


@register_policy("pd-llmd")
class LlmdPrefixDecider(PDPolicy):
    """llm-d's ``prefix-based-pd-decider``: disaggregate when the prompt tokens not cached
    on the chosen decode instance are at least ``threshold``; ``threshold`` 0 always
    disaggregates. llm-d-inference-scheduler's ``PrefixBasedPDDecider.disaggregate``
    (pkg/plugins/profile): ``if NonCachedTokens <= 0 { return true }`` ... ``if
    nonCachedTokens < NonCachedTokens { return false }``; its ``nonCachedTokens`` has no
    default (Go's zero value, 0: always).

    Args:
        threshold: llm-d's ``nonCachedTokens``, in tokens.
    """

    name = "pd-llmd"
    description = "llm-d's prefix-based decider: disaggregate when uncached prompt >= threshold (0: always)."

    def __init__(self, threshold: NonNegativeTokens = 0):
        self.threshold = threshold

    def disaggregate(self, uncached_tokens: int, prefill_queue: int) -> bool:
        return self.threshold <= 0 or uncached_tokens >= self.threshold

    def compiled_form(self) -> tuple[int, tuple]:
        return api.PD_DECIDE_LLMD, (self.threshold,)


@register_policy("pd-dynamo")
class DynamoConditional(PDPolicy):
    """Dynamo's conditional disaggregation (``PyDisaggregatedRouter.prefill_remote``):
    prefill remotely when ``prompt - prefix hit > max_local_prefill_length`` and the
    prefill queue holds fewer than ``max_prefill_queue_size`` requests. Defaults are
    Dynamo's: ``max_local_prefill_length=1000``, ``max_prefill_queue_size=2``
    (``PyDisaggregatedRouter.__init__``, ``DisaggRouterConf::default``).

    Args:
        max_local_prefill_length: longest uncached prompt (tokens) prefilled locally.
        max_prefill_queue_size: prefill queue (requests) from which requests stay local.
    """

    name = "pd-dynamo"
    description = "Dynamo's conditional disaggregation: uncached prompt > max_local_prefill_length and short prefill queue."

    def __init__(self, max_local_prefill_length: NonNegativeTokens = 1000,
                 max_prefill_queue_size: ranged(int, ge=0, le=MAX_REQUESTS) = 2):
        self.max_local_prefill_length = max_local_prefill_length
        self.max_prefill_queue_size = max_prefill_queue_size

    def disaggregate(self, uncached_tokens: int, prefill_queue: int) -> bool:
        return uncached_tokens > self.max_local_prefill_length and prefill_queue < self.max_prefill_queue_size

    def compiled_form(self) -> tuple[int, tuple]:
        return api.PD_DECIDE_DYNAMO, (self.max_local_prefill_length, self.max_prefill_queue_size)
