"""llm-d's demand-driven in-flight eviction at the flow-control points (docs/results.md,
"Demand-driven eviction").

    python benchmarks/studies/eviction.py [--points 'reasoning:0.2,reasoning:0.7,codegen:16,chat:60'] [--seeds 3]

Runs the static usage limit (threshold 1.0) and the soft-reflective ceiling at each
``scenario:paper_qps`` point, each with eviction off and on (``GatewayConfig.eviction``,
llm-d's defaults: at most 2 revocations per decision, 0.5 s confirmation grace), on the
same requests per seed, and prints a markdown table of the mean over seeds: the critical
class's TTFT p99 and mean (censored at their wait for requests that never got a first
token) and mean E2E, SLO attainment of the critical and sheddable classes and of all
requests (a rejected, expired or evicted request misses), throughput over the arrival
window, and the sheddable requests that expired or were evicted.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmsched_gym import make_scenario
from llmsched_gym.evaluation.metrics import summarize

POLICIES = {"static": "static-usage-limit:threshold=1.0", "soft-reflective": "soft-reflective-ceiling"}


def run(scenario: str, paper_qps: float, policy: str, eviction: bool, seed: int) -> dict:
    sc = make_scenario(scenario, paper_qps=paper_qps, eviction=eviction)
    c = summarize(sc.simulator(seed, flow_control=POLICIES[policy]).run())["classes"]
    crit, shed, a = c["critical"], c["sheddable"], c["all"]
    return {"ttft_p99": crit["ttft_p99"], "ttft_mean": crit["ttft_mean"], "e2e_mean": crit["e2e_mean"],
            "slo_crit": crit["slo_attainment"], "slo_shed": shed["slo_attainment"], "slo_all": a["slo_attainment"],
            "thr": a["throughput_rps"], "shed_expired": shed["expired"], "shed_evicted": shed["evicted"],
            "shed_requests": shed["requests"]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", default="reasoning:0.2,reasoning:0.7,codegen:16,chat:60",
                   help="comma-separated scenario:paper_qps points")
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args(argv)
    t0 = time.time()
    print("| point | flow control | eviction | critical TTFT p99 (s) | critical TTFT mean (s) | critical E2E mean (s) "
          "| SLO critical / sheddable / all | throughput (req/s) | sheddable expired / evicted (of) |")
    print("|---|---|---|---:|---:|---:|---|---:|---|")
    for point in args.points.split(","):
        scenario, qps = point.split(":")
        for policy in POLICIES:
            for eviction in (False, True):
                rows = [run(scenario, float(qps), policy, eviction, s) for s in range(args.seeds)]
                m = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
                print(f"| {scenario} @ {qps} | {policy} | {'on' if eviction else 'off'} | {m['ttft_p99']:.2f} "
                      f"| {m['ttft_mean']:.3f} | {m['e2e_mean']:.1f} | {m['slo_crit']:.3f} / {m['slo_shed']:.3f} / "
                      f"{m['slo_all']:.3f} | {m['thr']:.3f} | {m['shed_expired']:.0f} / {m['shed_evicted']:.0f} "
                      f"({m['shed_requests']:.0f}) |", flush=True)
    print(f"\n{args.seeds} seeds, {time.time() - t0:.0f} s wall")


if __name__ == "__main__":
    main()
