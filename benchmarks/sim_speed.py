"""Simulator speed on the fixed workload of issue 2, with and without event skipping.

Workload: 4 instances of Qwen3-14B on H100 (BLIS engine defaults, linear step-time
preset), 5,000 requests, Poisson 60 req/s, input and output Gaussian 512 +- 256 clipped
to [2, 7000], round-robin routing. Reports simulated requests per wall-second and
simulated seconds per wall-second, and the speed-up of event skipping as a ratio
measured in the same run (machines here are shared and noisy; compare ratios).

At 15 arrivals per second per instance, arrivals cut most decode stretches short, so
skipping gains little there; a second case replays the first 1,500 Mooncake requests
(long prompts and decodes, 4 instances, trace rate) where it dominates. It needs
``../shared/traces`` (or ``LLMSCHED_TRACE_DIR``) and is skipped without it.

    python benchmarks/sim_speed.py [--repeat 3] [--latency-model linear]

For scale: BLIS (Go) needs about 10 s on a 2-core machine for this workload.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmsched_gym.engine import EngineConfig
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import TraceSource
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.synthetic import ArrivalSpec, LengthSpec, WorkloadSpec, generate


def workload(seed: int = 0):
    tokens = LengthSpec("gaussian", 512, 256, 2, 7000)
    return generate(WorkloadSpec(arrival=ArrivalSpec("poisson", 60.0), input=tokens, output=tokens,
                                 num_requests=5000, name="bench"), seed)


def run_once(w, latency_model: str, skipping: bool) -> tuple[float, Simulator]:
    cluster = ClusterConfig(instances=4, hardware="H100", model="qwen3-14b", latency_model=latency_model,
                            engine=EngineConfig.blis(event_skipping=skipping))
    start = time.perf_counter()
    sim = Simulator(w, cluster, GatewayConfig(router="round-robin"), seed=0).run()
    return time.perf_counter() - start, sim


def compare(w, latency_model: str, repeat: int, label: str) -> None:
    best = {}
    for skipping in (True, False):
        times = []
        for _ in range(repeat):
            wall, sim = run_once(w, latency_model, skipping)
            times.append(wall)
        best[skipping] = (min(times), sim)
    print(f"{label}: {len(w):,} requests")
    for skipping, (wall, sim) in best.items():
        iters = sum(i.iterations for i in sim.instances)
        print(f"  event skipping {'on ' if skipping else 'off'}: {wall:.3f} s wall, "
              f"{len(w) / wall:,.0f} requests/s, {sim.now / wall:,.0f} simulated s per wall s, "
              f"{iters:,} engine iterations")
    on, off = best[True][1], best[False][1]
    assert np.array_equal(on.table.finish_t, off.table.finish_t), "event skipping changed the results"
    print(f"  speed-up of event skipping: {best[False][0] / best[True][0]:.2f}x (identical per-request results)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant; the best is reported")
    ap.add_argument("--latency-model", default="linear")
    args = ap.parse_args()
    compare(workload(), args.latency_model, args.repeat, "Poisson 60 req/s, 512 +- 256 tokens, 4 instances")
    try:
        mooncake = TraceSource("mooncake/conversation_trace.jsonl", "mooncake", limit=1500).load()
    except ConfigError as e:
        print(f"skipping the Mooncake case: {e}")
        return
    compare(mooncake, args.latency_model, 1, "Mooncake conversation, first 1,500 requests at trace rate, 4 instances")


if __name__ == "__main__":
    main()
