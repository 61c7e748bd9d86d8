"""Headroom: how much a lookahead oracle on forked clusters gains over a heuristic.

Each row runs a heuristic and the ``lookahead`` planner (``baselines/lookahead.py``, oracle
mode: its copies see the true future arrivals, so it is a bound, not a deployable policy)
on the same seeds, and reports the environment's own cost (``envs.core.episode_cost``: the
Routing or FlowControl environment's priority-weighted TTFT with the unserved penalty), the
row's metric, their paired changes with 95% bootstrap intervals, and the planner's
decisions per second.

    python benchmarks/studies/headroom.py                       # every row, seeds 100-104
    python benchmarks/studies/headroom.py --rows flow-codegen16 --seeds 100,101 --horizon 60
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import llmsched_gym as g
from llmsched_gym.envs.core import episode_cost, make_setup
from llmsched_gym.evaluation.stats import paired_change
from llmsched_gym.gateway.policy import make_policy

#: name: (scenario, its keywords, env kind, heuristic as simulator keywords, planner spec, metric)
ROWS = {
    "routing-chatbot": ("chatbot", {}, "routing", {"router": "lmetric-no-detector"},
                        "lookahead:horizon_s=1,base=lmetric-no-detector", "ttft_mean"),
    "routing-codegen12": ("codegen", {"qps": 12}, "routing", {"router": "lmetric-no-detector"},
                          "lookahead:horizon_s=1,base=lmetric-no-detector", "ttft_mean"),
    "flow-codegen16": ("codegen", {"paper_qps": 16}, "flow_control", {"flow_control": "soft-reflective-ceiling"},
                       "lookahead:decision=flow,horizon_s=3,interval_s=1", "critical_ttft_p99"),
}


def metric(sim, name: str) -> float:
    t = sim.table
    ttft = t.first_token_t - t.arrival
    if name == "ttft_mean":
        return float(np.nanmean(ttft))
    critical = t.priority == 0
    return float(np.nanpercentile(ttft[critical], 99))


def run_row(name: str, seeds: list[int], horizon_s: float | None) -> dict:
    scenario_name, kw, kind, heuristic, spec, metric_name = ROWS[name]
    sc = g.make_scenario(scenario_name, **kw)
    if horizon_s is not None:
        sc.horizon_s = horizon_s
    setup = make_setup(kind, scenario=sc)
    out = {"cost": ([], []), metric_name: ([], []), "decisions": 0, "plan_s": 0.0}
    for seed in seeds:
        base = sc.simulator(seed, **heuristic).run()
        planner = make_policy(spec, "gateway")
        oracle = planner.run(sc, seed)
        for key, fn in (("cost", lambda s: episode_cost(s, setup)), (metric_name, lambda s: metric(s, metric_name))):
            out[key][0].append(fn(base))
            out[key][1].append(fn(oracle))
        out["decisions"] += planner.decisions
        out["plan_s"] += planner.plan_seconds
        print(f"  {name} seed {seed}: cost {out['cost'][0][-1]:.2f} -> {out['cost'][1][-1]:.2f}, {metric_name} "
              f"{out[metric_name][0][-1]:.4f} -> {out[metric_name][1][-1]:.4f}", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated: " + ", ".join(ROWS))
    ap.add_argument("--seeds", default="100,101,102,103,104")
    ap.add_argument("--horizon", type=float, default=None, help="simulated seconds (default: the scenario's)")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{'row':<20} {'metric':<18} {'heuristic':>10} {'oracle':>10} {'change [95% CI]':>28} {'dec/s':>8}")
    for name in args.rows.split(","):
        start = time.perf_counter()
        res = run_row(name, seeds, args.horizon)
        for key in ("cost", ROWS[name][5]):
            base, orc = res[key]
            point, lo, hi = paired_change(orc, base)
            print(f"{name:<20} {key:<18} {np.mean(base):>10.4f} {np.mean(orc):>10.4f} "
                  f"{point:>+9.1%} [{lo:+.1%}, {hi:+.1%}]   {res['decisions'] / max(res['plan_s'], 1e-9):>8.1f}")
        print(f"  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
