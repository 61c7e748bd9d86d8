"""What the vLLM eviction order changes: the golden runs under both orders, side by side.

The golden per-request results (``tests/golden/``) were recorded with the engine's
earlier order, ``cached-last`` (never-cached free blocks first, cached units only when
those run out). vLLM v1 keeps one free-block queue in release order and takes its oldest
block whether or not it still caches a prefix (``eviction="vllm"``, the default now).
This reruns every golden simulator run under both orders and reports, per run whose
results move: requests with a different first-token time, the token-weighted prefix-hit
ratio and TTFT p99 under each order.

    python benchmarks/validation/eviction_order.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from golden.golden_io import cluster_from, gateway_from, load, workload_from  # noqa: E402

from llmsched_gym.simulator import Simulator  # noqa: E402


def run(workload, meta: dict, eviction: str) -> Simulator:
    cluster = cluster_from(meta["cluster"])
    cluster = dataclasses.replace(cluster, engine=dataclasses.replace(cluster.engine, eviction=eviction))
    return Simulator(workload, cluster, gateway_from(meta["gateway"]), seed=int(meta["seed"]),
                     horizon_s=meta["horizon_s"]).run()


def stats(sim: Simulator) -> tuple[float, float]:
    t = sim.table
    inp = t.input[t.scheduled_once].sum()
    ttft = (t.first_token_t - t.arrival)[~np.isnan(t.first_token_t)]
    return (float(t.prefix_hit.sum() / inp) if inp else 0.0), (float(np.percentile(ttft, 99)) if len(ttft) else 0.0)


def main() -> None:
    print(f"{'case/run':<48}{'moved':>8}{'hit old':>9}{'hit vllm':>9}{'p99 old s':>11}{'p99 vllm s':>11}")
    same = total = 0
    for path in sorted((ROOT / "tests" / "golden" / "data").glob("*.npz")):
        arrays, meta = load(path)
        if meta.get("kind") != "sim":
            continue
        w = workload_from(arrays, meta["workload"])
        for r in meta["runs"]:
            old, new = run(w, r, "cached-last"), run(w, r, "vllm")
            a, b = old.table.first_token_t, new.table.first_token_t
            moved = int((~((a == b) | (np.isnan(a) & np.isnan(b)))).sum())
            total += 1
            if moved == 0:
                same += 1
                continue
            (h0, p0), (h1, p1) = stats(old), stats(new)
            print(f"{path.stem + '/' + r['label']:<48}{moved:>8}{h0:>9.4f}{h1:>9.4f}{p0:>11.3f}{p1:>11.3f}")
    print(f"{same} of {total} runs identical under both orders")


if __name__ == "__main__":
    main()
