"""Routers and flow-control policies under faults inside the cluster (docs/results.md,
"Faults inside the cluster").

    python benchmarks/studies/faults.py [--seeds 2] [--duration 60] [--workers 2]

On ``chatbot`` (load 0.5) and ``codegen`` (paper_qps 16), each router family with no gateway
queue (round-robin, jsq, llm-d, lmetric), each flow-control policy with the scenario's router
(static-usage-limit, soft-reflective-ceiling, with llm-d) and the static usage limit with
LMetric run under each fault condition, on the same requests per seed:

* ``none``: no fault;
* ``outage``: every instance's scrapes fail from 20 s for 15 s (llm-d's default
  ``stalenessPolicy: saturated``: a stale endpoint scores 1.0);
* ``outage+ignore``: the same outage with ``stalenessPolicy: ignore`` (flow-control rows
  only: without a gateway queue the detector is not read and the run is the same);
* ``crash``: instance 0 crashes at 20 s and restarts 15 s later; what it held is re-sent
  once with its prefill redone;
* ``straggler``: instance 0's iterations take 4 times their step time from 20 s for 30 s.

Prints a markdown table of the mean over seeds (all requests of every class): SLO
attainment (a request that is rejected, expired, crashed or unfinished misses), goodput
over the arrival window, TTFT p99 and mean (censored at their wait for requests that never
got a first token), E2E p99, and the requests that expired, crashed or were re-sent.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from llmsched_gym import make_scenario
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.simulator import compile_kernels

SCENARIOS = {"chatbot": {"load": 0.5}, "codegen": {"paper_qps": 16}}
#: label -> the gateway's policies (None: the scenario's); router families with no gateway
#: queue, then flow control with the scenario's router (llm-d, which scores scraped metrics)
#: and with LMetric (which scores the gateway's own counters).
POLICIES = {"round-robin": {"router": "round-robin", "flow_control": None},
            "jsq": {"router": "jsq", "flow_control": None},
            "llm-d": {"router": "llm-d", "flow_control": None},
            "lmetric": {"router": "lmetric", "flow_control": None},
            "static-usage-limit": {"flow_control": "static-usage-limit"},
            "soft-reflective-ceiling": {"flow_control": "soft-reflective-ceiling"},
            "static-usage-limit + lmetric": {"flow_control": "static-usage-limit", "router": "lmetric"}}
CONDITIONS = {
    "none": ({}, "saturated"),
    "outage": ({"scrape_outages": [{"instance": "all", "at_s": 20.0, "duration_s": 15.0}]}, "saturated"),
    "outage+ignore": ({"scrape_outages": [{"instance": "all", "at_s": 20.0, "duration_s": 15.0}]}, "ignore"),
    "crash": ({"crashes": [{"instance": 0, "at_s": 20.0, "restart_s": 15.0}], "on_crash": "retry",
               "max_retries": 1}, "saturated"),
    "straggler": ({"stragglers": [{"instance": 0, "at_s": 20.0, "duration_s": 30.0, "factor": 4.0}]}, "saturated"),
}


def cells(duration: float, seeds: int) -> list[tuple]:
    out = []
    for scenario in SCENARIOS:
        for label, pol in POLICIES.items():
            for cond in CONDITIONS:
                if cond == "outage+ignore" and pol["flow_control"] is None:
                    continue
                out.extend((scenario, label, cond, duration, seed) for seed in range(seeds))
    return out


def run(cell: tuple) -> dict:
    scenario, label, cond, duration, seed = cell
    faults, staleness = CONDITIONS[cond]
    sc = make_scenario(scenario, **SCENARIOS[scenario], duration_s=duration, faults=faults or None,
                       staleness_policy=staleness)
    s = summarize(sc.simulator(seed, **POLICIES[label]).run())
    a = s["classes"]["all"]
    return {"slo": a["slo_attainment"], "goodput": a["goodput_rps"], "ttft_p99": a["ttft_p99"],
            "ttft_mean": a["ttft_mean"], "e2e_p99": a["e2e_p99"], "expired": a["expired"] + a["rejected"],
            "crashed": a["crashed"], "retries": a["retries"], "requests": a["requests"]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--duration", type=float, default=60.0, help="arrival window, seconds (faults start at 20 s)")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    t0 = time.time()
    compile_kernels()
    todo = cells(args.duration, args.seeds)
    with ProcessPoolExecutor(args.workers, initializer=compile_kernels) as pool:
        results = list(pool.map(run, todo, chunksize=2))
    groups: dict[tuple, list[dict]] = {}
    for cell, r in zip(todo, results):
        groups.setdefault(cell[:3], []).append(r)
    print("| scenario | policy | fault | SLO attainment | goodput (req/s) | TTFT p99 (s) | TTFT mean (s) "
          "| E2E p99 (s) | expired+rejected | crashed | re-sent | requests |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (scenario, label, cond), rows in groups.items():
        m = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
        name = label if POLICIES[label]["flow_control"] is None else f"{label} (flow control)"
        rate = ", ".join(f"{k}={v:g}" for k, v in SCENARIOS[scenario].items())
        print(f"| {scenario} ({rate}) | {name} | {cond} | {m['slo']:.3f} | {m['goodput']:.2f} | {m['ttft_p99']:.2f} "
              f"| {m['ttft_mean']:.3f} | {m['e2e_p99']:.1f} | {m['expired']:.0f} | {m['crashed']:.0f} "
              f"| {m['retries']:.0f} | {m['requests']:.0f} |", flush=True)
    print(f"\n{args.seeds} seeds, {args.duration:g} s arrival window, {time.time() - t0:.0f} s wall")


if __name__ == "__main__":
    main()
