"""Per-request records and per-class summaries (DESIGN 3.1)."""

from __future__ import annotations

import numpy as np

from .requests import FINISHED, OUTCOME_NAMES, RequestTable
from .workload import class_name

PERCENTILES = (50, 90, 99)


def _stats(prefix: str, x: np.ndarray) -> dict[str, float]:
    if len(x) == 0:
        return {f"{prefix}_mean": float("nan"), **{f"{prefix}_p{q}": float("nan") for q in PERCENTILES}}
    ps = np.percentile(x, PERCENTILES)
    return {f"{prefix}_mean": float(x.mean()), **{f"{prefix}_p{q}": float(v) for q, v in zip(PERCENTILES, ps)}}


def request_records(table: RequestTable) -> dict[str, np.ndarray]:
    """Per-request columns: times in seconds, NaN where an event did not happen."""
    ttft = table.first_token_t - table.arrival
    tpot = np.where(table.output > 1,
                    (table.finish_t - table.first_token_t) / np.maximum(table.output - 1, 1), np.nan)
    return {
        "arrival": table.arrival, "dispatch": table.dispatch_t, "first_token": table.first_token_t,
        "finish": table.finish_t, "priority": table.priority, "instance": table.instance,
        "input_tokens": table.input, "output_tokens": table.output, "prefix_hit_tokens": table.prefix_hit,
        "preemptions": table.preemptions, "outcome": table.outcome,
        "ttft": ttft, "tpot": tpot, "e2e": table.finish_t - table.arrival,
    }


def summarize_class(table: RequestTable, mask: np.ndarray, duration: float,
                    slo_ttft: float | None = None, slo_tpot: float | None = None,
                    rec: dict[str, np.ndarray] | None = None) -> dict:
    """Metrics of the requests selected by ``mask`` (see :func:`summarize`); ``rec`` is
    :func:`request_records` of ``table`` if already computed."""
    rec = request_records(table) if rec is None else rec
    fin = mask & (table.outcome == FINISHED)
    has_first = mask & ~np.isnan(table.first_token_t)
    out = {"requests": int(mask.sum())}
    out.update(_stats("ttft", rec["ttft"][has_first]))
    out.update(_stats("tpot", rec["tpot"][fin & (table.output > 1)]))
    out.update(_stats("e2e", rec["e2e"][fin]))
    counts = np.bincount(table.outcome[mask], minlength=len(OUTCOME_NAMES))
    out.update({k: int(counts[c]) for c, k in OUTCOME_NAMES.items()})
    out["preemptions"] = int(table.preemptions[mask].sum())
    out["throughput_rps"] = float(fin.sum() / duration) if duration > 0 else 0.0
    out["output_tokens_per_s"] = float(table.output[fin].sum() / duration) if duration > 0 else 0.0
    inp = table.input[mask & table.scheduled_once].sum()
    out["prefix_hit_token_ratio"] = float(table.prefix_hit[mask].sum() / inp) if inp else 0.0
    ok = fin.copy()
    if slo_ttft is not None:
        ok &= rec["ttft"] <= slo_ttft
    if slo_tpot is not None:
        ok &= np.nan_to_num(rec["tpot"], nan=0.0) <= slo_tpot
    out["slo_attainment"] = float(ok.sum() / mask.sum()) if mask.sum() else float("nan")
    out["goodput_rps"] = float(ok.sum() / duration) if duration > 0 else 0.0
    return out


def summarize(sim) -> dict:
    """Summary of a finished (or paused) simulation.

    Keys: ``classes`` (class name -> metrics, plus ``all``; times in seconds, e.g.
    ``ttft_p99``), ``outcomes`` (counts that add up to the arrivals), ``preemptions``,
    ``prefix_hit_token_ratio``, ``sim_seconds``, ``wall_seconds``.
    """
    table = sim.table
    w = sim.workload
    arrived = np.arange(table.n) < sim._arrival_ptr
    duration = max(sim.now - (w.arrival_s[0] if len(w) else 0.0), 0.0)
    rec = request_records(table)
    classes = {}
    for p in sorted(np.unique(table.priority).tolist(), reverse=True):
        mask = arrived & (table.priority == p)
        classes[class_name(p)] = summarize_class(table, mask, duration, w.slo_ttft_s.get(p), w.slo_tpot_s.get(p), rec)
    classes["all"] = summarize_class(table, arrived, duration, rec=rec)
    outcomes = {k: int(v) for k, v in classes["all"].items() if k in OUTCOME_NAMES.values()}
    outcomes["arrivals"] = int(arrived.sum())
    return {
        "classes": classes,
        "outcomes": outcomes,
        "preemptions": classes["all"]["preemptions"],
        "prefix_hit_token_ratio": classes["all"]["prefix_hit_token_ratio"],
        "sim_seconds": float(sim.now),
        "wall_seconds": float(sim.wall_seconds),
    }
