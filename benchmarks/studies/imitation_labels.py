"""Labels per second of the lookahead planner, two ways, on the same decisions.

* Simulator path: ``gateway=lookahead`` (``baselines/lookahead.py``) runs one episode per
  workload seed, one cluster at a time; its rate is decisions over the seconds spent planning.
* Batched labeller (``agents/imitation/labeller.py``): Routing-v0's native vector env with one
  cluster per seed, the teacher acting; every step labels every cluster in one batched call.
  The labels are the planner's own decisions (``tests/test_imitation.py`` checks that the
  two routes agree request for request), so both ways label the same states.

    python benchmarks/studies/imitation_labels.py --row routing-agent --seeds 0,1,2,3 --horizon 2
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import llmsched_gym as g
from agents.imitation.collect import rollout
from agents.imitation.labeller import RoutingLabeller
from benchmarks.studies.headroom import ROWS
from llmsched_gym.gateway.policy import make_policy


def teacher_spec(row, mode: str, base: str) -> str:
    """The headroom row's planner spec (its mpc samples) on ``base``."""
    return f"lookahead:{row.planner},mode={mode},base={base}" + (f",samples={row.samples}" if mode == "mpc" else "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", default="routing-mixed-chatbot", help="a routing row of benchmarks/studies/headroom.py")
    ap.add_argument("--base", default=None, help="the planner's base heuristic (default: the row's best in "
                                                 "docs/results.md section 11)")
    ap.add_argument("--mode", default="mpc", choices=("mpc", "oracle"))
    ap.add_argument("--seeds", default="0,1,2,3", help="training workload seeds (agents/declared_seeds.yaml: 0-99)")
    ap.add_argument("--horizon", type=float, default=None, help="simulated seconds (default: the row's)")
    args = ap.parse_args(argv)
    row = ROWS[args.row]
    base = args.base or {"chatbot": "llm-d-predicted-latency", "agent": "preble",
                         "mixed-chatbot": "llm-d-predicted-latency"}[row.scenario]
    spec = teacher_spec(row, args.mode, base)
    seeds = [int(s) for s in args.seeds.split(",")]
    sc = g.make_scenario(row.scenario, **row.kw)
    sc.horizon_s = horizon = row.horizon_s if args.horizon is None else args.horizon
    decisions, plan_s = 0, 0.0
    t0 = time.perf_counter()
    for seed in seeds:
        planner = make_policy(spec, "gateway")
        planner.run(sc, seed)
        decisions, plan_s = decisions + planner.decisions, plan_s + planner.plan_seconds
    sim_wall = time.perf_counter() - t0
    print(f"{args.row} {spec} seeds {args.seeds}, {horizon:g} s")
    print(f"| Simulator path | {decisions} decisions | {decisions / plan_s:.1f} labels/s planning | "
          f"{sim_wall:.0f} s wall |", flush=True)
    vec = gym.make_vec("llmsched/Routing-v0", num_envs=len(seeds), scenario=row.scenario, **row.kw,
                       horizon=horizon).unwrapped
    labeller = RoutingLabeller(spec, vec)
    t0 = time.perf_counter()
    data = rollout(labeller, seeds)
    vec_wall = time.perf_counter() - t0
    print(f"| batched labeller ({len(seeds)} clusters) | {len(data)} labels | "
          f"{labeller.labels / labeller.seconds:.1f} labels/s labelling | {vec_wall:.0f} s wall |")


if __name__ == "__main__":
    main()
