"""Learners against the best heuristic, on the seeds declared before training.

For one row of the headroom table (``benchmarks/studies/headroom.py``: a scenario, a decision
kind, a horizon, a metric) and one or more trained agents, this runs every heuristic of the
row's decision kind on the evaluation seeds of ``agents/declared_seeds.yaml``, takes the best
by the environment's own cost *on those seeds* (the choice that favours the heuristic), runs
each agent (``agent:PATH`` in the row's role) on the same seeds, and reports the paired change
of the environment's cost and of the row's metric with 95% bootstrap intervals. The verdict
follows the declared rule: an agent *beats* the heuristic when the interval of its cost change
lies below zero, is *worse* when it lies above, and *ties* otherwise; on flow-control rows it
also needs the row's metric to improve, with sheddable goodput and SLO attainment within 5%.
Other seeds or horizons are allowed for exploration, and the report then says that no verdict
holds.

The heuristics' results are kept in ``--out/<row>.heuristics.json`` (keyed by seeds and
horizon) so several agents are judged against one run of the heuristics.

    python benchmarks/studies/learners.py --row routing-toolagent --agents agents/pretrained/es-toolagent
    python benchmarks/studies/learners.py --row flow-codegen16 --agents runs/a,runs/b --no-tune
    python benchmarks/studies/learners.py --row routing-agent,routing-coder,routing-toolagent,routing-chatbot,\
routing-mixed-chatbot,routing-kv-hotspot --agents agents/pretrained/es-agent,agents/pretrained/routing-chatbot
    python benchmarks/studies/learners.py --row routing-coder --agents DIR --seeds 50,51,52 --horizon 60 \
        --out results/learners-60s   # exploration: no verdict
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from headroom import ROWS, Row, cost_function, metric, tuned_routers

import llmsched_gym as g
from agents.declared import evaluation_seeds
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.evaluation.stats import paired_change

#: flow control: sheddable goodput and SLO attainment may not fall by more than this
SIDE_TOLERANCE = 0.05


def measure(sim, fleet, row: Row, cost) -> dict[str, float]:
    """The environment's cost, the row's metric and the flow-control side conditions of one run."""
    out = {"cost": cost(sim, fleet), row.metric: metric(sim, row.metric)}
    classes = summarize(sim)["classes"]
    out["slo_attainment"] = classes["all"]["slo_attainment"]
    out["sheddable_goodput_rps"] = sum(v["goodput_rps"] for k, v in classes.items() if k.startswith("sheddable"))
    return out


def run_policy(row: Row, scenario, cost, spec: str, seeds: list[int]) -> dict[str, list[float]]:
    runs = [measure(*row.run(scenario, spec, seed), row, cost) for seed in seeds]
    return {k: [r[k] for r in runs] for k in runs[0]}


def heuristics(name: str, row: Row, scenario, cost, seeds: list[int], tune: bool, out: Path) -> dict:
    """Every heuristic of the row on ``seeds``, from the cache in ``out`` when it matches."""
    path = out / f"{name}.heuristics.json"
    key = {"seeds": seeds, "horizon_s": scenario.horizon_s, "tuned": tune}
    if path.exists():
        cached = json.loads(path.read_text())
        if cached["key"] == key:
            return cached["results"]
    specs = row.heuristics(scenario) + (tuned_routers(row) if tune and row.kind == "routing" else [])
    results = {}
    for spec in specs:
        start = time.perf_counter()
        results[spec] = run_policy(row, scenario, cost, spec, seeds)
        print(f"  {spec}: cost {np.mean(results[spec]['cost']):.4g} ({time.perf_counter() - start:.0f} s)", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "results": results}, indent=1))
    return results


def verdict(row: Row, agent: dict, best: dict, declared: bool) -> str:
    _, lo, hi = paired_change(agent["cost"], best["cost"])
    if not declared:
        return "no verdict (not the declared seeds and horizon)"
    if lo > 0:
        return "worse"
    if hi >= 0:
        return "tie"
    if row.kind != "flow_control":
        return "beats"
    metric_better = paired_change(agent[row.metric], best[row.metric])[2] < 0
    sides = all(np.mean(agent[k]) >= (1 - SIDE_TOLERANCE) * np.mean(best[k])
                for k in ("slo_attainment", "sheddable_goodput_rps"))
    return "beats" if metric_better and sides else "cost better; metric or side conditions not met"


def judge(name: str, agents: list[str], seeds: list[int], tune: bool, out: Path,
          horizon_s: float | None = None) -> dict:
    row = ROWS[name]
    scenario = g.make_scenario(row.scenario, **row.kw)
    scenario.horizon_s = row.horizon_s if horizon_s is None else horizon_s
    cost = cost_function(row, scenario)
    results = heuristics(name, row, scenario, cost, seeds, tune, out)
    best = min(results, key=lambda h: np.mean(results[h]["cost"]))
    declared = seeds == evaluation_seeds() and scenario.horizon_s == row.horizon_s
    record = {"row": name, "seeds": seeds, "horizon_s": scenario.horizon_s, "declared": declared, "best": best, "heuristics": results, "agents": {}}
    for path in agents:
        start = time.perf_counter()
        spec = f"gateway=agent:{path}" if row.kind == "gateway" else f"agent:{path}"
        res = run_policy(row, scenario, cost, spec, seeds)
        res["wall_s"] = time.perf_counter() - start
        changes = {k: paired_change(res[k], results[best][k]) for k in ("cost", row.metric)}
        res["changes"] = changes
        res["verdict"] = verdict(row, res, results[best], declared)
        record["agents"][path] = res
        print(f"| {name} | `{best}` ({np.mean(results[best]['cost']):.4g}) | `{path}` | "
              + " | ".join(f"{k} {p:+.1%} [{lo:+.1%}, {hi:+.1%}]" for k, (p, lo, hi) in changes.items())
              + f" | {res['verdict']} |", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(record, indent=1))
    return record


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", required=True, help="a row of benchmarks/studies/headroom.py, or several "
                    "comma-separated: " + ", ".join(ROWS))
    ap.add_argument("--agents", required=True, help="comma-separated agent directories (agent:PATH)")
    ap.add_argument("--seeds", default=None, help="comma-separated; default: the declared evaluation seeds")
    ap.add_argument("--horizon", type=float, default=None, help="simulated seconds (default: the row's; "
                    "another horizon gives no verdict)")
    ap.add_argument("--no-tune", action="store_true", help="skip the tuned Bailian and AIBrix routers")
    ap.add_argument("--out", default="results/learners", help="directory for the JSON records")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else evaluation_seeds()
    rows = [r for r in args.row.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"--row: unknown row(s) {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    for row in rows:
        judge(row, [a for a in args.agents.split(",") if a], seeds, not args.no_tune, Path(args.out), args.horizon)


if __name__ == "__main__":
    main()
