"""Figures of an evaluation (matplotlib, Agg backend: no display needed).

* :func:`plot_cdfs` - TTFT and TPOT CDFs per policy at one load point (one seed), as in
  the LMetric paper's latency-CDF figures.
* :func:`plot_change_bars` - per load point, grouped bars of the change of critical TTFT
  p99, E2E p99 and throughput against a baseline, with paired 95% intervals, as in the
  llm-d flow-control article's chart.
* :func:`plot_load_sweep` - a metric against the request rate, one line per policy, with
  the bootstrap interval as a band.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

CHANGE_METRICS = (("ttft_p99", "TTFT p99"), ("e2e_p99", "E2E p99"), ("throughput_rps", "throughput"))


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


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
        ax.set_xlabel(f"{metric.upper()} ({unit})")
        ax.set_ylabel("CDF (fraction of requests)")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{metric.upper()} - {scenario} @ {point}" + (f", {cls}" if cls != "all" else ""))
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return _save(fig, path)


def plot_change_bars(stats: list[dict], path, *, scenario: str, baseline: str, cls: str = "critical",
                     metrics=CHANGE_METRICS) -> Path:
    """Per load point, grouped bars of the relative change vs ``baseline`` (one panel per policy)."""
    recs = [r for r in stats if r["scenario"] == scenario and r["class"] == cls]
    points = list(dict.fromkeys(r["point"] for r in recs))
    policies = [p for p in dict.fromkeys(r["policy"] for r in recs) if p != baseline]
    fig, axes = plt.subplots(1, max(1, len(policies)), figsize=(max(5.5, 1.6 * len(points) + 3) * max(1, len(policies)) / max(1, min(len(policies), 2)), 4),
                             squeeze=False)
    width = 0.8 / len(metrics)
    for ax, pol in zip(axes[0], policies or [None]):
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
            for xi, v in zip(x, vals):
                if np.isfinite(v):
                    ax.annotate(f"{v:+.0f}%", (xi, v), ha="center", va="bottom" if v >= 0 else "top", fontsize=7)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(np.arange(len(points)))
        ax.set_xticklabels(points, fontsize=8)
        ax.set_xlabel("load point")
        ax.set_ylabel(f"change vs {baseline} (%)")
        ax.set_title(f"{scenario}: {pol} vs {baseline} ({cls})", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_load_sweep(stats: list[dict], path, *, scenario: str, cls: str = "all",
                    metrics=(("ttft_mean", "TTFT mean (s)", 1.0), ("ttft_p99", "TTFT p99 (s)", 1.0),
                             ("tpot_mean", "TPOT mean (ms)", 1e3))) -> Path:
    """Metrics against the request rate (req/s), one line per policy, 95% CI bands."""
    recs = [r for r in stats if r["scenario"] == scenario and r["class"] == cls]
    policies = list(dict.fromkeys(r["policy"] for r in recs))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.8), squeeze=False)
    for ax, (m, label, scale) in zip(axes[0], metrics):
        for pol in policies:
            rs = sorted((r for r in recs if r["policy"] == pol and r["metric"] == m), key=lambda r: r["qps"])
            if not rs:
                continue
            x = [r["qps"] for r in rs]
            y = np.array([r["median"] for r in rs], float) * scale
            ax.plot(x, y, marker="o", label=pol, lw=1.5)
            ax.fill_between(x, np.array([r["ci_low"] for r in rs], float) * scale,
                            np.array([r["ci_high"] for r in rs], float) * scale, alpha=0.15)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{scenario} ({cls})", fontsize=10)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)
