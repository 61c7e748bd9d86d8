"""Reproduce the published directions (docs/results.md) and write docs/results.md + docs/figures/.

    python benchmarks/studies/reproduce.py              # full report (3 seeds, ~15-20 min on 2 cores)
    python benchmarks/studies/reproduce.py --quick      # reduced: 1 seed, shortened windows (~3 min)
    python benchmarks/studies/reproduce.py --render-only  # rebuild the report from the last run's data
    python benchmarks/studies/reproduce.py --backend ray --ray-address auto  # the cells on a running Ray cluster
    python benchmarks/studies/reproduce.py --only tuning  # only the tuning study (section 6, ~3 min; [tune] extra)

Every cell runs through :func:`llmsched_gym.evaluate` (paired seeds; all studies share one
run of the backend: a local process pool, or Ray with ``--backend ray``; the results are
the same on either). Raw rows go to ``results/reproduce/rows.json`` (not committed), the
statistics to ``docs/figures/summary.csv``, the report to ``docs/results.md``.

The tuning study (section 6: the Bailian weight and the AIBrix threshold tuned with
``llmsched-gym tune`` on chatbot, agent and coder at 50% load, against untuned LMetric)
keeps its trials in ``docs/figures/tuning.json``; ``--only tuning`` reruns it alone and
replaces section 6 (and its summary line) in the existing report, and every later render
includes it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llmsched_gym.cli.flags import add_backend_args, backend_from_args  # noqa: E402
from llmsched_gym.cli.progress import ProgressBar  # noqa: E402
from llmsched_gym.evaluation.harness import ResultTable, Study, make_figures, run_studies  # noqa: E402
from llmsched_gym.evaluation.stats import lookup, summarize_rows  # noqa: E402

DOCS = ROOT / "docs"
FIG = DOCS / "figures"
RAW = ROOT / "results" / "reproduce"

FC_POLICIES = ["static-usage-limit:threshold=1.0+label=static", "soft-reflective-ceiling+label=soft-reflective"]
ROUTERS = ["lmetric", "jsq", "vllm-dp", "bailian", "dynamo", "aibrix", "llm-d", "llm-d-predicted-latency",
           "sglang-cache-aware"]
SWEEP_ROUTERS = ["lmetric", "jsq", "llm-d", "bailian", "dynamo"]
SWEEP_LOADS = [0.3, 0.5, 0.7, 0.8]
ROUTING_SCENARIOS = ["chatbot", "agent", "coder", "toolagent"]
#: The published "llm-d" baseline of the LMetric comparisons is llm-d's simulation-based
#: (predicted-latency) router, not its weighted scorers (the scenarios' default router).
LMETRIC_LLMD = "llm-d-predicted-latency"
#: Section 4: the hot burst of short requests, and the paper's shape (thinking requests).
HOTSPOT_SCENARIOS = ["kv-hotspot", "kv-hotspot-thinking"]
#: llm-d's probabilistic admitter vs the binary gate (legacy), no flow control, as in the
#: plugin's benchmark (llm-d-router requestcontrol/admitter/probabilisticadmitter/README.md).
ADM_POLICIES = ["admission=legacy+flow_control=none+label=legacy",
                "admission=probabilistic+flow_control=none+label=probabilistic"]
ADM_LOADS = {"load=0.5": "under", "load=0.8": "mid"}
#: The tuning study (section 6): spaces as `llmsched-gym tune --space`, on these scenarios at load 0.5.
TUNE_SCENARIOS = ["chatbot", "agent", "coder"]
TUNE_SPACES = {"bailian": ("bailian:lam=0..1", "bailian.lam", 0.6), "aibrix": ("aibrix:imbalance=1..64:log",
                                                                             "aibrix.imbalance", 8)}
TUNE_OBJECTIVE = "ttft_mean"
TUNE_FILE = FIG / "tuning.json"
#: A trial is near-optimal when its objective is within this fraction of the best.
NEAR = 0.02
#: The rates (chatbot, agent, coder at load 0.5) of the run TUNING_NOTE was written from:
#: the capacities of the earlier rule; with the current ones the note is left out.
TUNING_NOTE_RATES = (87.2, 131.7, 30.5)
#: What the curves of the recorded run (docs/figures/tuning.json, 20 trials x 2 seeds) show.
TUNING_NOTE = (
    "Reading the curves (figures below). Bailian on chatbot has a cliff, not a plateau: mean TTFT falls until "
    "lam ~0.7, stays within 2% of the optimum up to ~0.79, then rises steeply (1.4x the optimum at lam 0.88, "
    "~200x at lam >= 0.96), where the cache term outweighs load and requests pile onto the instances holding "
    "the popular system prompts (seed 0 at lam 0.96: the busiest instance gets 5x the mean share, 34 "
    "preemptions; at the optimum 1.05x, none). On agent, whose long shared tool prompts make a hit worth "
    "almost any imbalance, TTFT keeps falling up to lam 0.95-0.99; on coder it is flat within 2% from 0.74 to "
    "0.99. Chatbot's optimum (0.71-0.79, where the published ChatBot optimum 0.7 also lies) is therefore well "
    "apart from agent's (>= 0.95): the weight has to be tuned per workload, as published, though the published "
    "API optimum (0.55) lies below the ChatBot one and agent's here lies above it. AIBrix's threshold has a "
    "knee instead of an optimum: below it (about 6 on chatbot, 7 on coder, 9-12 on agent) the least-request "
    "fallback fires too often and costs cache hits (coder, seed 0: hit ratio 0.70 at imbalance 1, 0.84 at 4, "
    "0.86 at 16); above it mean TTFT is flat to within 1%, identical to 4 digits from 17 to 61 on agent and "
    "from 12 to 63 on coder (the fallback no longer fires), so one setting (>= 16) is near-optimal on all three "
    "workloads and the default 8 is within 3%: unlike the published 4-vs-16, no per-workload tuning is needed "
    "here. Untuned LMetric beats both tuned baselines on chatbot and coder and loses to both on agent, the "
    "agent gap of section 2 (see its investigation).")


def studies(quick: bool) -> list[Study]:
    short = (lambda d: {"duration_s": d}) if quick else (lambda d: {})
    out = [
        Study("codegen", FC_POLICIES, "static", {"paper_qps": [4, 10, 16]}, short(90), ("critical", "sheddable"),
              "flow control"),
        Study("chat", FC_POLICIES, "static", {"paper_qps": [20, 40, 60, 80]}, short(60), ("critical", "sheddable"),
              "flow control"),
        Study("reasoning", FC_POLICIES, "static", {"paper_qps": [0.2, 0.7]}, short(450), ("critical", "sheddable"),
              "flow control"),
    ]
    for sc in ROUTING_SCENARIOS:
        out.append(Study(sc, ROUTERS, "jsq", {"load": [0.5]}, short(40), ("all",), "routing at 50% load"))
    out.append(Study("chatbot", SWEEP_ROUTERS, "jsq", {"load": [x for x in SWEEP_LOADS if x != 0.5]}, short(40),
                     ("all",), "load sweep"))
    for sc in HOTSPOT_SCENARIOS:
        out.append(Study(sc, ["jsq", "lmetric-no-detector", "lmetric"], "jsq", {"load": [0.5]}, {},
                         ("all",), "KV hotspot"))
    for sc, d in (("codegen", 90), ("chat", 60)):
        out.append(Study(sc, ADM_POLICIES, "legacy", {"load": [float(k.split("=")[1]) for k in ADM_LOADS]}, short(d),
                         ("critical", "sheddable", "all"), "admission"))
    return out


# ====================================================================== checks (docs/results.md)
def _rec(stats, scenario, point, policy, metric, cls):
    return lookup(stats, scenario=scenario, point=point, policy=policy, metric=metric, **{"class": cls})


def _chg(stats, scenario, point, metric, cls="critical", policy="soft-reflective"):
    r = _rec(stats, scenario, point, policy, metric, cls)
    return r["change"] if r else math.nan


def _pct(x, digits=0):
    return "n/a" if x is None or not math.isfinite(x) else f"{x * 100:+.{digits}f}%"


def _s(x, unit="s"):
    if x is None or not math.isfinite(x):
        return "n/a"
    if unit == "ms":
        return f"{x * 1e3:.1f} ms"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


FC_EXPECT = {
    ("codegen", "paper_qps=4"): "neutral", ("codegen", "paper_qps=10"): "neutral",
    ("codegen", "paper_qps=16"): "large reduction", ("chat", "paper_qps=20"): "neutral",
    ("chat", "paper_qps=40"): "modestly worse", ("chat", "paper_qps=60"): "modestly worse",
    ("chat", "paper_qps=80"): None, ("reasoning", "paper_qps=0.2"): "neutral",
    ("reasoning", "paper_qps=0.7"): "large reduction",
}


def fc_verdict(expect, ttft, e2e, thr):
    """Rules: neutral = critical TTFT p99, E2E p99 and throughput within +-10%; large
    reduction = critical TTFT p99 at least 30% lower; modestly worse = critical TTFT p99
    or E2E p99 higher by more than 2% (and TTFT p99 not reduced by more than 10%)."""
    if expect is None:
        return "no published direction"
    if any(not math.isfinite(v) for v in (ttft, e2e, thr)):
        return "n/a"
    if expect == "neutral":
        ok = max(abs(ttft), abs(e2e), abs(thr)) <= 0.10
    elif expect == "large reduction":
        ok = ttft <= -0.30
    else:
        ok = max(ttft, e2e) > 0.02 and ttft > -0.10
    return "agrees" if ok else "**disagrees**"


# Findings of the investigation of each disagreement (shown only when it disagrees). The
# saturation profile quoted after each flow-control note is measured by
# saturation_profile() when the report is rendered.
NOTES = {
    ("reasoning", "paper_qps=0.7"): (
        "paper_qps 0.7 is load 0.7/0.55 = 1.27 of the measured capacity (1.06 req/s), over capacity for the "
        "whole 900 s window. Measured on seed 0 (static / soft-reflective): the KV cache is the binding "
        "resource (kv_util >= 0.8 48% / 58% of the time; the running reasoning decodes keep growing their KV "
        "after dispatch), saturation >= 1 75% / 69% of the time (profile at the end of the item), 803 / 450 "
        "preemptions, and critical requests expire at the gateway's 60 s TTL (111 / 15 of 561), which pins "
        "the critical TTFT p99 at 60 s under both (over served requests only it is 59 s / 56 s, so the "
        "censoring is not the cause). The critical class alone (0.68 req/s) is only 64% of capacity: a usage "
        "limit that holds the sheddable band completely from s >= 0.5 (`priority-holdback:cmin=0.5`, same "
        "seed) keeps s >= 1 to 2% of the time, preempts nothing and cuts the critical TTFT p99 to 5.6 s "
        "(-91%, the published figure) while 464 of 599 sheddable requests expire. The soft-reflective "
        "ceiling gates the sheddable band only on a fraction of dispatch cycles (period round(s/(1-s))), "
        "and cycles run every 1 ms against a saturation refreshed every 50 ms scrape: at s = 0.9 that is "
        "still ~5 sheddable dispatches per scrape interval, far more than the 0.68 req/s of sheddable "
        "arrivals, so it throttles them little and the KV fills as under the static limit. llm-d-router's "
        "flow controller runs its dispatch cycle the same way (a 1 ms ticker and every enqueue, the usage "
        "limit recomputed per cycle, pkg/epp/flowcontrol/controller/internal/processor.go), so the gating "
        "itself is faithful; the published -91% needs the sheddable band held back far more than that on "
        "the real cluster. One candidate is now modelled: llm-d-router's demand-driven eviction of in-flight "
        "sheddable requests while a higher band is blocked (GatewayConfig.eviction; section 9). With it on, "
        "critical TTFT p99 falls to 3.2 s (-95%) under either policy and soft-reflective equals static (-1%), "
        "so it explains the magnitude only if just the soft-reflective arm had it (whether the seed's "
        "benchmark enabled it is not known); it is off here, as in llm-d's defaults. Client timeouts that "
        "abort in-flight requests in vLLM are not modelled (the benchmark's timeouts are not known). Still "
        "open."),
    ("chat", "paper_qps=40"): (
        "paper_qps 40 and 60 map to load 40/70 = 0.57 and 60/70 = 0.86 of the simulator's measured chat "
        "capacity (78.9 req/s), i.e. 45 and 68 req/s. Measured on seed 0 under the static limit: the "
        "saturation's median is 0.15 / 0.26 (p90 0.27 / 0.42), its KV term ~0.1 / 0.2 (~39-token prompts, "
        "~300-token outputs) and its queue term small (waiting p90 1.0 / 1.5 per instance), because the "
        "running batch (median 108 / 194) stays under max_num_seqs 256; at 80 QPS the batch reaches 256, "
        "requests wait, and the median jumps to 1.85. So saturation is almost never >= 0.5, where the "
        "soft-reflective ceiling starts gating (profile at the end of the item), and the two policies take "
        "identical decisions (neutral). The published cost ('modestly worse') comes from gating in the "
        "0.5-1 band, which the real cluster reached at 40-60 QPS: here the approach to capacity is a cliff "
        "set by the batch-slot limit, there it was gradual. What made it gradual (more requests waiting "
        "before the slots ran out, slower steps at large batches than the linear step-time preset prices) is "
        "not known. The step-time model is not it: with the roofline model, which prices a decode step by "
        "its weight and KV reads, chat at paper_qps 40 and 60 is neutral too (critical TTFT p99 23 / 29 ms "
        "under both policies, seeds 0-2, `make_scenario('chat', paper_qps=P, latency_model='roofline')`, "
        "whose capacity is measured with that model). Still open."),
    ("chat", "paper_qps=60"): "See chat 40 (same mechanism).",
}
_ORACLE = (
    "`llm-d-predicted-latency` predicts each instance's TTFT with the engine's own step-time model and the "
    "exact prefix hits, so it is an upper bound on a simulation-based router; the real llm-d predictor is a "
    "model fitted to measured latencies, with errors, which leaves room for the published LMetric gains over "
    "it. Against this oracle LMetric ties or loses by a few percent, the expected result for an exact "
    "predictor. Modelling the real predictor's errors is not done here (the router runs in the compiled "
    "kernel). ")
ROUTING_NOTES = {
    "chatbot": (
        "Investigation: LMetric beats JSQ, Bailian and Dynamo on every metric (and llm-d's weighted scorers). "
        + _ORACLE + "Here the two are within 4% on every metric."),
    "agent": (
        "Investigation: " + _ORACLE + "Of the other baselines, LMetric has the lowest mean TTFT but not "
        "the lowest tails: Bailian's and AIBrix's TTFT p99 and TPOT p99 are lower. Prefix-hit ratios (column "
        "hit) and balance (imb) are the same for LMetric, Bailian and AIBrix, and no policy preempts, so "
        "neither caching nor KV pressure explains the gap. What remains is the tail under bursts (gamma "
        "arrivals, CV 1.5): with ~4k-token shared tool prompts cached everywhere, `P_i` is nearly the same on "
        "every instance during a burst and LMetric's lowest-index tie-break plus request-count `BS_i` (which "
        "ignores the running requests' context) stacks burst arrivals onto the same few instances; Bailian's "
        "token term and sampling, and AIBrix's load filter, spread them. This is a likely cause, not a "
        "verified one."),
    "coder": (
        "Investigation: " + _ORACLE + "Against the others the means agree (LMetric has the lowest mean "
        "TTFT and TPOT and beats JSQ/vLLM-DP, which thrash the 6k-20k-token code contexts: hit ratio ~0.63 vs "
        "~0.86). The misses are TPOT tails: Bailian's and Dynamo's TPOT p99 are lower. Hit ratios and "
        "balance are the same, so the tail comes from where the long cold first turns land; Dynamo's cost "
        "counts prefill *and* decode KV blocks, which keeps long prefills off instances that are already "
        "decoding long contexts."),
    "toolagent": (
        "Investigation: against the simulation-based llm-d the TTFT side agrees (LMetric's mean TTFT +10%, "
        "published ~+10%): a router that minimises predicted TTFT wins on TTFT. The TPOT side does not: the "
        "published ~-30% is the cost the real simulation-based router pays for packing decodes where TTFT is "
        "lowest. Here that cost is small for every router that keeps the sessions cached (mean TPOT 20-23 "
        "ms for LMetric, both llm-d routers, Bailian, AIBrix): on H20 with the MoE model the roofline decode "
        "step is dominated by the weights read (15.2 ms for one running request of 4k context, 18.3 ms for "
        "32, 21.4 ms for 64), and at this load an instance runs a few to a few tens of requests, so packing "
        "decodes costs little per token, and no cache-keeping router runs out of KV. " + _ORACLE.split(". ")[0] + ", and it prices "
        "each candidate's decode batch into its TTFT prediction, which also keeps it off heavy batches. "
        "Against llm-d's weighted scorers LMetric is lower on both (-22% / -8%). Against JSQ/vLLM-DP (hit "
        "0.48, heavy preemption) LMetric wins by large margins, as published."),
    "kv-hotspot": (
        "Investigation: without the detector the hot prefix concentrates (imb: the busiest instance gets "
        "2.6x the mean share; with the detector 1.2x) and its TPOT p99 is above JSQ's, which the detector "
        "restores: TPOT agrees. TTFT does not: the hot requests are cheap to serve (~24 uncached tokens "
        "behind the cached 6k prefix, ~300 output tokens) and the hot instance never runs out of KV "
        "(0 preemptions on every seed), so the concentration costs little TTFT, while JSQ, which ignores the "
        "cache, recomputes the 6k prefix on every instance and the chatbot background's histories (hit 0.71 "
        "vs 0.84) and is slower on TTFT."),
    "kv-hotspot-thinking": (
        "Investigation: this is the paper's hotspot shape, and its mechanism shows: without the detector "
        "LMetric keeps sending the thinking requests to the prefix's holders (`P_i` is ~24 tokens there, "
        "~6k elsewhere), whose KV then runs out as ~6k-token decodes grow: ~300 preemptions per run and a "
        "TPOT p99 2.6x JSQ's; the detector spreads the hot class and removes every preemption (TPOT p99 back "
        "to JSQ's). TTFT does not follow: a request arriving at the hot instance needs one new KV block "
        "behind the shared prefix and is admitted at once (the preempted ones pay in TPOT, recomputing their "
        "output), and the TTFT p99 over all requests is set by the chatbot background, where JSQ loses its "
        "cache hits. The published TTFT failure needs new hot arrivals to wait for KV on the hot instance; "
        "in vLLM a preempted request re-queues at the head of the waiting queue and, with prefix caching, "
        "re-admits with its own blocks still cached, which the simulator does not model (it recomputes the "
        "generated tokens: see the engine note in docs/results.md's summary of open items). Still open on TTFT."),
}


def saturation_profile(scenario: str, paper_qps: float, seed: int = 0, quick: bool = False) -> str:
    """Fraction of time with saturation >= 0.5 and >= 1, per policy (seed 0, 0.5 s samples)."""
    import numpy as np

    from llmsched_gym.scenarios import make_scenario

    over = {"duration_s": {"chat": 60, "codegen": 90, "reasoning": 450}[scenario]} if quick else {}
    sc = make_scenario(scenario, paper_qps=paper_qps, **over)
    parts = []
    for label, fc in (("static", "static-usage-limit"), ("soft", "soft-reflective-ceiling")):
        sim = sc.simulator(seed, flow_control=fc)
        sat, t = [], 0.0
        while sim.advance(t) != "done":
            sat.append(sim.saturation)
            t += 0.5
        sat = np.array(sat)
        parts.append(f"{label}: s >= 0.5 {np.mean(sat >= 0.5):.0%} of the time, s >= 1 {np.mean(sat >= 1):.0%}")
    return f"saturation profile ({scenario} @ {paper_qps:g}, seed {seed}): " + "; ".join(parts)


# ====================================================================== report
def fc_summary(verdicts) -> str:
    judged = [v for v in verdicts if v[1]]
    ok = [v for v in judged if v[2] == "agrees"]
    bad = [f"{name} ({exp} expected, critical TTFT p99 {_pct(t)})" for name, exp, v, t in judged if v != "agrees"]
    return (f"- flow control: {len(ok)}/{len(judged)} published directions agree ("
            + ", ".join(v[0] for v in ok) + ")" + (f"; disagree: {'; '.join(bad)}" if bad else ""))


def direction_counts(route_summary: list[str], fc_verdicts) -> str:
    """One line: how many published directions agree, partly agree, disagree."""
    import re

    n = {"agrees": 0, "partly agrees": 0, "disagrees": 0}
    for line in route_summary:
        if line.startswith("tuning"):
            for v in re.findall(r"\((agrees|\*\*disagrees\*\*)\)", line):
                n[v.strip("*")] += 1
            continue
        v = line.rsplit(": ", 1)[-1].strip("*")
        n[v if v in n else "disagrees"] += 1
    for _name, exp, v, _t in fc_verdicts:
        if exp:
            n["agrees" if v == "agrees" else "disagrees"] += 1
    total = sum(n.values())
    return (f"- published directions: {n['agrees']} of {total} agree, {n['partly agrees']} partly agree, "
            f"{n['disagrees']} disagree (each routing scenario, the load sweep, each hotspot scenario, the two "
            "tuning claims and each flow-control point with a published direction count once; section 5's "
            "admission points are not counted)")


def render(results: list, quick: bool, runtime_s: float, seeds: list[int]) -> str:
    by = {}
    for st, table, stats in results:
        by.setdefault(table.rows[0]["scenario"] if table.rows else str(st.scenario), []).append((st, table, stats))
    L = []
    L.append("# Reproduction report\n")
    L.append(f"Generated by `python benchmarks/studies/reproduce.py{' --quick' if quick else ''}` "
             f"({len(seeds)} paired seed(s) {seeds}, {runtime_s / 60:.1f} min wall on {os.cpu_count()} CPUs). "
             "Every number is the median over seeds; changes are paired by seed "
             "(`mean(policy)/mean(baseline) - 1` with a bootstrap 95% interval, see `llmsched_gym/evaluation/stats.py`). "
             "Targets: the published directions listed in each section. Raw statistics: [`figures/summary.csv`](figures/summary.csv).\n")
    if quick:
        L.append("> **Quick run**: shortened arrival windows and one seed; directions only, intervals are "
                 "not meaningful. Run without `--quick` for the full report.\n")

    # ---------------------------------------------------------------- flow control
    L.append("## 1. Flow control: soft-reflective ceiling vs static threshold 1.0\n")
    L.append("Router `llm-d` (scenario default), critical class (priority 0) unless noted; "
             "changes are soft-reflective vs static. Rule: *neutral* = critical TTFT p99, E2E p99 and "
             "throughput within ±10%; *large reduction* = critical TTFT p99 at least 30% lower; "
             "*modestly worse* = critical TTFT p99 or E2E p99 more than 2% higher.\n")
    L.append("| scenario | point | static crit TTFT p99 | soft crit TTFT p99 | Δ TTFT p99 | Δ E2E p99 | Δ throughput "
             "| sheddable Δ TTFT p99 / Δ throughput | published | simulation |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    fc_notes, fc_verdicts = [], []
    for sc in ("codegen", "chat", "reasoning"):
        for _st, table, stats in by.get(sc, []):
            if _st.title != "flow control":
                continue
            for pt in table.unique("point"):
                t = _chg(stats, sc, pt, "ttft_p99")
                e = _chg(stats, sc, pt, "e2e_p99")
                h = _chg(stats, sc, pt, "throughput_rps")
                rs = _rec(stats, sc, pt, "static", "ttft_p99", "critical")
                rf = _rec(stats, sc, pt, "soft-reflective", "ttft_p99", "critical")
                ts = _chg(stats, sc, pt, "ttft_p99", "sheddable")
                hs = _chg(stats, sc, pt, "throughput_rps", "sheddable")
                lo = _rec(stats, sc, pt, "soft-reflective", "ttft_p99", "critical")
                ci = f" [{_pct(lo['change_low'])}, {_pct(lo['change_high'])}]" if lo and lo["n"] > 1 else ""
                expect = FC_EXPECT.get((sc, pt))
                v = fc_verdict(expect, t, e, h)
                fc_verdicts.append((f"{sc} {pt.split('=')[1]}", expect, v, t))
                L.append(f"| {sc} | {pt} | {_s(rs['median'] if rs else math.nan)} | {_s(rf['median'] if rf else math.nan)} "
                         f"| {_pct(t)}{ci} | {_pct(e)} | {_pct(h)} | {_pct(ts)} / {_pct(hs)} | {expect or '-'} | {v} |")
                if "disagrees" in v and (sc, pt) in NOTES:
                    prof = saturation_profile(sc, float(pt.split("=")[1]), quick=quick)
                    fc_notes.append(f"- **{sc} {pt}**: {NOTES[(sc, pt)]} ({prof})")
                elif (sc, pt) == ("codegen", "paper_qps=16"):
                    prof = saturation_profile(sc, 16.0, quick=quick)
                    fc_notes.append(f"- **{sc} {pt}** (agrees; the mechanism for comparison): {prof}")
    L.append("")
    if fc_notes:
        L.append("Disagreements and what the investigation found (saturation profiles measured on seed 0):\n")
        L += fc_notes
        L.append("")
    for sc in ("codegen", "chat", "reasoning"):
        if by.get(sc):
            L.append(f"![{sc} change](figures/{sc}-change-vs-static.png)\n")

    # ---------------------------------------------------------------- routing
    L.append("## 2. Routing at 50% load: LMetric vs the baselines\n")
    L.append("16 x H20, Qwen3-30B-A3B, roofline step times, no gateway queue. Mean / p99 TTFT (s) and TPOT "
             "(ms); hit = token-weighted prefix-cache hit ratio; imb = busiest instance's share of requests "
             "over the mean share (1.0 = perfectly even). Published (LMetric paper): LMetric has lower mean and "
             "tail TTFT and TPOT than vLLM/JSQ, Bailian, Dynamo and llm-d on chatbot/agent/coder; on "
             "toolagent its mean TTFT may be ~10% above llm-d's while its TPOT is ~30% lower. The paper's "
             f"llm-d baseline is llm-d's *simulation-based* router (it predicts each instance's latency), "
             f"here `{LMETRIC_LLMD}`; the verdicts compare against it. `llm-d` (the weighted queue / KV / "
             "prefix scorers, the scenarios' default router) is shown too.\n")
    route_summary = []
    for sc in ROUTING_SCENARIOS:
        entry = [x for x in by.get(sc, []) if x[0].title.startswith("routing")]
        if not entry:
            continue
        st, table, stats = entry[0]
        pt = table.unique("point")[0]
        L.append(f"### {sc} ({pt}, {table.rows[0]['qps']:.1f} req/s)\n")
        L.append("| policy | TTFT mean | TTFT p99 | TPOT mean | TPOT p99 | hit | imb | LMetric better on (of 4) |")
        L.append("|---|---|---|---|---|---|---|---|")
        metrics = ("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99")
        lm = {m: _rec(stats, sc, pt, "lmetric", m, "all")["median"] for m in metrics}
        wins = {}
        for pol in table.unique("policy"):
            vals = {m: _rec(stats, sc, pt, pol, m, "all")["median"] for m in metrics}
            hit = _rec(stats, sc, pt, pol, "prefix_hit_token_ratio", "all")["median"]
            imb = sum(r["instance_imbalance"] for r in table.rows if r["policy"] == pol and r["class"] == "all") / max(
                1, len([r for r in table.rows if r["policy"] == pol and r["class"] == "all"]))
            better = "-" if pol == "lmetric" else str(sum(lm[m] < vals[m] for m in metrics))
            if pol != "lmetric":
                wins[pol] = {m: lm[m] < vals[m] for m in metrics}
            L.append(f"| {'**' + pol + '**' if pol == 'lmetric' else pol} | {_s(vals['ttft_mean'])} | {_s(vals['ttft_p99'])} "
                     f"| {_s(vals['tpot_mean'], 'ms')} | {_s(vals['tpot_p99'], 'ms')} | {hit:.3f} | {imb:.2f} | {better} |")
        L.append("")
        named = ["jsq", "bailian", "dynamo", LMETRIC_LLMD]
        if sc == "toolagent":
            ll = {m: _rec(stats, sc, pt, LMETRIC_LLMD, m, "all")["median"] for m in metrics}
            ws = {m: _rec(stats, sc, pt, "llm-d", m, "all")["median"] for m in metrics}
            dt, dp = lm["ttft_mean"] / ll["ttft_mean"] - 1, lm["tpot_mean"] / ll["tpot_mean"] - 1
            ok = dp < 0 and dt < 0.25
            v = "agrees" if ok else "**disagrees**"
            line = (f"toolagent: LMetric vs llm-d (simulation-based, {LMETRIC_LLMD}) mean TTFT {_pct(dt)}, mean TPOT "
                    f"{_pct(dp)} (published ~+10% / ~-30%; vs llm-d's weighted scorers {_pct(lm['ttft_mean'] / ws['ttft_mean'] - 1)}"
                    f" / {_pct(lm['tpot_mean'] / ws['tpot_mean'] - 1)}); LMetric better than jsq on "
                    f"{sum(wins['jsq'].values())}/4: {v}")
        else:
            n_ok = sum(all(wins[p].values()) for p in named if p in wins)
            ok = n_ok == len([p for p in named if p in wins])
            v = "agrees" if ok else ("partly agrees" if n_ok else "**disagrees**")
            lost = [f"{p} ({', '.join(m for m, w in wins[p].items() if not w)})" for p in named if p in wins and not all(wins[p].values())]
            ws = "yes" if all(wins.get("llm-d", {}).values()) else "no"
            line = (f"{sc}: LMetric lower on all four metrics than {n_ok}/{len(named)} of jsq, bailian, dynamo, "
                    f"llm-d ({LMETRIC_LLMD})" + (f"; not lower vs {'; '.join(lost)}" if lost else "")
                    + f" (vs llm-d's weighted scorers on all four: {ws}): {v}")
        route_summary.append(line)
        L.append(f"Verdict: {line}\n")
        if v != "agrees" and sc in ROUTING_NOTES:
            L.append(ROUTING_NOTES[sc] + "\n")
        L.append(f"![{sc} CDFs](figures/{sc}-ttft-tpot-cdf.png)\n")

    # ---------------------------------------------------------------- sweep
    sweep = [x for x in by.get("chatbot", []) if x[0].title == "load sweep"]
    base = [x for x in by.get("chatbot", []) if x[0].title.startswith("routing")]
    if sweep and base:
        rows = [r for r in base[0][1].rows if r["policy"] in SWEEP_ROUTERS] + sweep[0][1].rows
        rows.sort(key=lambda r: (r["qps"], SWEEP_ROUTERS.index(r["policy"]), r["seed"]))
        stats = summarize_rows(rows, ("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99"), baseline="jsq")
        from llmsched_gym.evaluation.plots import plot_load_sweep

        plot_load_sweep(stats, FIG / "chatbot-load-sweep.png", scenario="chatbot", cls="all")
        points = list(dict.fromkeys(r["point"] for r in rows))
        L.append("## 3. Load sweep (chatbot)\n")
        L.append("Mean TTFT (s) per policy and load; the last column is the spread between the worst and "
                 "the best policy (worst / best). Published: the gap between policies widens as load rises.\n")
        L.append("| load | req/s | " + " | ".join(SWEEP_ROUTERS) + " | worst / best |")
        L.append("|---|---|" + "---|" * len(SWEEP_ROUTERS) + "---|")
        spreads = []
        for pt in points:
            vals = [_rec(stats, "chatbot", pt, p, "ttft_mean", "all") for p in SWEEP_ROUTERS]
            meds = [v["median"] for v in vals if v]
            spread = max(meds) / min(meds)
            spreads.append(spread)
            L.append(f"| {pt} | {vals[0]['qps']:.1f} | " + " | ".join(_s(v['median']) for v in vals) + f" | {spread:.2f}x |")
        gaps = [(_rec(stats, "chatbot", pt, "jsq", "ttft_mean", "all")["median"]
                 - _rec(stats, "chatbot", pt, "lmetric", "ttft_mean", "all")["median"]) for pt in points]
        widen = spreads[-1] > spreads[0] and gaps[-1] > gaps[0]
        line = (f"load sweep: worst/best mean-TTFT spread {spreads[0]:.2f}x at {points[0]} -> {spreads[-1]:.2f}x at "
                f"{points[-1]}; jsq - lmetric mean TTFT {_s(gaps[0])} -> {_s(gaps[-1])}: "
                + ("agrees" if widen else "**disagrees**"))
        route_summary.append(line)
        L.append(f"\nVerdict: {line}\n")
        L.append("![chatbot load sweep](figures/chatbot-load-sweep.png)\n")

    # ---------------------------------------------------------------- hotspot
    hots = [(sc, by[sc][0]) for sc in HOTSPOT_SCENARIOS if by.get(sc)]
    if hots:
        L.append("## 4. KV-cache hotspot: LMetric with and without its detector\n")
        L.append("Chatbot background plus a 60 s burst (t = 30-90 s) of requests sharing one 6k-token prefix, a "
                 "third of the traffic while it lasts: `kv-hotspot` with short hot requests (~300 output tokens), "
                 "`kv-hotspot-thinking` with the LMetric paper's hotspot shape, *thinking* requests (~6.2k output "
                 "tokens, the reasoning seed's lengths). Published: without the detector LMetric is no better than "
                 "JSQ; the detector restores it. Judged per metric (TTFT p99, TPOT p99): *no better* = "
                 "lmetric-no-detector at least 0.9x JSQ's; *restores* = lmetric below 0.9x lmetric-no-detector's "
                 "and no worse than 1.1x JSQ's. preempt = preemptions per run (mean over seeds).\n")
    for sc, (_st, table, stats) in hots:
        pt = table.unique("point")[0]
        L.append(f"### {sc} ({pt}, {table.rows[0]['qps']:.1f} req/s)\n")
        L.append("| policy | TTFT mean | TTFT p99 | TPOT mean | TPOT p99 | hit | imb | preempt | Δ TTFT mean vs jsq |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        v = {}
        for pol in table.unique("policy"):
            g = {m: _rec(stats, sc, pt, pol, m, "all") for m in
                 ("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "prefix_hit_token_ratio")}
            v[pol] = {m: r["median"] for m, r in g.items()}
            rows = [r for r in table.rows if r["policy"] == pol and r["class"] == "all"]
            imb = sum(r["instance_imbalance"] for r in rows) / len(rows)
            pre = sum(r.get("preemptions", 0) for r in rows) / len(rows)
            L.append(f"| {pol} | {_s(v[pol]['ttft_mean'])} | {_s(v[pol]['ttft_p99'])} | {_s(v[pol]['tpot_mean'], 'ms')} "
                     f"| {_s(v[pol]['tpot_p99'], 'ms')} | {v[pol]['prefix_hit_token_ratio']:.3f} | {imb:.2f} | {pre:.0f} "
                     f"| {_pct(g['ttft_mean']['change'])} |")
        nod, det, jsq = v["lmetric-no-detector"], v["lmetric"], v["jsq"]
        parts, agree = [], []
        for m, label in (("ttft_p99", "TTFT p99"), ("tpot_p99", "TPOT p99")):
            no_better = nod[m] >= 0.9 * jsq[m]
            restores = det[m] < 0.9 * nod[m] and det[m] <= 1.1 * jsq[m]
            agree.append(no_better and restores)
            unit = "ms" if m.startswith("tpot") else "s"
            parts.append(f"{label} jsq {_s(jsq[m], unit)}, no-detector {_s(nod[m], unit)}, lmetric {_s(det[m], unit)} "
                         f"(no better than jsq: {'yes' if no_better else 'no'}; detector restores: "
                         f"{'yes' if restores else 'no'})")
        verdict = "agrees" if all(agree) else ("partly agrees" if any(agree) else "**disagrees**")
        line = f"{sc}: " + "; ".join(parts) + f": {verdict}"
        route_summary.append(line)
        L.append(f"\nVerdict: {line}\n")
        note = ROUTING_NOTES.get(sc)
        if note:
            L.append(note + "\n")
        L.append(f"![{sc} CDFs](figures/{sc}-ttft-tpot-cdf.png)\n")

    L += admission_section(by, quick)
    if TUNE_FILE.exists():
        lines, bullet = tuning_section(json.loads(TUNE_FILE.read_text()))
        L += lines
        route_summary.append(bullet)

    # ---------------------------------------------------------------- summary
    counts = direction_counts(route_summary, fc_verdicts)
    L.insert(next(i for i, x in enumerate(L) if x.startswith("## 1.")), "## Summary\n\n" + "\n".join(f"- {x}" for x in route_summary) + "\n"
             + fc_summary(fc_verdicts) + "\n" + counts + "\n")
    return "\n".join(L) + "\n"


def admission_saturation(scenario: str, load: float, admission: str, quick: bool, seed: int = 0) -> tuple[float, float]:
    """Median and maximum saturation (0.5 s samples, seed 0) without flow control."""
    import numpy as np

    from llmsched_gym.scenarios import make_scenario

    over = {"duration_s": {"chat": 60, "codegen": 90}[scenario]} if quick else {}
    sim = make_scenario(scenario, load=load, **over).simulator(seed, flow_control=None, admission=admission)
    sat, t = [], 0.0
    while sim.advance(t) != "done":
        sat.append(sim.saturation)
        t += 0.5
    return float(np.median(sat)), float(np.max(sat))


def admission_section(by: dict, quick: bool = False) -> list[str]:
    """Section 5: the probabilistic admitter vs the binary gate (legacy) at under- and mid-load."""
    runs = [(sc, st, table, stats) for sc in ("codegen", "chat") for st, table, stats in by.get(sc, [])
            if st.title == "admission"]
    if not runs:
        return []
    L = ["## 5. Admission: probabilistic admitter vs the binary gate (legacy)\n",
         "No flow control; `legacy` rejects a sheddable request iff saturation >= 1 (llm-d without flow "
         "control), `probabilistic` rejects it with probability `min(k s^power, 1)` (k 300, power 5, its own "
         "thresholds 5 and 0.8) and always admits critical requests. Loads are fractions of the measured "
         "capacity. Goodput and throughput are over all arrivals of the arrival window (a rejected request "
         "misses its SLO). Published (llm-d-router's plugin README, Qwen3-14B, mid load vs the binary gate): "
         "critical P99 TTFT -7% / -13% / -69% / -97% on four workloads, for 5-20% of aggregate throughput "
         "(8-10% typical).\n",
         "| scenario | point | saturation p50 / max, legacy vs prob. | legacy crit TTFT p99 | prob. crit TTFT p99 "
         "| Δ crit TTFT p99 | Δ crit TPOT mean | sheddable rejected | Δ aggregate goodput | Δ aggregate throughput "
         "| simulation |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for sc, _st, table, stats in runs:
        for pt in table.unique("point"):
            base = _rec(stats, sc, pt, "legacy", "ttft_p99", "critical")
            prob = _rec(stats, sc, pt, "probabilistic", "ttft_p99", "critical")
            t = _chg(stats, sc, pt, "ttft_p99", "critical", "probabilistic")
            tp = _chg(stats, sc, pt, "tpot_mean", "critical", "probabilistic")
            g = _chg(stats, sc, pt, "goodput_rps", "all", "probabilistic")
            h = _chg(stats, sc, pt, "throughput_rps", "all", "probabilistic")
            rej = _rec(stats, sc, pt, "probabilistic", "rejected", "sheddable")
            n = [r["requests"] for r in table.rows if r["policy"] == "probabilistic" and r["class"] == "sheddable"
                 and r["point"] == pt]
            share = rej["median"] / (sum(n) / len(n)) if rej and n and sum(n) else math.nan
            regime = ADM_LOADS.get(pt, "")
            if regime == "mid":
                v = "direction agrees" if t < 0 and h < 0 else "**disagrees**"
                cost = ("within" if -0.20 <= h <= -0.05 else "outside") + " the published 5-20%"
                verdicts.append(f"{sc} {pt}: critical TTFT p99 {_pct(t)} for {_pct(h)} aggregate throughput "
                                f"(cost {cost}): {v}")
            else:
                v = "(no published TTFT figure)"
            load = float(pt.split("=")[1])
            (ml, xl), (mp, xp) = (admission_saturation(sc, load, a, quick) for a in ("legacy", "probabilistic"))
            L.append(f"| {sc} | {pt} ({regime}) | {ml:.2f} / {xl:.2f} vs {mp:.2f} / {xp:.2f} | "
                     f"{_s(base['median'] if base else math.nan)} | "
                     f"{_s(prob['median'] if prob else math.nan)} | {_pct(t)} | {_pct(tp)} | {_pct(share)[1:]} | "
                     f"{_pct(g)} | {_pct(h)} | {v} |")
    L.append("")
    L += [f"- {x}" for x in verdicts]
    L.append("\nMechanism: below capacity the utilization saturation `mean(max(waiting/5, kv/0.8))` stays well "
             "under 1, so the binary gate admits everything, while it crosses the admitter's ramp (p = 1% at "
             "s = 0.13, 12% at 0.21, full shedding from 0.32): the admitter sheds sheddable requests until the "
             "saturation sits near the ramp. Fewer sheddable requests in the batches the critical ones share "
             "lowers their TPOT and queueing, at the cost of the shed requests' goodput. The published -69% / "
             "-97% points had baselines queueing for seconds (critical P99 14 s and 23 s); the legacy baseline "
             "here keeps its critical P99 under half a second up to load 0.8, so there is less to remove.\n")
    return L


# ====================================================================== tuning (section 6)
def tuning_study(trials: int, seeds: list[int], backend) -> dict:
    """Tune each of TUNE_SPACES on each of TUNE_SCENARIOS (load 0.5, mean TTFT), and measure
    untuned LMetric and the two policies' defaults on the same seeds."""
    from llmsched_gym.evaluation import evaluate
    from llmsched_gym.evaluation.tune import tune

    out = {"trials": trials, "seeds": seeds, "objective": TUNE_OBJECTIVE, "load": 0.5, "startup_trials": 10,
           "studies": []}
    start = time.perf_counter()
    for sc in TUNE_SCENARIOS:
        refs = evaluate(sc, "lmetric;" + ";".join(TUNE_SPACES), seeds, load=0.5, backend=backend)
        stats = refs.stats(metrics=("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99"))
        ref = {pol: {m: _rec(stats, sc, "load=0.5", pol, m, "all")["median"]
                     for m in ("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99")} for pol in refs.unique("policy")}
        for pol, (space, _key, _default) in TUNE_SPACES.items():
            t0 = time.perf_counter()
            with ProgressBar("tuning") as bar:
                res = tune(sc, [space], TUNE_OBJECTIVE, trials=trials, seeds=seeds, load=0.5, backend=backend,
                           startup_trials=out["startup_trials"], progress=bar)
            print(f"{sc} {pol}: best {res.best_spec} ({TUNE_OBJECTIVE} {res.best['objective']:.4g}) "
                  f"in {time.perf_counter() - t0:.0f} s")
            out["studies"].append({"scenario": sc, "policy": pol, "space": space, "qps": res.meta["qps"],
                                   "best": res.best, "trials": res.trials, "references": ref,
                                   "evaluated": res.meta["evaluated"], "wall_s": res.wall_seconds})
    out["runtime_s"] = time.perf_counter() - start
    return out


