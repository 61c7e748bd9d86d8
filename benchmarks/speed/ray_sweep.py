"""A sweep of N cells on the local process pool and on Ray, same workers: wall times and
identical results (issue 13; docs/architecture.md, "Backends").

    python benchmarks/speed/ray_sweep.py                      # 32 cells, 2 workers
    python benchmarks/speed/ray_sweep.py --cells 64 --workers 4
    python benchmarks/speed/ray_sweep.py --ray-address auto   # Ray: a running cluster instead of a local instance

The cells are ``codegen`` at 10 req/s over a ``--duration`` window, two flow-control
policies, ``cells / 2`` paired seeds. Both runs use :func:`llmsched_gym.evaluate`; the
local run with ``workers`` processes, the Ray run with a local Ray instance of ``workers``
CPUs (started before its timer: its start-up is reported on its own). Every row must be
equal (all columns but the cell's own ``wall_seconds``), and every per-request sample.
Needs the ``[ray]`` extra.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llmsched_gym import evaluate  # noqa: E402
from llmsched_gym.evaluation.backends import RayBackend  # noqa: E402

POLICIES = ["static-usage-limit", "soft-reflective-ceiling"]


def _results(table) -> tuple[list[dict], dict]:
    rows = [{k: v for k, v in r.items() if k != "wall_seconds"} for r in table.rows]
    return rows, table.samples


def same(a, b) -> bool:
    """Equal rows (NaN equal to NaN) and bit-identical samples."""
    (rows_a, samples_a), (rows_b, samples_b) = _results(a), _results(b)
    if len(rows_a) != len(rows_b) or samples_a.keys() != samples_b.keys():
        return False
    for x, y in zip(rows_a, rows_b):
        if x.keys() != y.keys() or any(not (x[k] == y[k] or (x[k] != x[k] and y[k] != y[k])) for k in x):
            return False
    return all(np.array_equal(samples_a[k][m], samples_b[k][m]) for k in samples_a for m in samples_a[k])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=32, help="cells (an even number; default 32)")
    ap.add_argument("--workers", type=int, default=2, help="processes / Ray CPUs (default 2)")
    ap.add_argument("--duration", type=float, default=600.0, help="arrival window of each cell, s (default 600)")
    ap.add_argument("--ray-address", help="a running Ray cluster ('auto'); default: start a local instance")
    args = ap.parse_args(argv)
    seeds = max(1, args.cells // len(POLICIES))
    grid = dict(scenarios="codegen", policies=POLICIES, seeds=seeds, qps=10,
                overrides={"duration_s": args.duration}, samples=True)
    n = seeds * len(POLICIES)
    print(f"{n} cells (codegen, 10 req/s, {args.duration:g} s window, {len(POLICIES)} policies x {seeds} seeds), "
          f"{args.workers} workers")

    start = time.perf_counter()
    local = evaluate(**grid, workers=args.workers)
    t_local = time.perf_counter() - start
    print(f"local pool: {t_local:6.1f} s", flush=True)

    ray = RayBackend(args.workers, args.ray_address)
    try:
        start = time.perf_counter()
        workers = ray.workers(n)  # starts (or joins) Ray
        t_start = time.perf_counter() - start
        start = time.perf_counter()
        on_ray = evaluate(**grid, backend=ray)
        t_ray = time.perf_counter() - start
    finally:
        ray.close()
    print(f"ray:        {t_ray:6.1f} s ({workers} workers; Ray start-up {t_start:.1f} s before it)")
    identical = same(local, on_ray)
    print(f"results identical: {identical} ({len(local.rows)} rows, {len(local.samples)} sample sets)")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
