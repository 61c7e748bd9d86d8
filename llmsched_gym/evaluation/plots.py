"""Figures of an evaluation (matplotlib, Agg backend: no display needed).

* :func:`plot_cdfs` - TTFT and TPOT CDFs per policy at one load point (one seed), as in
  the LMetric paper's latency-CDF figures; a request that expired waiting for its first
  token enters the TTFT CDF at its wait (a lower bound).
* :func:`plot_change_bars` - per load point, grouped bars of the change of critical TTFT
  p99, E2E p99, throughput and goodput against a baseline, with paired 95% intervals, as in the
  llm-d flow-control article's chart.
* :func:`plot_load_sweep` - a metric against the load points in the units they were given
  (load fraction, published QPS or req/s), one line per policy, with the bootstrap
  interval as a band.
* :func:`plot_objective_vs_param` - a tuning objective against one parameter, one series
  per scenario (every trial a marker, infeasible ones hollow), as in the LMetric paper's
  tuning figures (``llmsched-gym tune``, the reproduction's tuning study).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..validation import atomic_write_bytes

CHANGE_METRICS = (("ttft_p99", "TTFT p99"), ("e2e_p99", "E2E p99"), ("throughput_rps", "throughput"),
                  ("goodput_rps", "goodput"))


def _save(fig, path) -> Path:
    """Render ``fig`` and write it atomically (no partial image if the write fails)."""
    import io

    path = Path(path)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=path.suffix.lstrip(".") or "png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def _plain_log_ticks(axis) -> None:
    """Log-axis tick labels as plain numbers (0.02, 0.5, 20), not ``2x10^1``; minor ticks
    are labelled as the span needs them (all within 4x, 2 and 5 within 100x, none beyond)."""
    from matplotlib.ticker import FuncFormatter

    def minor(v, _):
        lo, hi = sorted(axis.get_view_interval())
        span = hi / lo if lo > 0 else np.inf
        mantissa = round(v / 10 ** math.floor(math.log10(v)), 6) if v > 0 else 0
        return f"{v:g}" if span < 4 or (span < 100 and mantissa in (2, 5)) else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


#: x-axis label of a load sweep, by the rate kind the user gave (the point labels' prefix).
RATE_AXIS = {"load": "load (fraction of the measured capacity)", "paper_qps": "published QPS point (paper_qps)",
             "qps": "request rate (req/s)"}


def _class_mask(priority: np.ndarray, cls: str) -> np.ndarray:
    if cls == "critical":
        return priority >= 0
    if cls == "sheddable":
        return priority < 0
    return np.ones(len(priority), bool)


def plot_cdfs(samples: dict, path, *, scenario: str, point: str, policies, cls: str = "all") -> Path:
    """TTFT and TPOT CDFs (log x) per policy from ``ResultTable.samples`` at ``point``."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, unit, scale in ((axes[0], "ttft", "s", 1.0), (axes[1], "tpot", "ms", 1e3)):
        for pol in policies:
            s = samples.get((scenario, point, pol))
            if s is None:
                continue
            x = np.asarray(s[metric], float)[_class_mask(np.asarray(s["priority"]), cls)] * scale
            x = np.sort(x[np.isfinite(x) & (x > 0)])
            if len(x) == 0:
                continue
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=pol, lw=1.6)
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
        ax.set_xlabel(f"{metric.upper()} ({unit})")
        ax.set_ylabel("CDF (fraction of requests)")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{metric.upper()} - {scenario} @ {point}" + (f", {cls}" if cls != "all" else ""))
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return _save(fig, path)


#: Width of one bar of :func:`plot_change_bars`, and the room an upright label takes
#: beyond it, inches.
BAR_IN, LABEL_IN = 0.3, 0.4