def _near(study: dict, key: str) -> tuple[float, float]:
    """The range of the parameter over the near-optimal trials (objective within NEAR of the best)."""
    best = study["best"]["objective"]
    xs = [t[key] for t in study["trials"] if t["objective"] is not None and t["objective"] <= best * (1 + NEAR)]
    return min(xs), max(xs)


def _fmt_param(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def tuning_figures(data: dict) -> list[Path]:
    """Per policy: mean TTFT over the scenario's tuned optimum against the parameter, a line per
    scenario, untuned LMetric's level dashed in the same colour."""
    from llmsched_gym.evaluation.plots import plot_objective_vs_param

    files = []
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for pol, (_space, key, default) in TUNE_SPACES.items():
        series, hlines = [], []
        for k, sc in enumerate(TUNE_SCENARIOS):
            st = next((x for x in data["studies"] if x["scenario"] == sc and x["policy"] == pol), None)
            if st is None:
                continue
            best = st["best"]["objective"]
            ok = [t for t in st["trials"] if t["objective"] is not None]
            series.append({"label": f"{sc} (best {_fmt_param(st['best'][key])})", "x": [t[key] for t in ok],
                           "y": [t["objective"] / best for t in ok], "color": colors[k]})
            hlines.append({"y": st["references"]["lmetric"]["ttft_mean"] / best, "color": colors[k],
                           "label": f"untuned lmetric ({sc})"})
        files.append(plot_objective_vs_param(
            series, FIG / f"tuning-{key.replace('.', '-')}.png", xlabel=f"{key} (default {default})",
            ylabel="mean TTFT / the scenario's tuned optimum (log)", log=pol == "aibrix", logy=True, hlines=hlines,
            title=f"{pol}: {data['trials']} TPE trials x {len(data['seeds'])} seeds per scenario, load 0.5"))
    return files


def tuning_section(data: dict) -> tuple[list[str], str]:
    """Section 6 of the report and its summary line."""
    trials, seeds = data["trials"], data["seeds"]
    L = ["## 6. Tuning: the Bailian weight and the AIBrix threshold per workload\n",
         f"Generated by `python benchmarks/studies/reproduce.py --only tuning` ({trials} trials x {len(seeds)} paired seeds "
         f"{seeds} per scenario and policy, {data['runtime_s'] / 60:.1f} min wall on {os.cpu_count()} CPUs; the "
         "same search as `llmsched-gym tune --scenario SC --load 0.5 --space SPACE --objective ttft_mean "
         f"--trials {trials} --seeds {len(seeds)}`). Objective: mean TTFT over all requests (median over the seeds), "
         f"minimized with Optuna's seeded TPE ({data['startup_trials']} random trials, then TPE; the same sampler seed, so "
         "the random candidates are the same on every workload) over `bailian:lam=0..1` (the weight "
         "of the cache term, default 0.6) and `aibrix:imbalance=1..64:log` (integers; the max-min running-request "
         f"gap above which AIBrix falls back to least-request, default 8). *Near-optimal*: the trials within "
         f"{NEAR:.0%} of the best. Untuned LMetric and the two defaults are measured on the same seeds. Published "
         "(LMetric paper): the best linear-combination weight is 0.7 on ChatBot but 0.55 on API, and the best "
         "filter threshold of an AIBrix-style router 4 on one trace and 16 on another: each workload needs its "
         "own tuning, which LMetric avoids.\n",
         "| scenario | req/s | Bailian best `lam` | near-optimal `lam` | mean TTFT tuned / `lam=0.6` | AIBrix best "
         "`imbalance` | near-optimal `imbalance` | mean TTFT tuned / `imbalance=8` | untuned LMetric | Δ LMetric vs "
         "tuned Bailian | Δ LMetric vs tuned AIBrix |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    ranges = {pol: {} for pol in TUNE_SPACES}
    gaps = []
    for sc in TUNE_SCENARIOS:
        st = {pol: next((x for x in data["studies"] if x["scenario"] == sc and x["policy"] == pol), None)
              for pol in TUNE_SPACES}
        if not all(st.values()):
            continue
        lm = st["bailian"]["references"]["lmetric"]["ttft_mean"]
        cells = [sc, f"{st['bailian']['qps']:.1f}"]
        vs = []
        for pol, (_space, key, _default) in TUNE_SPACES.items():
            x = st[pol]
            lo, hi = _near(x, key)
            ranges[pol][sc] = (lo, hi)
            best = x["best"]["objective"]
            cells += [f"**{_fmt_param(x['best'][key])}**", _fmt_param(lo) if lo == hi else f"{_fmt_param(lo)}-{_fmt_param(hi)}",
                      f"{_s(best)} / {_s(x['references'][pol]['ttft_mean'])}"]
            vs.append(lm / best - 1)
        gaps.append((sc, vs))
        cells += [_s(lm)] + [_pct(v) for v in vs]
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    verdicts, short = [], []
    for pol, (_space, key, _default) in TUNE_SPACES.items():
        r = ranges[pol]
        pairs = [(a, b) for i, a in enumerate(r) for b in list(r)[i + 1:]]
        apart = [(a, b) for a, b in pairs if r[a][1] < r[b][0] or r[b][1] < r[a][0]]
        bests = " / ".join(_fmt_param(next(x for x in data["studies"] if x["scenario"] == sc and x["policy"] == pol)
                                      ["best"][key]) for sc in r)
        head = f"{pol} `{key.split('.')[1]}` best {bests} ({' / '.join(r)})"
        if apart:
            v = (f"{head}; the near-optimal ranges of " + ", ".join(f"{a} and {b}" for a, b in apart)
                 + " do not overlap: the optimum moves between workloads (agrees)")
            short.append(f"{head}: moves (agrees)")
        else:
            v = (f"{head}; the near-optimal ranges all overlap, so the best values differ by less than the "
                 "objective's flatness near its optimum: the optimum does not measurably move (**disagrees**)")
            short.append(f"{head}: does not measurably move (**disagrees**)")
        verdicts.append(v)
    lm_line = "untuned LMetric's mean TTFT vs the tuned optima: " + "; ".join(
        f"{sc} {_pct(b)} vs Bailian, {_pct(a)} vs AIBrix" for sc, (b, a) in gaps)
    L += [f"- {v}" for v in verdicts] + [f"- {lm_line}", ""]
    rates = tuple(round(st["qps"], 1) for st in data["studies"] if st["policy"] == "bailian")
    if (trials, len(seeds)) == (20, 2) and rates == TUNING_NOTE_RATES:  # the run the note was written from
        L += [TUNING_NOTE + "\n"]
    for pol, (_space, key, _default) in TUNE_SPACES.items():
        L.append(f"![{pol} tuning](figures/tuning-{key.replace('.', '-')}.png)\n")
    bullet = "tuning at load 0.5 (mean TTFT): " + "; ".join(short) + "; " + lm_line
    return L, bullet


def splice_section(text: str, lines: list[str], bullet: str) -> str:
    """``text`` (a rendered report) with section 6 and its summary line replaced (or added)."""
    section = "\n".join(lines) + "\n"
    start = text.find("## 6. ")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[nxt + 1:] if nxt >= 0 else "")
    out, in_summary, placed = [], False, False
    for line in text.split("\n"):
        if line.startswith("## "):
            if in_summary and not placed:
                while out and out[-1] == "":
                    out.pop()
                out += [f"- {bullet}", ""]
                placed = True
            in_summary = line.startswith("## Summary")
        if in_summary and line.startswith("- tuning"):
            if placed:
                continue  # an older duplicate of the bullet
            line, placed = f"- {bullet}", True
        out.append(line)
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, shortened windows (a few minutes)")
    ap.add_argument("--seeds", type=int, help="paired seeds (default 3, quick 1)")
    ap.add_argument("--workers", type=int, help="processes (default: CPU count; with --backend ray, its CPUs)")
    add_backend_args(ap)
    ap.add_argument("--render-only", action="store_true", help="rebuild the report from results/reproduce/rows.json")
    ap.add_argument("--out", default=str(DOCS / "results.md"))
    ap.add_argument("--only", choices=["tuning"], help="run only this study and replace its section in --out")
    ap.add_argument("--tune-trials", type=int, default=20, help="trials per scenario and policy (default 20)")
    ap.add_argument("--tune-seeds", type=int, default=2, help="paired seeds of the tuning study (default 2)")
    args = ap.parse_args(argv)
    if args.only == "tuning":
        if args.render_only:  # section 6 again from docs/figures/tuning.json
            data = json.loads(TUNE_FILE.read_text())
        else:
            backend = backend_from_args(args)
            try:
                data = tuning_study(args.tune_trials, list(range(args.tune_seeds)), backend)
            finally:
                backend.close()
            FIG.mkdir(parents=True, exist_ok=True)
            TUNE_FILE.write_text(json.dumps(data, indent=1, default=lambda o: None if o != o else float(o)))
        tuning_figures(data)
        lines, bullet = tuning_section(data)
        out = Path(args.out)
        out.write_text(splice_section(out.read_text() if out.exists() else "", lines, bullet))
        print(f"wrote {out} (section 6)" + ("" if args.render_only else f", {TUNE_FILE}") + " and the tuning figures "
              f"(a {data['runtime_s'] / 60:.1f} min study)")
        return 0
    sts = studies(args.quick)
    raw = RAW / ("rows-quick.json" if args.quick else "rows.json")
    if args.render_only:
        data = json.loads(raw.read_text())
        seeds, runtime, results = data["seeds"], data["runtime_s"], []
        for st, rows in zip(sts, data["tables"]):
            import numpy as np

            table = ResultTable(rows, {tuple(k.split("|")): {kk: np.asarray(vv, float) for kk, vv in v.items()}
                                       for k, v in data["samples"].items()
                                       if k.split("|")[0] == rows[0]["scenario"]}, {"seeds": seeds})
            results.append((st, table, table.stats(baseline=st.baseline)))
    else:
        seeds = list(range(args.seeds or (1 if args.quick else 3)))
        backend = backend_from_args(args)
        start = time.perf_counter()
        try:
            with ProgressBar("simulating") as bar:
                results = run_studies(sts, seeds, progress=bar, backend=backend)
        finally:
            backend.close()
        runtime = time.perf_counter() - start
        RAW.mkdir(parents=True, exist_ok=True)
        samples = {}
        for _, table, _ in results:
            for k, v in table.samples.items():
                samples["|".join(k)] = {kk: [float(x) for x in vv] for kk, vv in v.items()}
        raw.write_text(json.dumps({"seeds": seeds, "runtime_s": runtime, "tables": [t.rows for _, t, _ in results],
                                   "samples": samples}, default=lambda o: None if o != o else float(o)))
    FIG.mkdir(parents=True, exist_ok=True)
    all_stats = []
    for st, table, stats in results:
        all_stats += stats
        if st.title == "load sweep":
            continue
        name = table.rows[0]["scenario"] if table.rows else str(st.scenario)
        make_figures(st, table, stats, FIG, prefix=f"{name}-admission" if st.title == "admission" else None)
    if TUNE_FILE.exists():
        tuning_figures(json.loads(TUNE_FILE.read_text()))
    ResultTable(all_stats).to_csv(FIG / "summary.csv")
    text = render(results, args.quick, runtime, seeds)
    old = Path(args.out).read_text() if Path(args.out).exists() else ""
    if "\n## 7. " in old:  # section 7 is benchmarks/studies/autoscaling.py's (--report): keep it
        text = text.rstrip("\n") + "\n" + old[old.find("\n## 7. "):]
    Path(args.out).write_text(text)
    print(f"wrote {args.out} and {FIG}/ ({runtime / 60:.1f} min of simulation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
