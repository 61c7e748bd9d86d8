"""llm-d's saturation detectors, as llm-d-router ships them (docs/architecture.md).

The gateway's flow control (and the ``legacy`` admission gate) act on one number, the
pool *saturation*. llm-d-router has two detectors
(``pkg/epp/framework/plugins/flowcontrol/saturationdetector/{utilization,concurrency}``):

``utilization`` (the default when flow control is on)
    per endpoint ``max(waiting / queueDepthThreshold, kv_util / kvCacheUtilThreshold)``,
    averaged over the endpoints; no cap (values above 1 mean overload). An endpoint
    whose metrics are older than ``metricsStalenessThreshold`` (strictly older) scores
    1.0 (fail closed), and an empty pool is 1.0. With ``stalenessPolicy: ignore`` (llm-d-router
    PR #2492) a stale endpoint leaves the average instead, and a pool whose endpoints are all
    stale scores 0.0.

``concurrency``
    from the gateway's own in-flight accounting, not from scraped metrics:
    ``requests`` mode ``sum(in_flight) / (endpoints x maxConcurrency)``; ``tokens`` mode
    ``sum(in_flight_tokens) / (endpoints x maxTokenConcurrency)``; ``hybrid`` mode the
    mean over endpoints of ``max(in_flight / maxConcurrency, tokens / maxTokenConcurrency)``.
    An empty pool is 1.0. llm-d's in-flight tokens (its ``inflight-load-producer`` by
    default) are the *uncached* prompt tokens of requests dispatched to the endpoint,
    released at the first response chunk: the simulator's ``queued_prefill_tokens``.

``headroom`` does not change the pool saturation: both detectors also act as a
*routing filter* that removes endpoints above ``threshold x (1 + headroom)``
(:func:`endpoint_filter`). The utilization filter also removes stale endpoints and,
if it would remove all of them, keeps them all (fail open); the concurrency filter can
return no endpoint.

Everything here is a pure function of per-instance numpy arrays, so the simulator, the
environments and a batched engine can call it on the arrays they already hold.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields
from typing import Literal

import numpy as np

from ..errors import ConfigError
from ..validation import config_dataclass, ranged

KINDS = ("utilization", "concurrency")
CONCURRENCY_MODES = ("requests", "tokens", "hybrid")
#: The utilization detector's ``stalenessPolicy`` (llm-d-router PR #2492): a stale endpoint
#: scores 1.0 (``saturated``, the default), or leaves the average (``ignore``).
STALENESS_POLICIES = ("saturated", "ignore")

#: llm-d-router's parameter names -> the fields of :class:`SaturationConfig`.
LLMD_NAMES = {
    "queueDepthThreshold": "queue_depth_threshold",
    "kvCacheUtilThreshold": "kv_cache_util_threshold",
    "metricsStalenessThreshold": "metrics_staleness_threshold_s",
    "stalenessPolicy": "staleness_policy",
    "headroom": "headroom",
    "concurrencyMode": "concurrency_mode",
    "maxConcurrency": "max_concurrency",
    "maxTokenConcurrency": "max_token_concurrency",
}


@config_dataclass("saturation", frozen=True)
class SaturationConfig:
    """Which detector and its parameters; the defaults are llm-d-router's.

    Args:
        kind: ``utilization`` or ``concurrency``.
        queue_depth_threshold: utilization, ``queueDepthThreshold`` (default 5, > 0).
        kv_cache_util_threshold: utilization, ``kvCacheUtilThreshold`` (default 0.8, in (0, 1]).
        metrics_staleness_threshold_s: utilization, ``metricsStalenessThreshold`` in
            seconds (default 0.2, > 0): an endpoint whose metrics are older is stale.
            With the simulator's default 50 ms scrape interval metrics are never that old
            unless scrapes fail (a scrape outage, a crashed instance: faults).
        staleness_policy: utilization, ``stalenessPolicy``: ``saturated`` (default) scores a
            stale endpoint 1.0 (fail closed: a pool whose metrics all go stale halts
            dispatch); ``ignore`` leaves it out of the average, and a pool with every
            endpoint stale scores 0.0 (dispatch continues). The routing filter is the same
            under both.
        headroom: both kinds, ``headroom`` (default 0, >= 0): routing-filter limits are
            ``threshold x (1 + headroom)``; the pool saturation does not use it.
        concurrency_mode: concurrency, ``concurrencyMode``: requests, tokens or hybrid.
        max_concurrency: concurrency, ``maxConcurrency`` requests per endpoint (default 100).
        max_token_concurrency: concurrency, ``maxTokenConcurrency`` tokens per endpoint
            (default 1,000,000).
    """

    kind: Literal[KINDS] = "utilization"
    queue_depth_threshold: ranged(float, gt=0) = 5
    kv_cache_util_threshold: ranged(float, gt=0, le=1) = 0.8
    metrics_staleness_threshold_s: ranged(float, gt=0) = 0.2
    staleness_policy: Literal[STALENESS_POLICIES] = "saturated"
    headroom: ranged(float, ge=0) = 0.0
    concurrency_mode: Literal[CONCURRENCY_MODES] = "requests"
    max_concurrency: ranged(int, ge=1) = 100
    max_token_concurrency: ranged(int, ge=1) = 1_000_000

    @classmethod
    def from_dict(cls, d: "dict | SaturationConfig | None", source: str = "saturation") -> "SaturationConfig":
        """From a mapping with these field names or llm-d-router's (``queueDepthThreshold``,
        ``metricsStalenessThreshold: 200ms``, ...); errors name the field."""
        if d is None:
            return cls()
        if isinstance(d, SaturationConfig):
            return d
        if not isinstance(d, dict):
            raise ConfigError(f"{source} must be a mapping, got {type(d).__name__}")
        allowed = {f.name for f in fields(cls)}
        kw = {}
        for key, value in d.items():
            name = LLMD_NAMES.get(key, key)
            if name not in allowed:
                raise ConfigError(f"{source}: unknown field {key!r}; allowed: "
                                  f"{', '.join(sorted(allowed | set(LLMD_NAMES)))}")
            if name in kw:
                raise ConfigError(f"{source}: {key!r} given twice")
            kw[name] = _duration_s(f"{source}.{key}", value) if name == "metrics_staleness_threshold_s" else value
        try:
            return cls(**kw)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _duration_s(field: str, value) -> float:
    """Seconds from a number or a Go duration string (``200ms``, ``1.5s``, ``1m``)."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s|m|h)\s*", value)
        if not m:
            raise ConfigError(f"{field}={value!r} is invalid; give seconds or a duration such as '200ms'")
        scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]
        return float(m.group(1)) * scale
    return value


