"""Simulator speed: the compiled engine against the previous release, side by side.

Cases (identical requests and configuration in both engines):

* ``fixed5000``: 4 x H100 Qwen3-14B, BLIS engine defaults, linear step-time preset,
  5,000 requests, Poisson 60 req/s, input and output Gaussian 512 +- 256 in [2, 7000],
  round-robin;
* ``ref5000``: BLIS's own 5,000-request reference run (``traces/blis/ref5000.csv``,
  trained-physics, 4 instances; BLIS needs 7.5-10 s of wall time here);
* ``ref50k``: BLIS's 50,000 requests on 16 instances (``ref50k.csv``; BLIS: ~215 s);
* ``mooncake1500``: the first 1,500 Mooncake conversation requests at trace rate on
  4 instances (long prompts and decodes, where decode segments dominate).

The new engine is timed after one warm-up run (JIT compilation is reported separately
with ``--jit``: a cold numba cache in a fresh folder, then a warm start). The previous
release runs in a subprocess from a git worktree of ``--baseline-rev`` (default: the
last commit before the compiled engine), on the same machine in the same run, so the
speed-up is a ratio measured side by side; per-request first-token and finish times are
checked to be identical (the compiled engine runs the previous release's eviction order,
``cached-last``, for this; the default ``vllm`` order costs the same). Machines here are shared and noisy: compare ratios.

    python benchmarks/speed/sim_speed.py [--cases fixed5000,ref5000,ref50k,mooncake1500] [--repeat 3]
    python benchmarks/speed/sim_speed.py --jit
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BASELINE_REV = "e30b430"  # the last release of the one-loop-per-cluster Python engine
CASES = ("fixed5000", "ref5000", "ref50k", "mooncake1500")


def build(case: str):
    """(workload, ClusterConfig, GatewayConfig) of a case, with whichever llmsched_gym is imported."""
    from llmsched_gym.engine import EngineConfig
    from llmsched_gym.simulator import ClusterConfig, GatewayConfig
    try:
        from llmsched_gym.workloads.synthetic import ArrivalSpec, LengthSpec, WorkloadSpec, generate
        from llmsched_gym.workloads.traces import load_blis_trace, load_mooncake
    except ImportError:  # the previous release's flat layout
        from llmsched_gym.synthetic import ArrivalSpec, LengthSpec, WorkloadSpec, generate
        from llmsched_gym.traces import load_blis_trace, load_mooncake

    if "LLMSCHED_TRACE_DIR" in os.environ:  # the baseline's child is given it: older trees lack the default
        traces = Path(os.environ["LLMSCHED_TRACE_DIR"])
    else:
        from llmsched_gym.workloads.trace_registry import DEFAULT_TRACE_DIR

        traces = DEFAULT_TRACE_DIR
    gateway = GatewayConfig(router="round-robin")
    # The previous release had one eviction order, "cached-last": compare like with like.
    same = {"eviction": "cached-last"} if "eviction" in EngineConfig.__dataclass_fields__ else {}
    blis_engine = EngineConfig.blis(**same)
    if case == "fixed5000":
        tokens = LengthSpec("gaussian", 512, 256, 2, 7000)
        w = generate(WorkloadSpec(arrival=ArrivalSpec("poisson", 60.0), input=tokens, output=tokens,
                                  num_requests=5000, name="bench"), 0)
        return w, ClusterConfig(instances=4, latency_model="linear", engine=blis_engine), gateway
    if case in ("ref5000", "ref50k"):
        w = load_blis_trace(traces / "blis" / f"{case}.csv").workload
        cluster = ClusterConfig(instances=4 if case == "ref5000" else 16, latency_model="blis-trained-physics",
                                gpu_memory_utilization=0.9, engine=blis_engine, scrape_interval_s=0.0)
        return w, cluster, gateway
    if case == "mooncake1500":
        w = load_mooncake(traces / "mooncake" / "conversation_trace.jsonl")
        w = w.subset(np.arange(1500))
        return w, ClusterConfig(instances=4, latency_model="linear", engine=blis_engine), gateway
    raise SystemExit(f"unknown case {case!r}; known: {', '.join(CASES)}")


def time_case(case: str, repeat: int, warmup: bool) -> dict:
    """Best wall time of ``repeat`` runs of a case with the imported engine, and its results."""
    from llmsched_gym.simulator import Simulator

    w, cluster, gateway = build(case)
    if warmup:
        Simulator(w.subset(np.arange(min(200, len(w)))), cluster, gateway).run()
    best, sim = np.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        sim = Simulator(w, cluster, gateway, seed=0).run()
        best = min(best, time.perf_counter() - start)
    return {"case": case, "requests": len(w), "wall_s": best, "sim_s": float(sim.now),
            "first_token_t": sim.table.first_token_t.tolist(), "finish_t": sim.table.finish_t.tolist()}


def baseline(cases: list[str], repeat: int, rev: str) -> list[dict]:
    """Run the cases with the engine of ``rev`` in a subprocess (a git worktree)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
                       check=True, capture_output=True)
        try:
            out = Path(tmp) / "out.json"
            env = {**os.environ, "PYTHONPATH": str(tree),
                   "LLMSCHED_TRACE_DIR": os.environ.get("LLMSCHED_TRACE_DIR", str(REPO.parent / "shared" / "traces"))}
            subprocess.run([sys.executable, "-P", __file__, "--child", ",".join(cases), "--repeat", str(repeat),
                            "--child-out", str(out)], check=True, env=env, cwd=tmp)
            return json.loads(out.read_text())
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)


