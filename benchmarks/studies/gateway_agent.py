"""A Gateway-v0 agent against baseline combinations (docs/agents.md, "Gateway-v0").

    python benchmarks/studies/gateway_agent.py --scenario codegen --paper-qps 16 --agent runs/gw-codegen \\
        [--baselines 'lmetric+flow_control=none+always-admit;...'] [--seeds 100-104] [--json out.json]

Without ``--baselines``, codegen and chat use the combinations of docs/agents.md's tables
(``CANDIDATES``: the published ones and the best of every ``llmsched-gym tune`` search).

Everything runs through the evaluation harness (``evaluate``: the cells ``compare`` runs),
the agent as ``gateway=agent:PATH`` (``agents.policy.AgentGateway``): in its environment,
one full-scenario episode per evaluation seed (``reset(options={"workload_seed": seed})``
builds the harness's workload and gateway generator for that seed), with the environment
keywords it was trained with except the training window, its deterministic action and its
VecNormalize statistics. The environment at the agent's centre action runs the same way
and must equal the harness's row of its base combination (printed; tests/test_gateway_env.py
checks it request for request).

The objective is the tuning objective of docs/agents.md: ``0.3 ttft_mean:critical + 0.35
ttft_mean:sheddable + 30 rejected:sheddable / arrivals`` (the environment's default reward
per arrival: weights 1 and 0.5, unserved penalty 60 s, a 30 / 70 class mix), lower is
better. Prints a markdown table: per policy the mean over seeds of the objective and the
key metrics, and on how many seeds the agent beats the best baseline on the objective.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

COLUMNS = (("slo_attainment", "all"), ("ttft_mean", "all"), ("ttft_p99", "critical"), ("ttft_mean", "critical"),
           ("ttft_mean", "sheddable"), ("rejected", "sheddable"))


#: The combinations of docs/agents.md's "Gateway" tables: published policies, and the best
#: of each ``llmsched-gym tune`` search (first the soft-reflective / probabilistic searches,
#: then the constant ceilings above 1).
_PUBLISHED = ["lmetric+flow_control=none+always-admit", "llm-d+flow_control=none+always-admit",
              "lmetric+soft-reflective-ceiling+always-admit", "lmetric+soft-reflective-ceiling+probabilistic",
              "lmetric+soft-reflective-ceiling+legacy", "lmetric+flow_control=none+legacy"]
CANDIDATES = {
    "codegen": _PUBLISHED + [
        "router=lmetric+soft-reflective-ceiling:ramp=1.5193,period_scale=0.04431+probabilistic:k=0.0001005,power=9.106",
        "router=lmetric+flow_control=none+probabilistic:k=0.0001077,power=1.735",
        "router=lmetric+soft-reflective-ceiling:ramp=1.226,period_scale=0.01257+admission=always-admit",
        "router=lmetric+priority-holdback:cmax=2.0439,cmin=1.21342+admission=always-admit",
        "router=lmetric+priority-holdback:cmax=4.0959,cmin=1.2132+admission=always-admit",
        "router=lmetric+static-usage-limit:threshold=2.7294+admission=always-admit"],
    "chat": _PUBLISHED + [
        "router=lmetric+soft-reflective-ceiling:ramp=0.2557,period_scale=0.3297+probabilistic:k=0.007001,power=19.498",
        "router=lmetric+flow_control=none+probabilistic:k=0.05664,power=17.137",
        "router=lmetric+soft-reflective-ceiling:ramp=1.9648,period_scale=3.48+admission=always-admit",
        "router=lmetric+static-usage-limit:threshold=1.1084+probabilistic:k=0.1556,power=18.036",
        "router=lmetric+priority-holdback:cmax=2.7351,cmin=1.9816+probabilistic:k=0.007348,power=18.195",
        "router=lmetric+priority-holdback:cmax=1.8223,cmin=1.23409+probabilistic:k=0.006406,power=9.138"],
}


def objective(m: dict, arrivals: int) -> float:
    """The tuning objective of one run's per-class metrics ``m[(metric, class)]``."""
    return (0.3 * m[("ttft_mean", "critical")] + 0.35 * m[("ttft_mean", "sheddable")]
            + 30.0 * m[("rejected", "sheddable")] / arrivals)


def _metrics(classes: dict) -> dict:
    return {(k, c): float(classes[c][k]) for c in ("all", "critical", "sheddable") for k in
            ("slo_attainment", "ttft_mean", "ttft_p99", "rejected", "requests")}