def utilization_scores(waiting, kv_util, queue_depth_threshold: float = 5, kv_cache_util_threshold: float = 0.8,
                       stale=None) -> np.ndarray:
    """Per-endpoint roofline score ``max(waiting / q, kv_util / kv)``; 1.0 where ``stale``."""
    score = np.maximum(np.asarray(waiting) / float(queue_depth_threshold),
                       np.asarray(kv_util) / float(kv_cache_util_threshold))
    return score if stale is None else np.where(stale, 1.0, score)


def stale_mask(cfg: SaturationConfig, metrics_age_s) -> np.ndarray | None:
    """Endpoints whose metrics are strictly older than the staleness threshold (None: no ages)."""
    if metrics_age_s is None:
        return None
    return np.asarray(metrics_age_s, float) > cfg.metrics_staleness_threshold_s


def pool_saturation(cfg: SaturationConfig | None = None, *, waiting=None, kv_util=None, metrics_age_s=None,
                    in_flight=None, in_flight_tokens=None, running=None) -> float:
    """The pool saturation of detector ``cfg`` from per-instance arrays (module docstring).

    Args:
        waiting, kv_util, metrics_age_s: scraped queue sizes, KV utilization in [0, 1]
            and seconds since each instance's last scrape (utilization; ages None = fresh).
        in_flight, in_flight_tokens: the gateway's requests dispatched and not finished,
            and their uncomputed prompt tokens, per instance (concurrency).
        running: accepted for a uniform call; neither detector uses it.

    With the default config and fresh metrics this is exactly
    ``mean(max(waiting / 5, kv_util / 0.8))``.
    """
    cfg = cfg or DEFAULT
    if cfg.kind == "utilization":
        if waiting is None or kv_util is None:
            raise ConfigError("the utilization detector needs waiting and kv_util")
        if len(waiting) == 0:
            return 1.0
        stale = stale_mask(cfg, metrics_age_s)
        if cfg.staleness_policy == "ignore" and stale is not None and stale.any():
            fresh = ~stale
            if not fresh.any():
                return 0.0
            return float(utilization_scores(np.asarray(waiting)[fresh], np.asarray(kv_util)[fresh],
                                            cfg.queue_depth_threshold, cfg.kv_cache_util_threshold).mean())
        return float(utilization_scores(waiting, kv_util, cfg.queue_depth_threshold, cfg.kv_cache_util_threshold,
                                        None if stale is None or not stale.any() else stale).mean())
    mode = cfg.concurrency_mode
    need = {"requests": ("in_flight",), "tokens": ("in_flight_tokens",), "hybrid": ("in_flight", "in_flight_tokens")}
    given = {"in_flight": in_flight, "in_flight_tokens": in_flight_tokens}
    missing = [k for k in need[mode] if given[k] is None]
    if missing:
        raise ConfigError(f"the concurrency detector in {mode} mode needs {', '.join(missing)}")
    n = len(given[need[mode][0]])
    if n == 0:
        return 1.0
    if mode == "requests":
        return float(np.sum(in_flight) / (n * cfg.max_concurrency))
    if mode == "tokens":
        return float(np.sum(in_flight_tokens) / (n * cfg.max_token_concurrency))
    r = np.asarray(in_flight) / cfg.max_concurrency
    t = np.asarray(in_flight_tokens) / cfg.max_token_concurrency
    return float(np.maximum(r, t).mean())