def plot_change_bars(stats: list[dict], path, *, scenario: str, baseline: str, cls: str = "critical",
                     metrics=CHANGE_METRICS) -> Path:
    """Per load point, grouped bars of the relative change vs ``baseline`` (one panel per policy)."""
    recs = [r for r in stats if r["scenario"] == scenario and r["class"] == cls]
    points = list(dict.fromkeys(r["point"] for r in recs))
    policies = [p for p in dict.fromkeys(r["policy"] for r in recs) if p != baseline]
    # Every bar BAR_IN inches wide whatever the number of points and metrics, its label
    # turned upright: labels of neighbouring bars never meet.
    panel_w = max(4.0, BAR_IN / 0.8 * len(metrics) * len(points) + 1.2)
    fig, axes = plt.subplots(1, max(1, len(policies)), figsize=(panel_w * max(1, len(policies)), 4.2), squeeze=False)
    width = 0.8 / len(metrics)
    extents = []  # per panel: the bars' and error bars' lowest and highest ends, labels down / up
    for ax, pol in zip(axes[0], policies or [None]):
        ends, up, down = [0.0], False, False
        for k, (m, label) in enumerate(metrics):
            vals, lo, hi = [], [], []
            for pt in points:
                r = next((x for x in recs if x["point"] == pt and x["policy"] == pol and x["metric"] == m), None)
                c = r["change"] * 100 if r and r.get("change") is not None and math.isfinite(r["change"]) else np.nan
                vals.append(c)
                lo.append(c - r["change_low"] * 100 if r and math.isfinite(r.get("change_low", np.nan)) else 0)
                hi.append(r["change_high"] * 100 - c if r and math.isfinite(r.get("change_high", np.nan)) else 0)
            x = np.arange(len(points)) + (k - (len(metrics) - 1) / 2) * width
            ax.bar(x, vals, width, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], capsize=3, label=label)
            for xi, v, l_, h_ in zip(x, vals, lo, hi):
                if np.isfinite(v):  # beyond the end of the error bar, not on it
                    end = v + max(h_, 0) if v >= 0 else v - max(l_, 0)
                    ends.append(end)
                    up, down = up or v >= 0, down or v < 0
                    ax.annotate(f"{v:+.0f}%", (xi, end), xytext=(0, 2 if v >= 0 else -2), textcoords="offset points",
                                ha="center", va="bottom" if v >= 0 else "top", fontsize=7, rotation=90)
        ax.axhline(0, color="black", lw=0.8)
        extents.append((min(ends), max(ends), up, down))
        ax.set_xticks(np.arange(len(points)))
        ax.set_xticklabels(points, fontsize=8)
        ax.set_xlabel("load point")
        ax.set_ylabel(f"change vs {baseline} (%)")
        ax.set_title(f"{scenario}: {pol} vs {baseline} ({cls})", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    for ax, (lo, hi, up, down) in zip(axes[0], extents):
        # LABEL_IN inches beyond the furthest end on each side that has labels, so no
        # label reaches the panel's title or the tick labels
        frac = LABEL_IN / (ax.get_position().height * fig.get_figheight())
        total = max(hi - lo, 1.0) / max(1 - frac * (up + down), 0.2)
        ax.set_ylim(lo - (frac * total if down else 0.02 * total), hi + (frac * total if up else 0.02 * total))
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)  # below the panels
    return _save(fig, path)


def plot_load_sweep(stats: list[dict], path, *, scenario: str, cls: str = "all",
                    metrics=(("ttft_mean", "TTFT mean (s)", 1.0), ("ttft_p99", "TTFT p99 (s)", 1.0),
                             ("tpot_mean", "TPOT mean (ms)", 1e3))) -> Path:
    """Metrics against the load points in the user's units (``load=0.5``: load fraction;
    ``paper_qps=16``: published QPS; otherwise req/s), one line per policy, 95% CI bands."""
    recs = [r for r in stats if r["scenario"] == scenario and r["class"] == cls]
    policies = list(dict.fromkeys(r["policy"] for r in recs))
    kinds = {str(r["point"]).partition("=")[0] for r in recs}
    kind = kinds.pop() if len(kinds) == 1 else "qps"
    if kind not in RATE_AXIS or any(r.get("rate") is None for r in recs):
        kind = "qps"
    xkey = "qps" if kind == "qps" else "rate"
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.8), squeeze=False)
    for ax, (m, label, scale) in zip(axes[0], metrics):
        for pol in policies:
            rs = sorted((r for r in recs if r["policy"] == pol and r["metric"] == m), key=lambda r: r[xkey])
            if not rs:
                continue
            x = [r[xkey] for r in rs]
            y = np.array([r["median"] for r in rs], float) * scale
            ax.plot(x, y, marker="o", label=pol, lw=1.5)
            ax.fill_between(x, np.array([r["ci_low"] for r in rs], float) * scale,
                            np.array([r["ci_high"] for r in rs], float) * scale, alpha=0.15)
        ax.set_xlabel(RATE_AXIS.get(kind, RATE_AXIS["qps"]))
        ax.set_ylabel(label)
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{scenario} ({cls})", fontsize=10)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def plot_objective_vs_param(series: list[dict], path, *, xlabel: str, ylabel: str, log: bool = False,
                            logy: bool = False, connect: bool = True, best: tuple | None = None,
                            hlines: list[dict] | None = None, title: str = "") -> Path:
    """The objective of every trial against a parameter.

    ``series``: dicts with ``label``, ``x``, ``y`` and optionally ``feasible`` (same
    length; infeasible trials are hollow markers); ``connect`` joins each series' points
    in x order (a one-parameter search traces the objective's curve); ``best`` = (x, y)
    is starred; ``hlines``: dicts with ``y``, ``label`` and optionally ``color`` (the level
    of a reference policy, dashed); ``log`` / ``logy``: logarithmic x / y axis.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, s in enumerate(series):
        color = s.get("color", colors[k % len(colors)])
        x, y = np.asarray(s["x"], float), np.asarray(s["y"], float)
        ok = np.asarray(s.get("feasible", [True] * len(x)), bool)
        order = np.argsort(x, kind="stable")
        if connect and len(x) > 1:
            ax.plot(x[order], y[order], color=color, lw=1.2, alpha=0.8)
        ax.scatter(x[ok], y[ok], color=color, s=22, label=s.get("label") or None, zorder=3)
        if (~ok).any():
            ax.scatter(x[~ok], y[~ok], facecolors="none", edgecolors=color, s=22, zorder=3,
                       label=f"{s.get('label') or 'trial'} (infeasible)")
    for h in hlines or []:
        ax.axhline(h["y"], color=h.get("color", "gray"), ls="--", lw=1.0, label=h.get("label"))
    if best is not None:
        ax.scatter([best[0]], [best[1]], marker="*", s=180, color="black", zorder=4, label="best")
    if log:
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
    if logy:
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)
