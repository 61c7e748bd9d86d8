"""What the FlowControl reward asks for: constant soft-reflective parameters at codegen 16 (docs/agents.md).

    python benchmarks/studies/fc_landscape.py [--seeds 100,101,102,103,104] [--weights 30,60,100,150,200] [--duration 60]

Runs the compiled ``soft-reflective-ceiling:ramp=R,period_scale=P`` over a grid of constant
(ramp, period scale), the parameters the residual FlowControl agent adjusts, on the full
codegen scenario at paper_qps 16. For each it prints the critical TTFT p99 and the sheddable
goodput and SLO attainment (the must-show's metrics), and the ``ttft`` reward's episode cost
at each critical weight ``w`` (sheddable weight 1) relative to the published parameters
(ramp 1, period scale 1):

    cost = sum over classes of  w_class * (requests * ttft_mean + 60 s * unserved)

``ttft_mean`` counts a request that left unserved at its wait, and 60 s is the
environment's unserved penalty for codegen (its default: the gateway TTL). The grid point with the lowest
cost at a weight is the best *constant* action a policy trained on that reward can find.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from llmsched_gym.envs.core import make_setup
from llmsched_gym.evaluation.harness import evaluate

RAMPS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
PERIOD_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
PUBLISHED = (1.0, 1.0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="100,101,102,103,104")
    p.add_argument("--weights", default="30,60,100,150,200", help="critical priority weights to price")
    p.add_argument("--paper-qps", type=float, default=16.0)
    p.add_argument("--duration", type=float, help="arrival window (s); default the scenario's 180 s")
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    weights = [float(w) for w in a.weights.split(",")]
    grid = list(itertools.product(RAMPS, PERIOD_SCALES))
    label = {f"sr-{r:g}-{s:g}": (r, s) for r, s in grid}
    pols = [f"fc=soft-reflective-ceiling:ramp={r:g},period_scale={s:g}+label={k}" for k, (r, s) in label.items()]
    table = evaluate("codegen", pols, seeds, paper_qps=a.paper_qps, workers=a.workers,
                     overrides={"duration_s": a.duration} if a.duration else None)
    rows = {(r["policy"], r["seed"], r["class"]): r for r in table.rows}
    penalty = make_setup("flow_control", scenario="codegen", paper_qps=a.paper_qps).unserved_penalty_s

    def mean(k, cls, m):
        return float(np.mean([rows[(k, s, cls)][m] for s in seeds]))

    def cost(k, w):
        per_seed = []
        for s in seeds:
            c = 0.0
            for cls, wc in (("critical", w), ("sheddable", 1.0)):
                r = rows[(k, s, cls)]
                unserved = r["rejected"] + r["expired"] + r["dropped"] + r["evicted"]
                c += wc * (r["requests"] * r["ttft_mean"] + penalty * unserved)
            per_seed.append(c)
        return float(np.mean(per_seed))

    ref = next(k for k, v in label.items() if v == PUBLISHED)
    print(f"codegen paper_qps {a.paper_qps:g}, {a.duration or 180:g} s arrivals, seeds {seeds}, "
          f"{table.meta['wall_seconds']:.0f} s; "
          f"cost relative to ramp 1, period scale 1")
    head = " | ".join(f"cost w={w:g}" for w in weights)
    print(f"| ramp | period scale | critical TTFT p99 (ms) | sheddable goodput | sheddable SLO att. | {head} |")
    print("|" + "---:|" * (5 + len(weights)))
    order = sorted(label, key=lambda k: mean(k, "critical", "ttft_p99"))
    for k in order:
        r, s = label[k]
        rel = " | ".join(f"{cost(k, w) / cost(ref, w):.3f}" for w in weights)
        print(f"| {r:g} | {s:g} | {mean(k, 'critical', 'ttft_p99') * 1e3:.0f} | {mean(k, 'sheddable', 'goodput_rps'):.2f} "
              f"| {mean(k, 'sheddable', 'slo_attainment'):.3f} | {rel} |")
    for w in weights:
        best = min(label, key=lambda k: cost(k, w))
        r, s = label[best]
        print(f"w={w:g}: lowest cost at ramp {r:g}, period scale {s:g} ({cost(best, w) / cost(ref, w):.3f} of the "
              f"published parameters'), critical TTFT p99 {mean(best, 'critical', 'ttft_p99') * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