def endpoint_filter(cfg: SaturationConfig | None = None, *, waiting=None, kv_util=None, metrics_age_s=None,
                    in_flight=None, in_flight_tokens=None) -> np.ndarray:
    """Boolean mask of the endpoints the detector's routing filter keeps (module docstring).

    Utilization: fresh endpoints with ``waiting < q (1 + headroom)`` and
    ``kv_util < kv (1 + headroom)``; all endpoints if that keeps none. Concurrency: load
    below ``int(capacity x (1 + headroom))`` in the mode's dimension(s); may keep none.
    """
    cfg = cfg or DEFAULT
    h = 1.0 + cfg.headroom
    if cfg.kind == "utilization":
        w = np.asarray(waiting, float)
        keep = (w < cfg.queue_depth_threshold * h) & (np.asarray(kv_util, float) < cfg.kv_cache_util_threshold * h)
        stale = stale_mask(cfg, metrics_age_s)
        if stale is not None:
            keep &= ~stale
        return keep if keep.any() else np.ones(len(w), bool)
    req_limit = math.floor(cfg.max_concurrency * h)
    tok_limit = math.floor(cfg.max_token_concurrency * h)
    if cfg.concurrency_mode == "requests":
        return np.asarray(in_flight) < req_limit
    if cfg.concurrency_mode == "tokens":
        return np.asarray(in_flight_tokens) < tok_limit
    return (np.asarray(in_flight) < req_limit) & (np.asarray(in_flight_tokens) < tok_limit)


def saturation_of_view(cfg: SaturationConfig | None, view) -> float:
    """:func:`pool_saturation` from a :class:`~llmsched_gym.gateway.view.RouterView` (its scraped
    arrays, metric ages and router-local counters)."""
    return pool_saturation(cfg, waiting=view.waiting, kv_util=view.kv_util, metrics_age_s=view.metrics_age_s,
                           in_flight=view.in_flight, in_flight_tokens=view.queued_prefill_tokens)


#: The detector the simulator uses unless told otherwise (llm-d's default).
DEFAULT = SaturationConfig()
