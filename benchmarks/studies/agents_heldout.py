"""The shipped agents on held-out scenarios written for this test, and on an unseen instance count.

    python benchmarks/studies/agents_heldout.py [--routing-agent agents/pretrained/routing-chatbot]
                                        [--fc-agent agents/pretrained/fc-codegen] [--seeds 100,101,102]

The scenarios below are defined here only: no training run, built-in scenario or test
uses them, so an agent has never seen their request mix. Routing (the LMetric families'
cluster, 16 x H20, Qwen3-30B-A3B, roofline):

* ``heldout-rag``: retrieval-augmented QA, 60 shared documents (~3k tokens, Zipf 0.9)
  ahead of short questions, few follow-ups, bursty arrivals (gamma CV 1.5);
* ``heldout-longdoc``: long unique documents to summarize (~5k tokens, no sharing);
* ``chatbot`` on 8 instances instead of 16 (the unseen instance count);

each at load 0.5, against ``lmetric`` and ``jsq``. FlowControl (the seed's cluster,
2 x H100, Qwen3-14B, two classes):

* ``heldout-translate``: in ~600 / out ~600 tokens, 40% critical;
* ``heldout-summarize``: in ~3000 / out ~150 tokens, 20% critical;
* ``codegen`` on 4 instances instead of 2 (unseen instance count: a FlowControl model's
  observation is per instance, so one trained on 2 instances refuses it, and that is
  reported);

each at loads 0.67 and 1.07 (codegen's paper QPS 10 and 16), against
``soft-reflective-ceiling`` and the static limit. 60 s (routing) / 120 s (flow control)
arrival windows, evaluation seeds disjoint from training's. Prints markdown tables of the
mean over seeds; rows go to ``results/agents/heldout-PART.json`` (``--part``: routing,
flow_control or both).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from llmsched_gym.builtin_scenarios import _lmetric_cluster, _lognormal, _two_classes
from llmsched_gym.engine import EngineConfig
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.harness import evaluate
from llmsched_gym.scenarios import Scenario, make_scenario
from llmsched_gym.simulator import ClusterConfig, GatewayConfig
from llmsched_gym.workloads.synthetic import ArrivalSpec, ClassSpec, LengthSpec, PrefixSpec, WorkloadSpec

ROOT = Path(__file__).resolve().parents[2]


def routing_scenarios() -> list:
    model = "qwen3-30b-a3b"
    rag = WorkloadSpec(
        arrival=ArrivalSpec("gamma", 20.0, 1.5), input=_lognormal(200, 150, 8, 2000), output=_lognormal(150, 100, 2, 1000),
        classes=[ClassSpec("critical", 0, 1.0, 2.0, 0.15)], duration_s=120.0, name="heldout-rag",
        prefix=PrefixSpec(block_tokens=64, system_prompt_groups=60, system_prompt_tokens=_lognormal(3000, 1500, 256, 12000),
                          zipf_s=0.9, session_share=0.2, turns=LengthSpec("gaussian", 2, 1, 2, 4), think_time_s=5.0,
                          decode_tokens_per_s=40.0))
    longdoc = WorkloadSpec(
        arrival=ArrivalSpec("poisson", 5.0), input=_lognormal(5000, 2500, 512, 16000),
        output=_lognormal(300, 150, 8, 1500), classes=[ClassSpec("critical", 0, 1.0, 4.0, 0.15)],
        duration_s=120.0, name="heldout-longdoc")
    out = [Scenario(name=w.name, description=f"held-out {w.name}", cluster=_lmetric_cluster(model), workload=w,
                    gateway=GatewayConfig(router="llm-d"), default_rate={"load": 0.5}) for w in (rag, longdoc)]
    return out + [make_scenario("chatbot", instances=8)]


def fc_scenarios() -> list:
    def seed_like(name, inp, out, critical, slo):
        w = WorkloadSpec(arrival=ArrivalSpec("poisson", 10.0), input=inp, output=out,
                         classes=_two_classes(critical, *slo), duration_s=180.0, name=name)
        return Scenario(name=name, description=f"held-out {name}",
                        cluster=ClusterConfig(instances=2, hardware="H100", model="qwen3-14b", latency_model="linear",
                                              engine=EngineConfig(max_num_batched_tokens=8192)),
                        workload=w, gateway=GatewayConfig(router="llm-d", flow_control="static-usage-limit"),
                        capacity_horizon_s=120.0)
    return [seed_like("heldout-translate", _lognormal(600, 300, 16, 4000), _lognormal(600, 300, 8, 3000), 0.4, (1.0, 0.1)),
            seed_like("heldout-summarize", _lognormal(3000, 1500, 256, 12000), _lognormal(150, 100, 2, 1000), 0.2,
                      (2.0, 0.1)),
            make_scenario("codegen", instances=4)]


def _table(rows, scenarios, policies, metrics, seeds) -> str:
    head = "| scenario | load | policy | " + " | ".join(f"{m} ({c})" for m, c in metrics) + " |"
    lines = [head, "|" + "---|" * (3 + len(metrics))]
    for sc in scenarios:
        for rate in sorted({r["rate"] for r in rows if r["scenario"] == sc}):
            for pol in policies:
                cells = []
                for m, c in metrics:
                    v = [r[m] for r in rows if r["scenario"] == sc and r["rate"] == rate and r["policy"] == pol
                         and r["class"] == c and r["seed"] in seeds]
                    x = float(np.mean(v)) if v else float("nan")
                    cells.append(f"{x * 1e3:.1f} ms" if m.startswith(("ttft", "tpot")) else f"{x:.3f}")
                lines.append(f"| {sc} | {rate:g} | {pol} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--routing-agent", default="agents/pretrained/routing-chatbot")
    p.add_argument("--fc-agent", default="agents/pretrained/fc-codegen")
    p.add_argument("--seeds", default="100,101,102")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--part", choices=("routing", "flow_control", "both"), default="both")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.time()
    routing, fc = [], []
    if args.part != "flow_control":
        routing = run_routing(args, seeds)
    if args.part != "routing":
        fc = run_flow_control(args, seeds)
    wall = time.time() - t0
    print(f"\n{wall:.0f} s wall")
    out = ROOT / "results" / "agents"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"heldout-{args.part}.json").write_text(json.dumps({"routing": routing, "flow_control": fc, "wall_s": wall,
                                                               "args": vars(args)}, default=float, indent=1))


def run_routing(args, seeds) -> list:
    r_pols = ["lmetric", "jsq", f"agent:{args.routing_agent}+label=agent"]
    r_sc = routing_scenarios()
    routing = evaluate(r_sc, r_pols, seeds, load=[0.5], overrides={"duration_s": 60.0}, workers=args.workers).rows
    print(f"## Routing ({args.routing_agent}), load 0.5, seeds {args.seeds}\n")
    print(_table(routing, [s.name for s in r_sc], ["lmetric", "jsq", "agent"],
                 [("ttft_mean", "all"), ("ttft_p99", "all"), ("tpot_mean", "all")], seeds), flush=True)
    return routing


def run_flow_control(args, seeds) -> list:
    f_pols = ["soft-reflective-ceiling+label=soft-reflective", "static-usage-limit:threshold=1.0+label=static",
              f"fc=agent:{args.fc_agent}+label=agent"]
    fc, f_names = [], []
    for sc in fc_scenarios():
        try:
            fc += evaluate([sc], f_pols, seeds, load=[0.67, 1.07], overrides={"duration_s": 120.0},
                           workers=args.workers).rows
            f_names.append(sc.name)
        except ConfigError as e:  # an interval agent runs on the cluster size it was trained on
            print(f"\n{sc.name} ({sc.cluster.instances} instances): not run: {e}")
    print(f"\n## FlowControl ({args.fc_agent}), seeds {args.seeds}\n")
    print(_table(fc, f_names, ["soft-reflective", "static", "agent"],
                 [("ttft_p99", "critical"), ("ttft_mean", "critical"), ("goodput_rps", "sheddable"),
                  ("slo_attainment", "all")], seeds))
    return fc


if __name__ == "__main__":
    main()
