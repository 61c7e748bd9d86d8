"""Per-request records and per-class summaries (docs/architecture.md).

Summaries are over *all* arrivals of a class, so a policy cannot improve them by not
serving requests (docs/architecture.md, "Metrics"):

* ``slo_attainment`` and ``goodput_rps`` count a request as meeting its SLO only if it
  finished within its class's TTFT and TPOT SLOs; rejected, expired, dropped, evicted,
  timed-out, crashed (lost to an instance crash) and unfinished requests are misses. ``all`` applies each request's own class SLO.
* ``ttft_*`` statistics include the requests that never got a first token while
  waiting for one (expired in the gateway queue, evicted, timed out or lost to a crash
  before their first token, or still waiting when the run stopped), *censored* at their wait: their
  true TTFT is at least that long.
  ``ttft_censored`` counts them; rejected and dropped requests have no wait and are
  reported beside TTFT (``rejected``, ``dropped``).
* Rates (``throughput_rps``, ``goodput_rps``, ``output_tokens_per_s``) are over the
  arrival window (first to last arrival), not over the time it took to drain.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import numpy as np

from ..engine.api import FINISHED, OUTCOME_NAMES, RequestTable, request_records
from ..workloads.workload import class_name

PERCENTILES = (50, 90, 99)
_QUANTILES = np.true_divide(PERCENTILES, 100)


def percentiles(x: np.ndarray) -> np.ndarray:
    """``np.percentile(x, PERCENTILES)`` of a non-empty float array, bit for bit: numpy's
    default (linear) method with its floating-point operations, on a sorted copy. Same
    result, without numpy's ~0.1 ms of per-call overhead (an episode summary takes nine)."""
    s = np.sort(x)
    n = len(s)
    if np.isnan(s[-1]):
        return np.full(len(_QUANTILES), np.nan)
    virtual = (n - 1) * _QUANTILES
    prev = np.floor(virtual)
    nxt = prev + 1
    top = virtual >= n - 1
    prev[top] = -1  # numpy takes the last value for both neighbours
    nxt[top] = -1
    gamma = virtual - prev
    a, b = s[prev.astype(np.intp)], s[nxt.astype(np.intp)]
    diff = b - a
    out = a + diff * gamma
    upper = gamma >= 0.5
    out[upper] = (b - diff * (1 - gamma))[upper]
    return out


def _stats(prefix: str, x: np.ndarray) -> dict[str, float]:
    if len(x) == 0:
        return {f"{prefix}_mean": float("nan"), **{f"{prefix}_p{q}": float("nan") for q in PERCENTILES}}
    ps = percentiles(x)
    return {f"{prefix}_mean": float(x.mean()), **{f"{prefix}_p{q}": float(v) for q, v in zip(PERCENTILES, ps)}}


def summarize_class(table: RequestTable, mask: np.ndarray, duration: float,
                    slo_ttft: "float | np.ndarray | None" = None, slo_tpot: "float | np.ndarray | None" = None,
                    rec: dict[str, np.ndarray] | None = None) -> dict:
    """Metrics of the requests selected by ``mask`` (see :func:`summarize`).

    ``duration`` is the arrival window the rates are over; ``slo_ttft`` / ``slo_tpot``
    a bound for every request or one per request (NaN: none); ``rec`` is
    :func:`request_records` of ``table`` if already computed.
    """
    rec = request_records(table) if rec is None else rec
    fin = mask & (table.outcome == FINISHED)
    x = rec["ttft_or_wait"]
    has_ttft = mask & ~np.isnan(x)
    out = {"requests": int(mask.sum())}
    out.update(_stats("ttft", x[has_ttft]))
    out["ttft_censored"] = int((mask & rec["censored"]).sum())
    out.update(_stats("tpot", rec["tpot"][fin & (table.output > 1)]))
    out.update(_stats("e2e", rec["e2e"][fin]))
    counts = np.bincount(table.outcome[mask], minlength=len(OUTCOME_NAMES))
    out.update({k: int(counts[c]) for c, k in OUTCOME_NAMES.items()})
    out["preemptions"] = int(table.preemptions[mask].sum())
    out["retries"] = int(table.retries[mask].sum())  # re-sends after a crash (faults)
    out["throughput_rps"] = float(fin.sum() / duration) if duration > 0 else 0.0
    out["output_tokens_per_s"] = float(table.output[fin].sum() / duration) if duration > 0 else 0.0
    inp = table.input[mask & table.scheduled_once].sum()
    out["prefix_hit_token_ratio"] = float(table.prefix_hit[mask].sum() / inp) if inp else 0.0
    ok = fin.copy()
    if slo_ttft is not None:
        ok &= ~(rec["ttft"] > np.asarray(slo_ttft, float))  # NaN bound: no SLO
    if slo_tpot is not None:
        ok &= ~(rec["tpot"] > np.asarray(slo_tpot, float))  # NaN TPOT (one token): no TPOT to miss
    out["slo_attainment"] = float(ok.sum() / mask.sum()) if mask.sum() else float("nan")
    out["goodput_rps"] = float(ok.sum() / duration) if duration > 0 else 0.0
    return out


