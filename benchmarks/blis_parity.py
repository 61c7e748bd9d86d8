"""Side-by-side parity with BLIS on identical requests (issue 7).

Replays the 5,000 requests of BLIS's reference runs (``traces/blis/ref5000*.csv``, see
traces/SOURCES.md) through this simulator with BLIS's configuration: 4 x Qwen3-14B on
one H100 each (TP1), round-robin routing, no flow control, BLIS engine defaults
(:meth:`EngineConfig.blis`), KV capacity from memory at utilization 0.9 (15,909 blocks).
It compares, per request and as distributions, TTFT and E2E against BLIS's own
``first_chunk_time_us`` / ``last_chunk_time_us`` columns.

BLIS's ``last_chunk_time_us`` is arrival + FirstTokenTime + sum(ITL): it leaves out the
trained-physics per-request completion overhead a1 (``PostDecodeFixedOverhead``, 777 us)
that BLIS adds to its own E2E metric, and that our recorded finish time carries (it
matches BLIS's E2E metric). So "E2E" below is our finish time minus a1, i.e. the time of
the last token, like the column it is compared with.

Usage::

    python benchmarks/blis_parity.py                 # print the tables
    python benchmarks/blis_parity.py --write-docs    # also write docs/validation.md
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmsched_gym.engine import EngineConfig
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.workloads.traces import load_blis_trace

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_DIR = REPO.parent / "shared" / "traces" / "blis"
DOCS = REPO / "docs" / "validation.md"
KEEP_MARK = "<!-- sections below are kept when this file is regenerated -->"
BLIS_WALL_S = 10.0  # traces/SOURCES.md: about 10 s per run on a 2-core machine
PERCENTILES = (50, 90, 99)


@dataclass
class Variant:
    """One configuration of ours replayed against one BLIS file."""

    label: str
    trace: str
    latency_model: str
    latency_params: dict


TRAINED = "ref5000.csv"
ROOFLINE = "ref5000_roofline.csv"
VARIANTS = [
    Variant("blis-trained-physics", TRAINED, "blis-trained-physics", {}),
    Variant("blis-trained-physics, integer_us", TRAINED, "blis-trained-physics", {"integer_us": True}),
    Variant("roofline (ours, MFU 0.45/0.30)", ROOFLINE, "roofline", {"mfu_prefill": 0.45, "mfu_decode": 0.30}),
    Variant("blis-roofline", ROOFLINE, "blis-roofline", {}),
    Variant("blis-roofline, integer_us", ROOFLINE, "blis-roofline", {"integer_us": True}),
]


def blis_cluster(latency_model: str, latency_params: dict | None = None, instances: int = 4) -> ClusterConfig:
    """The cluster of BLIS's reference runs: Qwen3-14B on H100, TP1, BLIS engine defaults."""
    return ClusterConfig(instances=instances, hardware="H100", model="qwen3-14b", tp=1,
                         latency_model=latency_model, latency_params=dict(latency_params or {}),
                         gpu_memory_utilization=0.9, engine=EngineConfig.blis(), scrape_interval_s=0.0)


def causal_prefix(arrival_us: np.ndarray, finish_us: np.ndarray, n: int) -> int:
    """How many requests must be simulated for the first ``n`` to see exactly what they saw
    in BLIS: every request that arrives before the last of them finishes. A later request
    cannot touch them, but one that arrives while they run joins their batches and slows
    their steps, so a bare prefix of n requests would be too fast."""
    end = np.nanmax(finish_us[:n])
    return int(np.searchsorted(arrival_us, end, side="right"))


def replay(trace_path: Path, latency_model: str, latency_params: dict | None = None, limit: int | None = None):
    """Run the BLIS file's requests with BLIS's configuration.

    ``limit`` = n compares only the first n requests, simulating those plus every later
    request that arrives before the last of them finishes in BLIS (:func:`causal_prefix`).
    Returns (sim, ours, blis): ``ours`` and ``blis`` map "ttft" and "e2e" to per-request
    arrays in ms for the compared requests, in request order, "e2e" being the time of the
    last token (see the module doc).
    """
    tr = load_blis_trace(trace_path)
    w = tr.workload
    n = len(w) if limit is None else min(limit, len(w))
    m = causal_prefix(w.arrival_s * 1e6, tr.finish_us, n) if n < len(w) else n
    if m < len(w):
        w = w.subset(np.arange(m))
    sim = Simulator(w, blis_cluster(latency_model, latency_params),
                    GatewayConfig(router="round-robin", flow_control=None)).run()
    T = sim.table
    a1_s = float(getattr(sim.latency, "a1", 0.0)) * 1e-6  # BLIS's trace columns leave it out
    arrival_ms = w.arrival_s[:n] * 1e3
    finish = T.finish_t[:n] - np.where(T.output[:n] > 0, a1_s, 0.0)
    ours = {"ttft": T.first_token_t[:n] * 1e3 - arrival_ms, "e2e": finish * 1e3 - arrival_ms}
    blis = {"ttft": tr.first_token_us[:n] / 1e3 - arrival_ms,
            "e2e": tr.finish_us[:n] / 1e3 - arrival_ms}
    return sim, ours, blis