def jit_cost() -> None:
    """First run on a cold numba cache, then a warm start (fresh processes, tiny workload)."""
    code = ("import time; t=time.perf_counter(); import numpy as np; import llmsched_gym as g; "
            "from llmsched_gym.simulator import Simulator; "
            "w=g.make_scenario('chatbot', qps=20, duration_s=5).build_workload(0); "
            "Simulator(w, g.make_scenario('chatbot').cluster).run(); print(time.perf_counter()-t)")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for label in ("cold numba cache (first run on a fresh machine)", "warm start (cache filled)"):
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            print(f"  {label}: import + first small run {float(out.stdout.split()[-1]):.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best is reported")
    ap.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision of the engine to compare with")
    ap.add_argument("--no-baseline", action="store_true", help="time only the compiled engine")
    ap.add_argument("--jit", action="store_true", help="report JIT compilation cost and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # inside the baseline subprocess
        res = [time_case(c, args.repeat, warmup=True) for c in args.child.split(",")]  # a compiled baseline compiles first
        Path(args.child_out).write_text(json.dumps(res))
        return
    if args.jit:
        jit_cost()
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    new = [time_case(c, args.repeat, warmup=True) for c in cases]
    old = [None] * len(cases) if args.no_baseline else baseline(cases, 1 if "ref50k" in cases else args.repeat,
                                                                   args.baseline_rev)
    print(f"{'case':<14}{'requests':>10}{'compiled s':>12}{'req/s':>12}{'sim s/wall s':>14}"
          f"{'previous s':>12}{'speed-up':>10}  identical")
    for n, o in zip(new, old):
        same = "" if o is None else str(np.array_equal(n["first_token_t"], o["first_token_t"], equal_nan=True)
                                          and np.array_equal(n["finish_t"], o["finish_t"], equal_nan=True))
        prev = "" if o is None else f"{o['wall_s']:.3f}"
        r = None if o is None else o["wall_s"] / n["wall_s"]
        ratio = "" if r is None else f"{r:.0f}x" if r >= 10 else f"{r:.2f}x"  # a compiled baseline: near 1
        print(f"{n['case']:<14}{n['requests']:>10,}{n['wall_s']:>12.3f}{n['requests'] / n['wall_s']:>12,.0f}"
              f"{n['sim_s'] / n['wall_s']:>14,.0f}{prev:>12}{ratio:>10}  {same}")


if __name__ == "__main__":
    main()
