"""Hard labels or soft targets: refit an imitation run's scorer on its own labelled states
(``labels.npz``) with each target and compare them on training seeds the run did not use.

Every fit starts from the same initial network and sees the same rows; the comparison is
the held-out accuracy and the environment's cost on ``--seeds`` (declared training seeds
0-99 that the run did not label), paired against the teacher's base heuristic.

    python benchmarks/studies/imitation_targets.py --run runs/imit-chatbot-oracle --row routing-chatbot
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
from headroom import ROWS

import llmsched_gym as g
from agents.imitation.collect import Dataset
from agents.imitation.fit import accuracy, fit
from agents.imitation.run import build_model
from llmsched_gym.envs.core import episode_cost, make_setup
from llmsched_gym.evaluation.stats import paired_change


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="an imitation run's output directory (labels.npz, agent.json)")
    ap.add_argument("--row", required=True, help="its row of benchmarks/studies/headroom.py")
    ap.add_argument("--seeds", default=None, help="training seeds to compare on (default: 5 the run did not use)")
    ap.add_argument("--temperature", type=float, default=0.1)
    ap.add_argument("--out", default="results/imitation-targets")
    args = ap.parse_args(argv)
    run, row = Path(args.run), ROWS[args.row]
    meta = json.loads((run / "agent.json").read_text())
    cfg = meta["imitation"]
    data = Dataset.load(run / "labels.npz")
    hold = np.isin(data.seeds, meta["holdout_workload_seeds"])
    train, test = data.subset(np.flatnonzero(~hold)), data.subset(np.flatnonzero(hold))
    used = set(meta["training_workload_seeds"])
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds
             else [s for s in range(100) if s not in used][:5])
    sc = g.make_scenario(row.scenario, **row.kw)
    sc.horizon_s = row.horizon_s
    setup = make_setup("routing", scenario=sc)
    base = [episode_cost(sc.simulator(s, router=meta["base"]).run(), setup) for s in seeds]
    vec = gym.make_vec("llmsched/Routing-v0", num_envs=1, scenario=row.scenario, **row.kw).unwrapped
    print(f"{args.run}: {len(train)} training rows, {len(test)} held out; seeds {seeds}; "
          f"{meta['base']} cost {np.mean(base):.4g}")
    for target in ("hard", "soft"):
        model = build_model(vec, meta["policy"], {}, seed=meta["seed"])
        fit(model.policy, train, epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg["learning_rate"],
            seed=meta["seed"], target=target, temperature=args.temperature)
        out = Path(args.out) / f"{run.name}-{target}"
        out.mkdir(parents=True, exist_ok=True)
        model.save(out / "model.zip")
        shutil.copy(run / "agent.json", out / "agent.json")
        cost = [episode_cost(sc.simulator(s, router=f"agent:{out}").run(), setup) for s in seeds]
        p, lo, hi = paired_change(cost, base)
        print(f"| {target} | holdout accuracy {accuracy(model.policy, test):.3f} | cost {np.mean(cost):.4g} | "
              f"vs {meta['base']} {p:+.1%} [{lo:+.1%}, {hi:+.1%}] |", flush=True)


if __name__ == "__main__":
    main()