def compare(ours: dict, blis: dict) -> dict:
    """Distribution and per-request comparison of two runs (times in ms)."""
    out = {}
    for k in ("ttft", "e2e"):
        a, b = ours[k], blis[k]
        stats = {"mean": (a.mean(), b.mean())}
        for q in PERCENTILES:
            stats[f"p{q}"] = (np.percentile(a, q), np.percentile(b, q))
        out[k] = {s: (x, y, (x - y) / y) for s, (x, y) in stats.items()}
        err = np.abs(a - b)
        out[k]["median_rel_err"] = float(np.median(err / b))
        out[k]["exact_1us"] = float(np.mean(err <= 1e-3 + 1e-9))  # within one microsecond
        out[k]["max_abs_ms"] = float(err.max())
    return out


def first_divergences(ours: dict, blis: dict, k: int = 5, tol_ms: float = 1e-3) -> list[int]:
    d = np.abs(ours["ttft"] - blis["ttft"]) + np.abs(ours["e2e"] - blis["e2e"])
    return np.flatnonzero(d > tol_ms)[:k].tolist()


def _fmt(x: float) -> str:
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.2f}"


def table(label: str, cmp: dict, wall_s: float) -> str:
    lines = [f"**{label}** (our wall time {wall_s:.1f} s vs BLIS ~{BLIS_WALL_S:.0f} s)", "",
             "| metric | stat | ours (ms) | BLIS (ms) | rel. diff |", "|---|---|---:|---:|---:|"]
    for k, name in (("ttft", "TTFT"), ("e2e", "E2E")):
        for s in ("mean", *(f"p{q}" for q in PERCENTILES)):
            x, y, r = cmp[k][s]
            lines.append(f"| {name} | {s} | {_fmt(x)} | {_fmt(y)} | {r:+.2%} |")
    lines.append("")
    lines.append("| per request | TTFT | E2E |")
    lines.append("|---|---:|---:|")
    lines.append(f"| median abs. relative error | {cmp['ttft']['median_rel_err']:.2%} | {cmp['e2e']['median_rel_err']:.2%} |")
    lines.append(f"| requests within 1 us of BLIS | {cmp['ttft']['exact_1us']:.1%} | {cmp['e2e']['exact_1us']:.1%} |")
    lines.append(f"| largest abs. difference (ms) | {_fmt(cmp['ttft']['max_abs_ms'])} | {_fmt(cmp['e2e']['max_abs_ms'])} |")
    return "\n".join(lines) + "\n"


