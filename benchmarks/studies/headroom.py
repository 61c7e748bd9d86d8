"""Headroom: how far the best heuristic is from a lookahead planner on forked clusters.

Each row runs every heuristic of its decision kind (the compiled baselines, plus for routing
the Bailian weight and the AIBrix threshold that ``tune`` finds on seeds of its own) on the
evaluation seeds, takes the best by the environment's cost, and runs the ``lookahead``
planner (``baselines/lookahead.py``) on top of it in two modes, on the same seeds (paired):

* ``mpc``: a deployable online policy; its copies see futures sampled from the scenario's
  arrival model (fresh seeds), never the real one;
* ``oracle``: its copies see the true future arrivals; a bound on what seeing the next
  ``horizon_s`` seconds is worth, not a deployable policy.

Reported per row: the environment's own cost (``envs.core.episode_cost``: the Routing,
FlowControl or Admission environment's priority-weighted TTFT with the unserved penalty),
the row's metric, the changes of ``mpc`` and ``oracle`` against the best heuristic with
95% bootstrap intervals, and the planner's decisions per second. A JSON record per row goes
to ``--out``.

    python benchmarks/studies/headroom.py                                 # every row, seeds 100-102
    python benchmarks/studies/headroom.py --rows flow-codegen16 --seeds 100,101 --horizon 60
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import llmsched_gym as g
from llmsched_gym.envs.core import episode_cost, make_setup
from llmsched_gym.evaluation.stats import paired_change
from llmsched_gym.gateway.policy import make_policy

#: Compiled heuristics per decision kind, as simulator keywords.
ROUTERS = ["lmetric", "lmetric-no-detector", "llm-d", "jsq", "least-tokens", "bailian", "aibrix", "dynamo",
           "sglang-cache-aware", "preble", "polyserve", "llm-d-predicted-latency"]
FLOWS = ["soft-reflective-ceiling", "static-usage-limit", "priority-holdback"]
ADMISSIONS = ["always-admit", "legacy", "probabilistic"]
#: What ``tune`` searches for routing rows (on seeds 0 and 1, 20 trials, mean TTFT), as in docs/results.md.
ROUTING_SPACES = ["bailian:lam=0..1", "aibrix:imbalance=1..64:log:int"]


@dataclass
class Row:
    scenario: str
    kind: str  # routing, flow_control or admission
    metric: str
    horizon_s: float
    planner: str  # the lookahead spec without mode and base
    kw: dict = field(default_factory=dict)
    samples: int = 4

    @property
    def role(self) -> str:
        return {"routing": "router", "flow_control": "flow_control", "admission": "admission"}[self.kind]

    def heuristics(self) -> list[str]:
        return {"routing": ROUTERS, "flow_control": FLOWS, "admission": ADMISSIONS}[self.kind]


ROWS = {
    "routing-chatbot": Row("chatbot", "routing", "ttft_mean", 10.0, "horizon_s=1", samples=2),
    "routing-agent": Row("agent", "routing", "ttft_mean", 8.0, "horizon_s=1", samples=2),
    "routing-kv-hotspot": Row("kv-hotspot", "routing", "ttft_mean", 30.0, "horizon_s=1", samples=2),
    "flow-codegen16": Row("codegen", "flow_control", "critical_ttft_p99", 120.0,
                          "decision=flow,horizon_s=3,interval_s=1", kw={"paper_qps": 16}, samples=2),
    # Admission's harm (a backlog that delays every later request) outlasts any short horizon
    # at this overload: the copies run to the end of the episode.
    "admission-codegen16": Row("codegen", "admission", "critical_ttft_p99", 120.0,
                               "decision=admission,horizon_s=120,interval_s=1", kw={"paper_qps": 16}, samples=2),
    "flow-reasoning0.7": Row("reasoning", "flow_control", "critical_ttft_p99", 240.0,
                             "decision=flow,horizon_s=10,interval_s=2", kw={"paper_qps": 0.7}, samples=2),
    "routing-coder": Row("coder", "routing", "ttft_mean", 15.0, "horizon_s=1", samples=2),
    "routing-toolagent": Row("toolagent", "routing", "ttft_mean", 10.0, "horizon_s=1", samples=2),
    "routing-mixed-chatbot": Row("mixed-chatbot", "routing", "ttft_mean", 5.0, "horizon_s=1", samples=2),
    "flow-flash-codegen": Row("flash-codegen", "flow_control", "critical_ttft_p99", 240.0,
                              "decision=flow,horizon_s=3,interval_s=1", samples=2),
}


def metric(sim, name: str) -> float:
    t = sim.table
    ttft = t.first_token_t - t.arrival
    if name == "ttft_mean":
        return float(np.nanmean(ttft))
    return float(np.nanpercentile(ttft[t.priority == 0], 99))


def tuned_routers(row: Row) -> list[str]:
    """The best spec ``tune`` finds for each routing space, on its own seeds (0 and 1)."""
    from llmsched_gym.evaluation.tune import tune

    sc = g.make_scenario(row.scenario, **row.kw)
    sc.horizon_s = row.horizon_s
    return [tune(sc, space, "ttft_mean", trials=20, seeds=[0, 1], workers=1).best_spec for space in ROUTING_SPACES]


def run_row(name: str, seeds: list[int], horizon_s: float | None, tune_routing: bool) -> dict:
    row = ROWS[name]
    sc = g.make_scenario(row.scenario, **row.kw)
    sc.horizon_s = row.horizon_s if horizon_s is None else horizon_s
    setup = make_setup(row.kind, scenario=sc)
    measure = {"cost": lambda s: episode_cost(s, setup), row.metric: lambda s: metric(s, row.metric)}
    heuristics = row.heuristics() + (tuned_routers(row) if tune_routing and row.kind == "routing" else [])
    results = {}
    for spec in heuristics:
        sims = [sc.simulator(seed, **{row.role: spec}).run() for seed in seeds]
        results[spec] = {k: [f(s) for s in sims] for k, f in measure.items()}
    best = min(heuristics, key=lambda h: np.mean(results[h]["cost"]))
    base_key = {"routing": "base", "flow_control": "base_flow", "admission": "base_admission"}[row.kind]
    base = best  # the planner's base option: every row's planner can do what the best heuristic does
    planners = {}
    for mode in ("mpc", "oracle"):
        spec = f"lookahead:{row.planner},mode={mode},{base_key}={base}" + (f",samples={row.samples}"
                                                                          if mode == "mpc" else "")
        out = {k: [] for k in measure} | {"decisions": 0, "plan_s": 0.0, "spec": spec}
        start = time.perf_counter()
        for seed in seeds:
            planner = make_policy(spec, "gateway")
            sim = planner.run(sc, seed)
            for k, f in measure.items():
                out[k].append(f(sim))
            out["decisions"] += planner.decisions
            out["plan_s"] += planner.plan_seconds
            print(f"  {name} {mode} seed {seed}: cost {results[best]['cost'][seeds.index(seed)]:.2f} -> "
                  f"{out['cost'][-1]:.2f}", flush=True)
        out["wall_s"] = time.perf_counter() - start
        planners[mode] = out
    return {"row": name, "scenario": row.scenario, "kw": row.kw, "kind": row.kind, "horizon_s": sc.horizon_s,
            "seeds": seeds, "metric": row.metric, "heuristics": results, "best": best, "planners": planners}


def report(res: dict) -> list[str]:
    """Markdown table lines of one row: the best heuristic, mpc and oracle."""
    best = res["heuristics"][res["best"]]
    lines = []
    for mode in ("mpc", "oracle"):
        p = res["planners"][mode]
        cells = []
        for key in ("cost", res["metric"]):
            point, lo, hi = paired_change(p[key], best[key])
            cells.append(f"{point:+.1%} [{lo:+.1%}, {hi:+.1%}] ({np.mean(best[key]):.4g} -> {np.mean(p[key]):.4g})")
        rate = p["decisions"] / max(p["plan_s"], 1e-9)
        lines.append(f"| {res['row']} | `{res['best']}` | {mode} | {cells[0]} | {res['metric']} {cells[1]} | "
                     f"{rate:.1f} | {p['wall_s']:.0f} |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated: " + ", ".join(ROWS))
    ap.add_argument("--seeds", default="100,101,102")
    ap.add_argument("--horizon", type=float, default=None, help="simulated seconds (default: the row's)")
    ap.add_argument("--no-tune", action="store_true", help="skip tuning the Bailian and AIBrix routers")
    ap.add_argument("--out", default="results/headroom", help="directory for one JSON record per row")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("| row | best heuristic | planner | environment cost | metric | decisions/s | wall s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.rows.split(","):
        if name not in ROWS:
            raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
        res = run_row(name, seeds, args.horizon, not args.no_tune)
        (out / f"{name}.json").write_text(json.dumps(res, indent=1))
        print("\n".join(report(res)), flush=True)


if __name__ == "__main__":
    main()
