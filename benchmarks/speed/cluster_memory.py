"""Engine state bytes per cluster for every built-in scenario (the table in docs/performance.md).

    python benchmarks/speed/cluster_memory.py [--scenarios chatbot,codegen,...] [--overload 4]

Per scenario: the bytes a vector environment's slot takes (``EngineState`` arrays with
the vector env's slack, seed 0), split into prefix-cache tables (``ent``), prefix units
(``unit_i``), per-request arrays, the router index and the rest; the same slot at ``--overload`` times the
scenario's rate; and how much the resident memory of this process grows while that
overloaded episode runs (the arrays are allocated once, zero pages are only touched as
the caches fill). Scenarios whose traces are not on this machine are listed as such.
"""

from __future__ import annotations

import argparse

import numpy as np

import llmsched_gym as g
from llmsched_gym.engine.state import EngineState
from llmsched_gym.envs.vector import SLOT_SLACK

REQUEST_ARRAYS = ("req_i", "req_f", "heap_t", "heap_r", "log", "win_t", "win_c", "ccount")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def slot_bytes(sim) -> dict:
    st = EngineState([sim.inputs], slack=SLOT_SLACK)
    arrays = {k: v.nbytes for k, v in vars(st).items() if isinstance(v, np.ndarray)}
    out = {"tables": arrays.pop("ent"), "units": arrays.pop("unit_i"),
           "requests": sum(arrays.pop(k) for k in REQUEST_ARRAYS), "router": arrays.pop("ix") + arrays.pop("bkey")}
    out["other"] = sum(arrays.values())
    out["total"] = sum(out.values())
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(g.list_scenarios()))
    p.add_argument("--overload", type=float, default=4.0)
    args = p.parse_args(argv)
    mb = lambda b: f"{b / 1e6:.1f}"  # noqa: E731
    print("| scenario | instances | requests | slot MB | prefix tables | units | requests | router index | other "
          f"| slot MB at {args.overload:g}x rate | RSS growth over that episode MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.scenarios.split(","):
        try:
            sc = g.make_scenario(name)
            sim = sc.simulator(0)
            over = g.make_scenario(name, qps=args.overload * sc.target_qps()).simulator(0)
        except Exception as e:  # a trace-backed scenario without its trace here
            print(f"| {name} | not measured: {type(e).__name__}: {str(e).splitlines()[0][:80]} |")
            continue
        b, o = slot_bytes(sim), slot_bytes(over)
        before = _rss()
        over.run()
        grown = _rss() - before
        print(f"| {name} | {sim.cluster.instances} | {len(sim.workload)} | {mb(b['total'])} | {mb(b['tables'])} "
              f"| {mb(b['units'])} | {mb(b['requests'])} | {mb(b['router'])} | {mb(b['other'])} | {mb(o['total'])} | {mb(grown)} |",
              flush=True)


if __name__ == "__main__":
    main()