def baselines(scenario: str, rate: dict, specs: list[str], seeds: list[int]) -> dict:
    """Per spec, per seed: the harness's per-class metrics."""
    from llmsched_gym.evaluation import evaluate

    table = evaluate(scenario, ";".join(specs), seeds, workers=1, **rate)
    out: dict = {}
    for r in table.rows:
        out.setdefault(r["policy"], {}).setdefault(r["seed"], {}).update(
            {(k, r["class"]): float(r[k]) for k in ("slo_attainment", "ttft_mean", "ttft_p99", "rejected",
                                                    "requests")})
    return out


def centre_spec(setup) -> str:
    """The baseline combination the environment's centre action runs (raw ceilings: none)."""
    flow = {"none": "flow_control=none", "soft-reflective": str(setup.flow_control),
            "scaled-ceilings": str(setup.flow_control)}.get(setup.flow_action, "ceilings at 1")
    adm = "always-admit" if setup.admission_action == "rejection" else str(setup.admission)
    return f"{setup.router}+{flow}+{adm}"


def centre_runs(path: str, scenario: str, rate: dict, seeds: list[int]) -> tuple[dict, str]:
    """Per seed: the per-class metrics of the agent's centre action, run in the environment
    the agent's cells run in (``AgentGateway.environment``); and the centre's baseline
    combination."""
    from agents.policy import AgentGateway
    from llmsched_gym.scenarios import make_scenario

    env = AgentGateway(path).environment(make_scenario(scenario, **rate))
    out = {}
    for seed in seeds:
        env.reset(options={"workload_seed": seed})
        while True:
            _, _, te, tr, info = env.step(env.setup.centre)
            if te or tr:
                break
        out[seed] = _metrics(info["episode"]["metrics"]["classes"])
    return out, centre_spec(env.setup)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True)
    rate = p.add_mutually_exclusive_group(required=True)
    rate.add_argument("--paper-qps", type=float)
    rate.add_argument("--load", type=float)
    p.add_argument("--agent", required=True, help="a llmsched-gym train output (or its best/)")
    p.add_argument("--label", default="agent")
    p.add_argument("--baselines", help="';'-separated policy combinations (compare's syntax); default: the "
                                       "scenario's CANDIDATES (codegen, chat)")
    p.add_argument("--seeds", default="100-104", help="evaluation seeds: FIRST-LAST")
    p.add_argument("--json", help="write every run's metrics here")
    args = p.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    rate = {"paper_qps": args.paper_qps} if args.paper_qps is not None else {"load": args.load}
    if args.baselines is None and args.scenario not in CANDIDATES:
        p.error(f"--baselines is needed for scenario {args.scenario!r} (defaults exist for {', '.join(CANDIDATES)})")
    specs = ([s.strip() for s in args.baselines.split(";") if s.strip()] if args.baselines is not None
             else CANDIDATES[args.scenario])
    runs = baselines(args.scenario, rate, specs + [f"gateway=agent:{args.agent}+label={args.label}"], seeds)
    centre, base_spec = centre_runs(args.agent, args.scenario, rate, seeds)
    match = [p for p in runs if p != args.label and all(
        np.allclose([v for _, v in sorted(runs[p][s].items())], [v for _, v in sorted(centre[s].items())],
                    rtol=1e-12, equal_nan=True) for s in seeds)]
    print(f"centre action ({base_spec}) equals the harness's: {', '.join(match) or 'none of the baselines given'}")
    arrivals = {s: int(centre[s][("requests", "all")]) for s in seeds}
    obj = {p: np.array([objective(runs[p][s], arrivals[s]) for s in seeds]) for p in runs}
    best = min((p for p in runs if p != args.label), key=lambda p: obj[p].mean())
    cols = " | ".join(f"{k}:{c}" for k, c in COLUMNS)
    print(f"\n{args.scenario} {rate}, seeds {seeds[0]}-{seeds[-1]} (mean over seeds)\n")
    print(f"| policy | objective | {cols} |")
    print("|---|---:|" + "---:|" * len(COLUMNS))
    for p in runs:
        vals = " | ".join(f"{np.mean([runs[p][s][kc] for s in seeds]):.4g}" for kc in COLUMNS)
        print(f"| {p} | {obj[p].mean():.4f} | {vals} |")
    wins = int((obj[args.label] < obj[best]).sum())
    print(f"\n{args.label} vs best baseline ({best}): objective {obj[args.label].mean():.4f} vs {obj[best].mean():.4f} "
          f"({100 * (obj[args.label].mean() / obj[best].mean() - 1):+.1f}%), lower on {wins}/{len(seeds)} seeds; "
          f"per seed {np.round(obj[args.label], 4).tolist()} vs {np.round(obj[best], 4).tolist()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({p: {str(s): {f"{k}:{c}": v for (k, c), v in m.items()} for s, m in r.items()}
                       for p, r in runs.items()}, f, indent=1)


if __name__ == "__main__":
    main()
