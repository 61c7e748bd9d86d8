"""Does `load` mean what it says? The load check of docs/scenarios.md ("Load check").

For each scenario, at 0.1, 0.5, 0.8 and 1.2 times its capacity, steady-state runs on the
capacity's seeds (the capacity criterion's window, figures and verdict,
llmsched_gym/capacity.py: sustained = sustained on every seed). It passes when the mean
TTFT at load 0.5 (mean over the seeds of each run's mean TTFT over its judged spans) is
within 2x of load 0.1's, load 0.8 is still sustained, and at load 1.2 it is not (the
queues grow on at least one seed). Besides the built-in scenarios it checks ``longprompt``, a
long-prompt workload that the earlier capacity rule overestimated (lognormal input mean
14k tokens, output ~150, gamma arrivals CV 1.5, 8 x H20, Qwen3-30B-A3B, roofline, jsq).

    python benchmarks/validation/load_check.py                       # every built-in + longprompt (long)
    python benchmarks/validation/load_check.py codegen longprompt    # only these
    python benchmarks/validation/load_check.py --markdown out.md     # also write the table

Run it under ``nice``: one scenario at a time, each measuring its capacity first unless
the package ships it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llmsched_gym.capacity import SEEDS, capacity_record, steady_state  # noqa: E402
from llmsched_gym.engine import EngineConfig  # noqa: E402
from llmsched_gym.errors import ConfigError  # noqa: E402
from llmsched_gym.scenarios import Scenario, list_scenarios, make_scenario  # noqa: E402
from llmsched_gym.simulator import ClusterConfig, GatewayConfig  # noqa: E402
from llmsched_gym.workloads.synthetic import ArrivalSpec, ClassSpec, LengthSpec, WorkloadSpec  # noqa: E402

LOADS = (0.1, 0.5, 0.8, 1.2)


def longprompt() -> Scenario:
    """Long prompts on 8 x H20 (the workload issue 17 measured the old rule on)."""
    spec = WorkloadSpec(arrival=ArrivalSpec("gamma", 2.0, 1.5), input=LengthSpec("lognormal", 14000, 8000, 256, 64000),
                        output=LengthSpec("lognormal", 150, 100, 2, 2000),
                        classes=[ClassSpec("critical", 0, 1.0, 2.0, 0.15)], duration_s=120.0, name="longprompt")
    return Scenario(name="longprompt", description="long prompts (lognormal mean 14k tokens), 8 x H20 Qwen3-30B-A3B",
                    cluster=ClusterConfig(instances=8, hardware="H20", model="qwen3-30b-a3b", latency_model="roofline",
                                          engine=EngineConfig(max_num_batched_tokens=8192)),
                    workload=spec, gateway=GatewayConfig(router="jsq"), default_rate={"load": 0.5})


def scenario(name: str) -> Scenario:
    return longprompt() if name == "longprompt" else make_scenario(name)


def check(name: str) -> dict:
    sc = scenario(name)
    start = time.perf_counter()
    rec = capacity_record(sc)
    cap = rec["qps"]
    seed0 = int(rec.get("seed", 0))
    runs = {load: [steady_state(sc, load * cap, s) for s in range(seed0, seed0 + SEEDS)] for load in LOADS}
    t = {load: sum(r.ttft_mean_s for r in rs) / len(rs) for load, rs in runs.items()}
    ok_half = t[0.5] <= 2 * t[0.1]
    sustained = {load: all(r.stable for r in rs) for load, rs in runs.items()}

    def worst(load):  # the run that decides the verdict: the first unstable seed, else seed 0
        return next((r for r in runs[load] if not r.stable), runs[load][0])

    out = {"scenario": name, "capacity_qps": cap, "capacity_source": rec["source"], "seeds": SEEDS,
           **{f"ttft_mean_{load}": t[load] for load in LOADS},
           "ttft_ratio_0.5_0.1": t[0.5] / t[0.1] if t[0.1] > 0 else math.nan,
           "stable_0.8": sustained[0.8], "delivered_0.8": worst(0.8).delivered_ratio,
           "grows_1.2": not sustained[1.2], "delivered_1.2": worst(1.2).delivered_ratio,
           "waiting_end_1.2": worst(1.2).waiting_end,
           "unstable_seeds_1.2": sum(not r.stable for r in runs[1.2]), "wall_s": time.perf_counter() - start}
    out["pass"] = bool(ok_half and sustained[0.8] and not sustained[1.2])
    return out


def markdown(rows: list[dict]) -> str:
    head = ("| scenario | capacity (req/s) | mean TTFT (s) at 0.1 / 0.5 / 0.8 / 1.2 | 0.5 vs 0.1 | 0.8 sustained "
            "(delivered) | 1.2 grows (delivered, waiting at end; seeds that grow) | pass |\n"
            "|---|---|---|---|---|---|---|\n")
    body = ""
    for r in rows:
        ttft = " / ".join(f"{r[f'ttft_mean_{load}']:.3g}" for load in LOADS)
        body += (f"| `{r['scenario']}` | {r['capacity_qps']:.4g} | {ttft} | {r['ttft_ratio_0.5_0.1']:.2f}x | "
                 f"{'yes' if r['stable_0.8'] else 'NO'} ({r['delivered_0.8']:.3f}) | "
                 f"{'yes' if r['grows_1.2'] else 'NO'} ({r['delivered_1.2']:.3f}, {r['waiting_end_1.2']}; "
                 f"{r['unstable_seeds_1.2']}/{r['seeds']}) | "
                 f"{'yes' if r['pass'] else 'NO'} |\n")
    return head + body


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="scenarios (default: every built-in one, and longprompt)")
    ap.add_argument("--markdown", help="write the table to this file")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    names = args.names or [*list_scenarios(), "longprompt"]
    rows = []
    for name in names:
        try:
            row = check(name)
        except ConfigError as e:  # e.g. a trace scenario without its trace file
            print(f"{name}: skipped ({e})", flush=True)
            continue
        rows.append(row)
        print(f"{name:28s} cap {row['capacity_qps']:9.3f}  TTFT " +
              " / ".join(f"{row[f'ttft_mean_{load}']:.3g}" for load in LOADS) +
              f"  0.8 {'ok' if row['stable_0.8'] else 'UNSTABLE'}  1.2 {'grows' if row['grows_1.2'] else 'STABLE'}"
              f"  {'pass' if row['pass'] else 'FAIL'}  ({row['wall_s']:.0f} s)", flush=True)
    text = markdown(rows)
    print("\n" + text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
