"""Headroom: how far the best heuristic is from a lookahead planner on forked clusters.

Each row runs every heuristic of its decision kind (the compiled baselines, plus for routing
the Bailian weight and the AIBrix threshold that ``tune`` finds on seeds of its own; for
Gateway-v0 the combinations of docs/agents.md, tuned ones included; for autoscaling the
scalers of docs/results.md section 7) on the
evaluation seeds, takes the best by the environment's cost, and runs the ``lookahead``
planner (``baselines/lookahead.py``) on top of it in two modes, on the same seeds (paired):

* ``mpc``: a deployable online policy; its copies see futures sampled from the scenario's
  arrival model (fresh seeds), never the real one;
* ``oracle``: its copies see the true future arrivals; a bound on what seeing the next
  ``horizon_s`` seconds is worth, not a deployable policy.

Reported per row: the environment's own cost (``envs.core.episode_cost``: the Routing,
FlowControl, Admission or Gateway environment's priority-weighted TTFT with the unserved
penalty; Autoscaling-v0's weighted SLO misses plus ``gpu_cost`` x GPU-seconds),
the row's metric, the changes of ``mpc`` and ``oracle`` against the best heuristic with
95% bootstrap intervals, and the planner's decisions per second. A JSON record per row goes
to ``--out``.

    python benchmarks/studies/headroom.py                                 # every row, seeds 100-102
    python benchmarks/studies/headroom.py --rows flow-codegen16 --seeds 100,101 --horizon 60
    python benchmarks/studies/headroom.py --rows gateway-chat,autoscaling-bursty    # Gateway-v0, autoscaling
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# siblings in benchmarks/studies: the scalers of docs/results.md section 7, the combinations of
# docs/agents.md "Gateway"
from autoscaling import day_compression, scalers
from gateway_agent import CANDIDATES

import llmsched_gym as g
from llmsched_gym.autoscaling import run_autoscaled
from llmsched_gym.envs.autoscaling import make_autoscaling_setup
from llmsched_gym.envs.core import CostTracker, episode_cost, make_setup
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.evaluation.stats import paired_change
from llmsched_gym.gateway.policy import make_policy, parse_policy

#: Compiled heuristics per decision kind, as simulator keywords.
ROUTERS = ["lmetric", "lmetric-no-detector", "llm-d", "jsq", "least-tokens", "bailian", "aibrix", "dynamo",
           "sglang-cache-aware", "preble", "polyserve", "llm-d-predicted-latency"]
FLOWS = ["soft-reflective-ceiling", "static-usage-limit", "priority-holdback"]
ADMISSIONS = ["always-admit", "legacy", "probabilistic"]
#: What ``tune`` searches for routing rows (on seeds 0 and 1, 20 trials, mean TTFT), as in docs/results.md.
ROUTING_SPACES = ["bailian:lam=0..1", "aibrix:imbalance=1..64:log:int"]
#: The scaling interval of the autoscaling rows (Kubernetes HPA's, as in docs/results.md section 7).
SCALE_INTERVAL_S = 15.0


@dataclass
class Row:
    scenario: str
    kind: str  # routing, flow_control, admission, gateway or autoscaling
    metric: str
    horizon_s: float | None  # None: every run to its drain
    planner: str  # the lookahead spec without mode and base
    kw: dict = field(default_factory=dict)
    samples: int = 4

    @property
    def role(self) -> str:
        return {"routing": "router", "flow_control": "flow_control", "admission": "admission", "gateway": "gateway",
                "autoscaling": "scaler"}[self.kind]

    def heuristics(self, sc) -> list[str]:
        """Gateway: the combinations (``gateway_agent.CANDIDATES``, tuned ones included);
        autoscaling: the scalers of docs/results.md section 7."""
        if self.kind == "gateway":
            return CANDIDATES[self.scenario]
        if self.kind == "autoscaling":
            return [spec for spec, _ in scalers(sc.cluster.instances, day_compression(sc))]
        return {"routing": ROUTERS, "flow_control": FLOWS, "admission": ADMISSIONS}[self.kind]

    def run(self, sc, spec: str, seed: int):
        """One heuristic's run: its simulator and, for autoscaling, its fleet (``run_autoscaled``:
        the fleet the scaler asks for at time 0 starts warm, as the planner's base)."""
        if self.kind == "autoscaling":
            return run_autoscaled(sc.simulator(seed), spec, SCALE_INTERVAL_S)
        if self.kind == "gateway":
            return sc.simulator(seed, **parse_policy(spec).kwargs()).run(), None
        return sc.simulator(seed, **{self.role: spec}).run(), None

    def bases(self, best: str) -> dict:
        """The planner's base keywords: the best heuristic."""
        if self.kind == "gateway":
            roles = parse_policy(best).kwargs()
            return {"base": roles["router"], "base_flow": roles["flow_control"] or "none",
                    "base_admission": roles["admission"]}
        return {{"routing": "base", "flow_control": "base_flow", "admission": "base_admission",
                 "autoscaling": "base_scaler"}[self.kind]: best}


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
    # Gateway and autoscaling rows run whole scenarios, to their drain, as their tables in the docs.
    # Gateway: horizon_s=10 beat 3 and 30 (interval 2) for the oracle on seeds 0-2, not the table's;
    # autoscaling: 90 s outlasts a cold start (44.8 s) and the scaler's reaction to it.
    "gateway-codegen": Row("codegen", "gateway", "critical_ttft_p99", None,
                           "decision=gateway,horizon_s=10,interval_s=1", kw={"paper_qps": 16}, samples=2),
    "gateway-chat": Row("chat", "gateway", "critical_ttft_p99", None,
                        "decision=gateway,horizon_s=10,interval_s=1", kw={"paper_qps": 80}, samples=2),
    "autoscaling-diurnal": Row("diurnal-codegen", "autoscaling", "slo_attainment", None,
                               "decision=autoscaling,horizon_s=90,interval_s=15", samples=2),
    "autoscaling-bursty": Row("bursty-codegen", "autoscaling", "slo_attainment", None,
                              "decision=autoscaling,horizon_s=90,interval_s=15", samples=2),
}


