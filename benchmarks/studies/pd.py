"""Prefill/decode disaggregation against aggregated serving (docs/results.md,
"Prefill/decode disaggregation").

    python benchmarks/studies/pd.py [--scenario pd-longprompt] [--qps 2,8] [--seeds 3] [--router llm-d]
                            [--policies 'pd-aggregated;pd-always;pd-llmd:threshold=4000;pd-dynamo']

Runs each P/D decision on the scenario's cluster (pd-longprompt: 2 prefill + 2 decode x
H100; ``pd-aggregated`` serves whole requests on the same 4 GPUs) at each request rate
and seed (the same requests for every policy), and prints a markdown table of the mean
over seeds: TTFT mean / p99, TPOT mean / p99 (per request, ``(finish - first token) /
(output - 1)``), output tokens per second over the makespan (first arrival to last
finish), and the share of requests disaggregated.
"""

from __future__ import annotations

import argparse

import numpy as np

from llmsched_gym import make_scenario
from llmsched_gym.evaluation.metrics import summarize


def run(scenario: str, qps: float, pd: str, router: str, seed: int) -> dict:
    sc = make_scenario(scenario, qps=qps)
    sim = sc.simulator(seed, router=router, pd=pd).run()
    a = summarize(sim)["classes"]["all"]
    t = sim.table
    fin = t.outcome == 1
    makespan = float(np.nanmax(t.finish_t[fin]) - t.arrival.min())
    return {"ttft_mean": a["ttft_mean"], "ttft_p99": a["ttft_p99"], "tpot_mean": a["tpot_mean"],
            "tpot_p99": a["tpot_p99"], "tok_s": float(t.output[fin].sum() / makespan),
            "disagg": float((t.decode_instance >= 0).mean()), "finished": int(fin.sum()), "requests": len(t.outcome)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="pd-longprompt")
    p.add_argument("--qps", default="2,8", help="request rates, comma-separated")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--router", default="llm-d")
    p.add_argument("--policies", default="pd-aggregated;pd-always;pd-llmd:threshold=4000;pd-dynamo",
                   help="';'-separated P/D decisions")
    args = p.parse_args(argv)
    print("| req/s | P/D decision | TTFT mean (s) | TTFT p99 (s) | TPOT mean (ms) | TPOT p99 (ms) | output tok/s "
          "| disaggregated |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for qps in [float(q) for q in args.qps.split(",")]:
        for pd in args.policies.split(";"):
            rows = [run(args.scenario, qps, pd, args.router, seed) for seed in range(args.seeds)]
            m = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
            assert all(r["finished"] == r["requests"] for r in rows), "a request did not finish"
            print(f"| {qps:g} | {pd} | {m['ttft_mean']:.3f} | {m['ttft_p99']:.3f} | {m['tpot_mean'] * 1e3:.1f} "
                  f"| {m['tpot_p99'] * 1e3:.1f} | {m['tok_s']:,.0f} | {m['disagg']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
