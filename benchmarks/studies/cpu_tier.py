"""The CPU KV tier on the Mooncake conversation trace (docs/results.md, "CPU KV tier").

    python benchmarks/studies/cpu_tier.py [--scenario mooncake-conversation] [--sizes 0,16,64,256,1024]
                                  [--shared-sizes 64,256] [--router llm-d] [--seed 0]

Replays the trace at its own rate on the scenario's cluster (4 x H100, Qwen3-14B) once
per CPU tier size (GB per instance; 0 = none), once per shared tier size (one store for the
cluster, the same GB per instance pooled), once with the largest tier hidden from the
router (``cpu_kv_events=False``: the precise prefix views see the GPU caches only), and
once with unlimited GPU KV (the most a per-instance cache can hit), and prints a markdown
table: token-weighted prefix-hit
ratio, the share loaded from the CPU tier, TTFT mean / p50 / p99, preemptions.
"""

from __future__ import annotations

import argparse

import numpy as np

from llmsched_gym import make_scenario
from llmsched_gym.evaluation.metrics import summarize


def run(scenario: str, router: str, seed: int, **cluster) -> dict:
    sim = make_scenario(scenario, **cluster).simulator(seed, router=router).run()
    s = summarize(sim)
    t = sim.table
    inp = t.input[t.scheduled_once].sum()
    a = s["classes"]["all"]
    return {"hit": s["prefix_hit_token_ratio"], "cpu": float(t.cpu_hit.sum() / inp) if inp else 0.0,
            "ttft_mean": a["ttft_mean"], "ttft_p50": a["ttft_p50"], "ttft_p99": a["ttft_p99"],
            "preemptions": s["preemptions"], "requests": a["requests"]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="mooncake-conversation")
    p.add_argument("--sizes", default="0,16,64,256,1024", help="CPU tier GB per instance, comma-separated")
    p.add_argument("--shared-sizes", default="64,256", help="shared tier GB per instance (pooled), comma-separated")
    p.add_argument("--router", default="llm-d")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rows = [(f"{gb:g} GB CPU tier" if gb else "GPU only", run(args.scenario, args.router, args.seed, cpu_kv_gb=gb))
            for gb in (float(x) for x in args.sizes.split(","))]
    for gb in (float(x) for x in args.shared_sizes.split(",") if x):
        rows.append((f"{gb:g} GB x {make_scenario(args.scenario).cluster.instances} shared",
                     run(args.scenario, args.router, args.seed, cpu_kv_gb=gb, cpu_kv_shared=True)))
    top = max(float(x) for x in args.sizes.split(","))
    rows.append((f"{top:g} GB, no KV events", run(args.scenario, args.router, args.seed, cpu_kv_gb=top,
                                                    cpu_kv_events=False)))
    rows.append(("unlimited GPU KV", run(args.scenario, args.router, args.seed, kv_blocks="unlimited")))
    print(f"{args.scenario}, router {args.router}, seed {args.seed}, {rows[0][1]['requests']} requests\n")
    print("| configuration | prefix-hit ratio | from CPU tier | TTFT mean (s) | p50 (s) | p99 (s) | preemptions |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['hit']:.3f} | {r['cpu']:.3f} | {r['ttft_mean']:.3f} | {r['ttft_p50']:.3f} | "
              f"{r['ttft_p99']:.2f} | {r['preemptions']} |")
    assert np.isfinite([r["ttft_mean"] for _, r in rows]).all()


if __name__ == "__main__":
    main()