def load_summary(sim, ours: dict) -> str:
    """Whether the instances kept up: TTFT early vs late in the run, and the makespan."""
    ttft, n = ours["ttft"], len(ours["ttft"])
    k = max(n // 5, 1)
    last_arrival = float(sim.workload.arrival_s[-1])
    return (f"mean TTFT {ttft[:k].mean():,.1f} ms over the first {k:,} requests, "
            f"{ttft[-k:].mean():,.1f} ms over the last {k:,}; the last request finishes "
            f"{sim.now - last_arrival:.1f} s after the last arrival; "
            f"{int(sim.table.preemptions.sum())} preemptions")


def step_facts() -> str:
    """Step times that explain the roofline differences (Qwen3-14B, H100)."""
    from llmsched_gym.engine.latency import make_latency_model

    ours = make_latency_model("roofline", "H100", "qwen3-14b")
    blis = make_latency_model("blis-roofline", "H100", "qwen3-14b")
    rows = ["| iteration | roofline (ours), ms | blis-roofline, ms |", "|---|---:|---:|"]
    cases = [("prefill 512 tokens", ([512], [512], 0, 0)),
             ("prefill 2,048 tokens", ([2048], [2048], 0, 0)),
             ("decode, batch 108, context 770", ([], [], 108, 108 * 770)),
             ("prefill 512 + decode batch 108", ([512], [512], 108, 108 * 770))]
    for name, args in cases:
        rows.append(f"| {name} | {ours.step_time_us(*args) / 1e3:.2f} | {blis.step_time_us(*args) / 1e3:.2f} |")
    return "\n".join(rows) + "\n"


DOC_HEAD = """# Validation: side-by-side parity with BLIS

Generated by `python benchmarks/blis_parity.py --write-docs` (issue 7). The 5,000 requests
of BLIS's reference runs (traces/SOURCES.md, "BLIS reference runs": constant arrivals
every 16,666 us = 60 req/s, input 513 +- 249, output 512 +- 252 tokens) are replayed
with BLIS's configuration: 4 x Qwen3-14B on one H100 each (TP1), round-robin routing, no
flow control, `EngineConfig.blis()` (block 16, `max_num_seqs` 256,
`max_num_batched_tokens` 2048), KV from memory at utilization 0.9 (15,909 blocks).
BLIS (github.com/inference-sim/inference-sim, commit f90a1e3a) is not installed here: its
numbers are the `first_chunk_time_us` / `last_chunk_time_us` columns of the files.

E2E is the time of the last token. BLIS's `last_chunk_time_us` = arrival +
FirstTokenTime + sum(ITL) (`RequestsToTraceRecords`), which leaves out the trained-physics
completion overhead a1 = 777 us (`PostDecodeFixedOverhead`) that BLIS adds to its own E2E
*metric*; our recorded finish time includes it (it equals BLIS's E2E metric), so the
benchmark subtracts a1 before comparing with the column. Without that, every E2E would be
exactly 0.777 ms longer than BLIS's column (0.005% of the mean).

"""

DOC_EXPLAIN = """## What differs and why

**Batch formation, routing, overhead placement: no difference found.** With
`integer_us=True` every one of the 5,000 requests gets BLIS's TTFT and E2E to the
microsecond under both latency models, so the engine agrees with BLIS's
(sim/simulator.go, sim/batch_formation.go) on everything these runs exercise:
- round-robin starts at instance 0 and follows request order (request i goes to
  instance i mod 4; requests 0-3 are lone prefills whose TTFT matches exactly);
- a request becomes schedulable a0 after its arrival at the instance (`QueueingTime`);
  the a0 wait does not block the engine; a request queued while the instance is idle
  starts a step at once, one queued during a step joins the next step's batch formation
  (not the step in progress);
- each step: running requests first (a decode takes 1 token, a partial prefill its next
  chunk), then waiting requests in FIFO order while `max_num_seqs`, the 2,048-token
  budget and KV blocks allow; a prompt is chunked only by the remaining budget (BLIS's
  `long_prefill_token_threshold` is 0 by default);
- first token at the end of the step that completes the prompt, plus a2; every decode
  step's inter-token latency is step + a2; the last token comes after output - 1 decode
  steps; a1 goes to the E2E metric only and delays nothing;
- KV pressure is not exercised: neither simulator preempts in these runs (ours counts 0
  preemptions and BLIS's times match ours exactly), so block freeing/eviction order
  is not validated by them.

**Integer microseconds.** BLIS's clock is an int64 of microseconds: it truncates every
step time (`clampToInt64`, also for the roofline at this commit) and the alphas (a0
15,563.20 -> 15,563, a1 777.35 -> 777, a2 45.91 -> 45 us). Our default keeps fractions,
so each output token costs ~0.9 us (a2) + ~0.5 us (step truncation) more: ~0.7 ms for a
512-token answer directly, compounded by queueing in this near-saturated run to a median
E2E difference of 1-3 ms (0.02%). The shift also moves some requests across a step
boundary, which changes the batch they join. That shows as a per-request TTFT scatter
(median 1.9% with trained physics, a few requests +-35 ms, about one prefill step) while
the distributions stay within 0.5%.
`latency_params={{"integer_us": True}}` (trained physics and both rooflines) reproduces
BLIS's rounding; it is off by default because the fractions are the fitted values.

**Roofline formula.** BLIS's roofline (sim/latency/roofline.go `rooflineStepTime`)
differs from ours (`RooflineModel`) in what it counts, not in the crossover:
- the MLP has 2 matrices (`mlpMatrixCount` returns 2, the llm-optimizer convention),
  not SwiGLU's 3: FLOPs per token and weight bytes are ~27% lower (Qwen3-14B: 19.3
  GFLOP/token and 19.3 GB of weights instead of 26.4);
- no lm_head: neither its 1.56 GFLOP per sampled token nor its 1.56 GB of weights;
- attention context p + (t - 1)/2 with p the tokens already computed (ours assumes
  the chunk follows s - t tokens, with + (t + 1)/2), head_dim = hidden / heads, plus
  "vector" FLOPs (softmax 5 H per pair, RoPE 2 d per token) at the same MFU, and
  activation bytes L d 2 per token.
Our roofline is the physically complete count (3 matrices, lm_head); it respects the
physical floor, which BLIS's formula does not for decode (it reads 19.3 GB of weights
per step where a Qwen3-14B decode step must read ~28 GB). Ours prices a 512-token
prefill ~37% higher and a decode step ~26% higher at this run's batch:

{facts}
At 15 req/s per instance that is the difference between an instance that keeps up and
one that does not. With BLIS's formula: {load_blis}. With ours: {load_ours}. Queues grow
for the whole arrival period, so TTFT climbs to seconds and the distributions differ by
one to two orders of magnitude. That is the formula, not the engine:
`latency_model="blis-roofline"` (`BlisRooflineModel`: the same formula term for term;
the engine now passes it each chunk's tokens already in KV) matches BLIS to the
microsecond with `integer_us`, and within 1% on means and percentiles without it (the
per-request TTFT scatter, median 9%, is the batch-boundary effect described above: TTFTs
here are only a few steps long, so a request that slips into the next step changes by a
large fraction). For scale, BLIS's own trained-physics run of the same requests (first table)
has E2E mean 15.8 s, between its roofline's 7.2 s and our roofline's 21.4 s.

**Trained physics.** Our `TrainedPhysicsModel` is BLIS's formula with BLIS's default
coefficients; its only difference is the fractions (above). Test
`tests/test_blis_parity.py` compares the first 1,500 requests with BLIS's values for
them and checks means and p50 within 5%, p99 within 10%, median per-request E2E error
under 5% in the default (fractional) mode, and exact agreement with `integer_us` (both
latency models). A bare prefix is not enough: requests arriving while the 1,500 run join
their batches and slow their steps (replaying only 1,500 requests gives E2E ~10% short),
so the test also simulates every request that arrives before the last of them finishes
in BLIS (`causal_prefix`); later arrivals cannot affect them.

**Speed.** Our replays take 1.5-2.5 s of wall time for 5,000 requests (decode-only
iterations are planned in segments, so cost grows with events, not tokens) against
about 10 s for BLIS on a 2-core machine (SOURCES.md; not re-measured here, BLIS is not
installed).
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE_DIR,
                    help="folder with BLIS's ref5000.csv and ref5000_roofline.csv (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=None,
                    help="compare only the first N requests (simulating every request that "
                         "arrives before the last of them finishes)")
    ap.add_argument("--write-docs", action="store_true", help=f"write {DOCS.relative_to(REPO)}")
    args = ap.parse_args(argv)

    missing = [f for f in (TRAINED, ROOFLINE) if not (args.trace_dir / f).is_file()]
    if missing:
        print(f"error: BLIS reference trace(s) {', '.join(missing)} not found in {args.trace_dir}; "
              "pass --trace-dir pointing at shared/traces/blis (see traces/SOURCES.md)", file=sys.stderr)
        return 2

    sections, loads = [], {}
    for v in VARIANTS:
        t0 = time.perf_counter()
        sim, ours, blis = replay(args.trace_dir / v.trace, v.latency_model, v.latency_params, args.limit)
        wall = time.perf_counter() - t0
        cmp = compare(ours, blis)
        text = table(f"{v.label} vs BLIS `{v.trace}`", cmp, wall)
        div = first_divergences(ours, blis)
        if div:
            text += "\nFirst requests differing by more than 1 us: " + ", ".join(
                f"#{i} (TTFT {ours['ttft'][i]:.3f} vs {blis['ttft'][i]:.3f} ms)" for i in div[:3]) + "\n"
        loads[v.label] = load_summary(sim, ours)
        text += f"\nOurs: {loads[v.label]}.\n"
        sections.append(text)
        print(text)

    facts = step_facts()
    print(facts)
    if args.write_docs:
        body = DOC_HEAD
        body += "## Trained physics (`ref5000.csv`)\n\n" + "\n".join(sections[:2]) + "\n"
        body += "## Roofline (`ref5000_roofline.csv`)\n\n" + "\n".join(sections[2:]) + "\n"
        body += DOC_EXPLAIN.format(facts=facts, load_blis=loads["blis-roofline, integer_us"],
                                   load_ours=loads["roofline (ours, MFU 0.45/0.30)"])
        DOCS.parent.mkdir(parents=True, exist_ok=True)
        old = DOCS.read_text() if DOCS.exists() else ""
        if KEEP_MARK in old:  # sections written by hand after the generated part are kept
            body += "\n" + old[old.index(KEEP_MARK):]
        DOCS.write_text(body)
        print(f"wrote {DOCS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
