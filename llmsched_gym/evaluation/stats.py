"""Statistics over seeds: medians with bootstrap intervals and paired changes.

Everything here is deterministic: the bootstrap draws come from
``numpy.random.default_rng(seed)`` (seed 0 unless given), so the same results give the
same intervals on every machine.

* :func:`bootstrap_ci` - a statistic (median by default) of one metric across seeds and
  its percentile-bootstrap interval (95% by default).
* :func:`paired_change` - the relative change of a policy against a baseline,
  ``mean(x) / mean(b) - 1`` over the seeds both have, with a *paired* bootstrap: the
  same resampled seeds are used for both, so the workload noise common to a seed
  cancels out.
* :func:`summarize_rows` - both, for every (scenario, point, policy, class, metric) of
  an :func:`llmsched_gym.evaluate` table.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, Iterable, Sequence

import numpy as np

#: Metrics summarized by default (times in seconds).
DEFAULT_METRICS = (
    "ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99",
    "tpot_mean", "tpot_p50", "tpot_p90", "tpot_p99",
    "e2e_mean", "e2e_p50", "e2e_p90", "e2e_p99",
    "slo_attainment", "goodput_rps", "throughput_rps", "output_tokens_per_s",
    "rejected", "expired", "ttft_censored", "prefix_hit_token_ratio",
)

N_BOOT = 2000


def _clean(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=float)
    return x[np.isfinite(x)]


def bootstrap_ci(values: Sequence[float], stat: Callable[[np.ndarray], float] = np.median, *,
                 confidence: float = 0.95, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """``(stat(values), low, high)``: the statistic and its percentile-bootstrap interval.

    NaN/inf values are dropped first. With no value everything is NaN; with one value the
    interval is that value (a single seed says nothing about spread).
    """
    x = _clean(values)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    point = float(stat(x))
    if len(x) == 1:
        return point, point, point
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    boot = np.apply_along_axis(stat, 1, x[idx]) if stat not in (np.median, np.mean) else stat(x[idx], axis=1)
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [a, 1.0 - a])
    return point, float(lo), float(hi)


def paired_change(values: Sequence[float], baseline: Sequence[float], *, confidence: float = 0.95,
                  n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """Relative change ``mean(values) / mean(baseline) - 1`` and its paired bootstrap interval.

    ``values[k]`` and ``baseline[k]`` must come from the same seed (same requests). Pairs
    where either side is not finite are dropped. The bootstrap resamples seed indices and
    applies them to both sides. Returns NaNs when no pair is left or the baseline mean is 0
    (a change relative to nothing is undefined).
    """
    x = np.asarray(list(values), dtype=float)
    b = np.asarray(list(baseline), dtype=float)
    if len(x) != len(b):
        raise ValueError(f"paired_change needs pairs: {len(x)} values vs {len(b)} baseline values")
    ok = np.isfinite(x) & np.isfinite(b)
    x, b = x[ok], b[ok]
    if len(x) == 0 or b.mean() == 0:
        return math.nan, math.nan, math.nan
    point = float(x.mean() / b.mean() - 1.0)
    if len(x) == 1:
        return point, point, point
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    bm = b[idx].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = x[idx].mean(axis=1) / bm - 1.0
    boot = boot[np.isfinite(boot)]
    if len(boot) == 0:
        return point, math.nan, math.nan
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [a, 1.0 - a])
    return point, float(lo), float(hi)


GROUP_KEYS = ("scenario", "point", "policy", "class")


def summarize_rows(rows: Iterable[dict], metrics: Sequence[str] = DEFAULT_METRICS, *, baseline: str | None = None,
                   confidence: float = 0.95, n_boot: int = N_BOOT, seed: int = 0) -> list[dict]:
    """One dict per (scenario, point, policy, class, metric) of an evaluation table.

    Keys: the group keys, ``qps``, ``rate``, ``metric``, ``n`` (seeds), ``median``,
    ``ci_low``, ``ci_high``; with ``baseline`` (a policy label) also ``change``,
    ``change_low``, ``change_high`` (relative, 0.1 = +10%), paired by seed against the
    baseline's row of the same scenario, point and class (NaN for the baseline itself
    it is 0).
    """
    groups: dict[tuple, dict[int, dict]] = defaultdict(dict)
    order: list[tuple] = []
    for r in rows:
        key = tuple(r[k] for k in GROUP_KEYS)
        if key not in groups:
            order.append(key)
        groups[key][int(r["seed"])] = r
    out = []
    for key in order:
        by_seed = groups[key]
        seeds = sorted(by_seed)
        first = by_seed[seeds[0]]
        base = None
        if baseline is not None:
            base = groups.get((key[0], key[1], baseline, key[3]))
        for m in metrics:
            if m not in first:
                continue
            vals = [by_seed[s][m] for s in seeds]
            med, lo, hi = bootstrap_ci(vals, confidence=confidence, n_boot=n_boot, seed=seed)
            rec = dict(zip(GROUP_KEYS, key))
            rec.update({"qps": first.get("qps"), "rate": first.get("rate"), "metric": m, "n": len(_clean(vals)),
                        "median": med, "ci_low": lo, "ci_high": hi})
            if baseline is not None:
                if base is None:
                    rec.update(change=math.nan, change_low=math.nan, change_high=math.nan)
                else:
                    common = [s for s in seeds if s in base]
                    c = paired_change([by_seed[s][m] for s in common], [base[s][m] for s in common],
                                      confidence=confidence, n_boot=n_boot, seed=seed)
                    rec.update(change=c[0], change_low=c[1], change_high=c[2])
            out.append(rec)
    return out


def lookup(stats: Iterable[dict], **match) -> dict | None:
    """The first summary record whose fields equal ``match`` (None if none)."""
    for rec in stats:
        if all(rec.get(k) == v for k, v in match.items()):
            return rec
    return None