def arrival_window(arrival_s: np.ndarray, now: float) -> float:
    """Seconds from the first to the last of ``arrival_s`` (sorted), the span rates are
    over; with fewer than two arrivals, from the first one to ``now``."""
    if len(arrival_s) == 0:
        return 0.0
    span = float(arrival_s[-1] - arrival_s[0])
    return span if span > 0 else max(float(now - arrival_s[0]), 0.0)


def summarize(sim) -> dict:
    """Summary of a finished (or paused) simulation.

    Keys: ``classes`` (class name -> metrics, plus ``all``; times in seconds, e.g.
    ``ttft_p99``), ``outcomes`` (counts that add up to the arrivals), ``preemptions``,
    ``prefix_hit_token_ratio``, ``arrival_window_s``, ``sim_seconds``, ``wall_seconds``.
    Every class, ``all`` included, is summarized over all its arrivals (module docstring).
    """
    table = sim.table
    w = sim.workload
    arrived = np.arange(table.n) < sim.arrived
    duration = arrival_window(w.arrival_s[arrived], sim.now)
    rec = request_records(table, sim.now)
    slo_ttft, slo_tpot = np.full(table.n, np.nan), np.full(table.n, np.nan)
    for p, v in w.slo_ttft_s.items():
        slo_ttft[table.priority == p] = v
    for p, v in w.slo_tpot_s.items():
        slo_tpot[table.priority == p] = v
    classes = {}
    for p in sorted(np.unique(table.priority).tolist(), reverse=True):
        mask = arrived & (table.priority == p)
        classes[class_name(p)] = summarize_class(table, mask, duration, w.slo_ttft_s.get(p), w.slo_tpot_s.get(p), rec)
    classes["all"] = summarize_class(table, arrived, duration, slo_ttft, slo_tpot, rec)
    outcomes = {k: int(v) for k, v in classes["all"].items() if k in OUTCOME_NAMES.values()}
    outcomes["arrivals"] = int(arrived.sum())
    return {
        "classes": classes,
        "outcomes": outcomes,
        "preemptions": classes["all"]["preemptions"],
        "prefix_hit_token_ratio": classes["all"]["prefix_hit_token_ratio"],
        "arrival_window_s": duration,
        "sim_seconds": float(sim.now),
        "wall_seconds": float(sim.wall_seconds),
    }


def summarize_windows(sim, windows: list[tuple[float, float]], names: list[str] | None = None) -> dict:
    """Metrics of the requests arriving in each window ``[start, end)`` of seconds (the last
    one closed): ``{name: summarize_class(...) + start_s, end_s}``, names ``w1, w2, ...``
    unless given. Each window is summarized over all its arrivals, like a class (rates
    over its own arrival span)."""
    table = sim.table
    arrived = np.arange(table.n) < sim.arrived
    rec = request_records(table, sim.now)
    out = {}
    for k, (lo, hi) in enumerate(windows):
        inside = (table.arrival >= lo) & ((table.arrival < hi) | ((table.arrival == hi) & (k == len(windows) - 1)))
        mask = arrived & inside
        span = arrival_window(np.sort(table.arrival[mask]), sim.now)
        row = summarize_class(table, mask, span, rec=rec)
        row.update(start_s=float(lo), end_s=float(hi))
        out[names[k] if names else f"w{k + 1}"] = row
    return out


def run_windows(sim, profile=None, window_s: float | None = None) -> tuple[list[tuple[float, float]], list[str]]:
    """The windows a run is reported by: the stages of the inference-perf profile that
    generated its workload (``stage1``...), else fixed windows of ``window_s`` seconds over
    the arrivals (``w1``...); none without either."""
    if profile is not None:
        wins = profile.stage_bounds(sim.workload.arrival_s)
        return wins, [f"stage{k + 1}" for k in range(len(wins))]
    if not window_s:
        return [], []
    arr = sim.workload.arrival_s
    if not len(arr):
        return [], []
    n = max(int(np.ceil((arr[-1] - arr[0]) / window_s)), 1)
    wins = [(arr[0] + k * window_s, arr[0] + (k + 1) * window_s) for k in range(n)]
    return wins, [f"w{k + 1}" for k in range(n)]


class LazySummary(Mapping):
    """:func:`summarize` of a simulation as it is now, computed when first read.

    An environment ends thousands of episodes whose summaries nobody reads; taking the
    records costs a few tens of microseconds, summarizing them about a millisecond. It
    reads like the summary's dict (``m["classes"]["all"]["ttft_mean"]``, ``dict(m)``,
    ``m == summarize(sim)``). Being a ``Mapping`` rather than a ``dict``, a vector env's
    ``final_info`` holds it as one object per sub-environment, not as arrays per key.
    """

    __slots__ = ("_run", "_summary")

    def __init__(self, sim):
        w = sim.workload  # what summarize reads of it (not the prefix hashes: most of its bytes)
        workload = SimpleNamespace(arrival_s=w.arrival_s, slo_ttft_s=w.slo_ttft_s, slo_tpot_s=w.slo_tpot_s)
        self._run = SimpleNamespace(table=sim.table.detached(), workload=workload, arrived=sim.arrived,
                                    now=sim.now, wall_seconds=sim.wall_seconds)
        self._summary: dict | None = None

    def _get(self) -> dict:
        if self._summary is None:
            self._summary, self._run = summarize(self._run), None
        return self._summary

    def __getitem__(self, key):
        return self._get()[key]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())
