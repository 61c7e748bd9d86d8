"""LMetric's inputs recovered from Routing-v0's observation, in numpy: the one
implementation behind the torch policies (:mod:`agents.networks`) and the numpy residuals
of :mod:`agents.es`.

``P_i = queued_prefill_tokens_i + max(0, input - hit_i)`` and ``BS_i = in_flight_i``
(docs/agents.md). The observation log-scales the integer counts as float32
(``prefill_tokens``: ``log2(1+x)/20``, ``in_flight``: ``log2(1+x)/10``, ``request[0]``: the
prompt tokens, ``prefix_hit``: hit tokens / prompt tokens); inverting the scale in float64
and rounding to the nearest integer gives every integer below ``2**20`` back exactly (tests
check the round trip), so the metric is exact while an instance's outstanding prefill, its
in-flight count and the prompt stay below 1,048,576.
"""

from __future__ import annotations

import numpy as np

LN2 = float(np.log(2.0))
#: The observation keys LMetric's metric is recovered from.
LMETRIC_KEYS = ("request", "prefix_hit", "prefill_tokens", "in_flight")


def unlog(x: np.ndarray, bits: float) -> np.ndarray:
    """The integer count behind the environment's log scale ``log2(1 + v) / bits``."""
    return np.round(np.expm1(x.astype(np.float64) * (bits * LN2)))


def lmetric_parts(obs: dict) -> tuple[np.ndarray, np.ndarray]:
    """LMetric's ``(P_i, BS_i)`` per instance (``(N, I)`` float64): outstanding prefill
    tokens plus the request's uncached tokens there, and the in-flight requests."""
    inp = unlog(obs["request"][:, 0:1], 20.0)
    hit = np.round(obs["prefix_hit"].astype(np.float64) * inp)
    prefill = unlog(obs["prefill_tokens"], 20.0) + np.maximum(inp - hit, 0.0)
    return prefill, unlog(obs["in_flight"], 10.0)


def lmetric_score(obs: dict) -> np.ndarray:
    """LMetric's metric ``P_i (BS_i + 1)`` per instance, ``(N, I)`` float64."""
    prefill, batch = lmetric_parts(obs)
    return prefill * (batch + 1.0)


def lmetric_logits(obs: dict) -> np.ndarray:
    """``-log(max(P_i (BS_i + 1), 0.5))``: its argmax (first index on ties) is LMetric's
    choice (argmin of the metric, lowest index on ties). A metric of 0 (nothing to prefill
    anywhere) counts as 0.5: still the best, still finite; metrics are integers, so the
    order is unchanged."""
    return -np.log(np.maximum(lmetric_score(obs), 0.5))
