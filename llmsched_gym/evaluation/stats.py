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

RL evaluation over training runs x evaluation seeds (Agarwal et al. 2021, *Deep RL at
the edge of the statistical precipice*; scipy, installed with the ``rl`` extra):

* :func:`iqm` - the interquartile mean (``scipy.stats.trim_mean``, 25% cut at each end).
* :func:`stratified_bootstrap` - a statistic (IQM) of a ``(runs, evaluation seeds)``
  matrix with the stratified bootstrap interval of rliable's ``StratifiedBootstrap``
  (``task_bootstrap=True``, the evaluation seeds as tasks): resample the evaluation
  seeds, and the runs within each.
* :func:`probability_of_improvement` - P(agent better than baseline) on the same
  evaluation seed, the Mann-Whitney statistic (``scipy.stats.mannwhitneyu``, ties 1/2)
  between the two sets of runs averaged over seeds (rliable's definition), with the
  same stratified interval applied to both sides.

rliable itself is not a dependency: rliable 1.2.0 pins ``arch < 8``, and arch 7.2.0
fails to import with pandas 3 (the version pip installs today).
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
    "rejected", "expired", "evicted", "ttft_censored", "prefix_hit_token_ratio",
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


# ====================================================================== RL evaluation (runs x seeds)
def _scipy_stats():
    try:
        from scipy import stats
    except ImportError as e:  # pragma: no cover
        raise ImportError("the RL-evaluation statistics need scipy: pip install 'llmsched-gym[rl]'") from e
    return stats


def iqm(values, axis=None) -> "float | np.ndarray":
    """Interquartile mean: the mean of the middle 50% (``scipy.stats.trim_mean(x, 0.25)``)
    of all values (``axis=None``) or along ``axis``."""
    x = np.asarray(values, dtype=float)
    if axis is None:
        x = x.ravel()
        if x.size == 0:
            return math.nan
        return float(_scipy_stats().trim_mean(x, 0.25))
    return _scipy_stats().trim_mean(x, 0.25, axis=axis)


def _matrix(scores) -> np.ndarray:
    x = np.asarray(scores, dtype=float)
    if x.ndim == 1:
        x = x[None, :]  # one run (a deterministic baseline): one row
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"scores must be a (runs, evaluation seeds) matrix, got shape {x.shape}")
    return x


def _stratified_draws(rng, runs: int, seeds: int, n_boot: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows (n_boot, runs, seeds), cols (n_boot, 1, seeds))``: evaluation seeds resampled,
    and runs resampled within each resampled seed."""
    cols = rng.integers(0, seeds, size=(n_boot, 1, seeds))
    rows = rng.integers(0, runs, size=(n_boot, runs, seeds))
    return rows, cols


def stratified_bootstrap(scores, stat: Callable | None = None, *, confidence: float = 0.95, n_boot: int = N_BOOT,
                         seed: int = 0) -> tuple[float, float, float]:
    """``(stat(scores), low, high)`` for a ``(runs, evaluation seeds)`` matrix (a 1-D array
    is one run), with a percentile interval from the stratified bootstrap: each resample
    draws the evaluation seeds with replacement and, within each drawn seed, the runs
    with replacement (rliable's ``StratifiedBootstrap(task_bootstrap=True)`` with the
    seeds as tasks). ``stat`` (default :func:`iqm`) takes an array and ``axis``. With
    one run the interval is over evaluation seeds only."""
    x = _matrix(scores)
    stat = stat or iqm
    point = float(stat(x.ravel()[None, :], axis=1)[0])
    rng = np.random.default_rng(seed)
    rows, cols = _stratified_draws(rng, *x.shape, n_boot)
    boot = stat(x[rows, cols].reshape(n_boot, -1), axis=1)
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [a, 1.0 - a])
    return point, float(lo), float(hi)


def _improvement(a: np.ndarray, b: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """Mann-Whitney P(a better than b) per evaluation seed, over the last-but-one axis
    (runs); ``a``, ``b``: (..., runs, seeds)."""
    st = _scipy_stats()
    x, y = (b, a) if lower_is_better else (a, b)  # U(x, y) counts x > y (ties 1/2)
    u = st.mannwhitneyu(x, y, axis=-2, method="asymptotic").statistic
    return u / (a.shape[-2] * b.shape[-2])


def probability_of_improvement(scores, baseline, *, lower_is_better: bool = True, confidence: float = 0.95,
                               n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """P(agent better than baseline) on the same evaluation seed and its stratified
    bootstrap interval.

    ``scores``: the agent's ``(runs, seeds)``; ``baseline``: ``(runs_b, seeds)``, or
    ``(seeds,)`` for a deterministic baseline. Per evaluation seed, the Mann-Whitney
    statistic between the agent's runs and the baseline's (``scipy.stats.mannwhitneyu``;
    ties count 1/2), averaged over seeds. The bootstrap resamples the seeds (the same
    ones for both sides: they serve the same requests) and, within each, each side's
    runs. ``lower_is_better`` for latencies."""
    a, b = _matrix(scores), _matrix(baseline)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"probability_of_improvement needs the same evaluation seeds: {a.shape[1]} vs {b.shape[1]}")
    point = float(_improvement(a, b, lower_is_better).mean())
    rng = np.random.default_rng(seed)
    ra, cols = _stratified_draws(rng, a.shape[0], a.shape[1], n_boot)
    rb = rng.integers(0, b.shape[0], size=(n_boot, b.shape[0], b.shape[1]))
    boot = _improvement(a[ra, cols], b[rb, cols], lower_is_better).mean(axis=-1)
    al = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [al, 1.0 - al])
    return point, float(lo), float(hi)