def metric(sim, name: str) -> float:
    if name == "slo_attainment":
        return float(summarize(sim)["classes"]["all"]["slo_attainment"])
    t = sim.table
    ttft = t.first_token_t - t.arrival
    if name == "ttft_mean":
        return float(np.nanmean(ttft))
    return float(np.nanpercentile(ttft[t.priority == 0], 99))


def cost_function(row: Row, sc):
    """The environment's own cost of a run (simulator, fleet): Autoscaling-v0's weighted SLO
    misses plus ``gpu_cost`` x GPU-seconds; the others' ``envs.core.episode_cost``."""
    if row.kind == "autoscaling":
        setup = make_autoscaling_setup(scenario=sc, control_interval=SCALE_INTERVAL_S)

        def autoscaling_cost(sim, fleet) -> float:
            misses = CostTracker(setup, sim)
            misses.update(sim.now, sim.arrived, True)
            return misses.total + setup.autoscaling["gpu_cost"] * fleet.gpu_seconds()

        return autoscaling_cost
    setup = make_setup(row.kind, scenario=sc)
    return lambda sim, fleet: episode_cost(sim, setup)


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
    cost = cost_function(row, sc)
    measure = {"cost": cost, row.metric: lambda s, fleet: metric(s, row.metric)}
    if row.kind == "autoscaling":  # in the JSON record: what the cost's GPU part is made of
        measure["gpu_seconds"] = lambda s, fleet: fleet.gpu_seconds()
    heuristics = row.heuristics(sc) + (tuned_routers(row) if tune_routing and row.kind == "routing" else [])
    results = {}
    start = time.perf_counter()
    for spec in heuristics:
        runs = [row.run(sc, spec, seed) for seed in seeds]
        results[spec] = {k: [f(*r) for r in runs] for k, f in measure.items()}
    heuristics_s = time.perf_counter() - start
    best = min(heuristics, key=lambda h: np.mean(results[h]["cost"]))
    bases = row.bases(best)  # the planner's base option: every row's planner can do what the best heuristic does
    planners = {}
    for mode in ("mpc", "oracle"):
        spec = f"lookahead:{row.planner},mode={mode}" + (f",samples={row.samples}" if mode == "mpc" else "")
        out = {k: [] for k in measure} | {"decisions": 0, "plan_s": 0.0, "spec": spec, "bases": bases}
        start = time.perf_counter()
        for seed in seeds:
            planner = make_policy(spec, "gateway", **bases)
            sim = planner.run(sc, seed)
            for k, f in measure.items():
                out[k].append(f(sim, planner.fleet))
            out["decisions"] += planner.decisions
            out["plan_s"] += planner.plan_seconds
            print(f"  {name} {mode} seed {seed}: cost {results[best]['cost'][seeds.index(seed)]:.2f} -> "
                  f"{out['cost'][-1]:.2f}", flush=True)
        out["wall_s"] = time.perf_counter() - start
        planners[mode] = out
    return {"row": name, "scenario": row.scenario, "kw": row.kw, "kind": row.kind, "horizon_s": sc.horizon_s,
            "seeds": seeds, "metric": row.metric, "heuristics": results, "best": best, "planners": planners,
            "heuristics_wall_s": heuristics_s}


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
