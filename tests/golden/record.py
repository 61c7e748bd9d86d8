"""Record the golden files of ``tests/test_golden.py`` into ``tests/golden/data/``.

Record from a snapshot of the engine to be frozen, not from a working tree being edited:

    git worktree add /tmp/llmsched-base HEAD
    cd /tmp && PYTHONPATH=/tmp/llmsched-base python /work/main/tests/golden/record.py

(run it from outside the repository: ``python -c``/``-m`` put the current directory first
on ``sys.path``, ahead of ``PYTHONPATH``). ``--only NAME ...`` re-records some cases.
Everything a run needs is stored (workload arrays, configs, seeds, horizon), so the files
stay valid when built-in scenarios or generators change; re-record only when the
simulator's results are meant to change.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: `golden` importable as a package

import llmsched_gym  # noqa: E402
from golden import golden_io as gio  # noqa: E402
from golden.cases import cases, env_cases  # noqa: E402
from llmsched_gym import Simulator, make_scenario  # noqa: E402


def _source() -> dict:
    pkg = Path(llmsched_gym.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(pkg), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(pkg), "status", "--porcelain", "--", str(pkg)],
                                    capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", None
    return {"package": str(pkg), "commit": commit, "dirty": dirty}


def record_case(case, source: dict) -> str:
    t0 = time.perf_counter()
    w = case.build()
    arrays, wl_meta = gio.workload_arrays(w)
    runs, lines = [], []
    for k, run in enumerate(case.runs):
        sim = Simulator(w, run.cluster, run.gateway, seed=run.seed, horizon_s=run.horizon_s).run()
        rec = gio.records(sim)
        for f, v in rec.items():
            arrays[f"run{k}.{f}"] = v
        counts = sim.table.counts()
        runs.append({"label": run.label, "cluster": gio.cluster_json(run.cluster),
                     "gateway": gio.gateway_json(run.gateway), "seed": run.seed, "horizon_s": run.horizon_s,
                     "summary": {**counts, "preemptions": int(sim.table.preemptions.sum())}})
        # The stored configs must rebuild into the same run.
        again = gio.run_case(w, runs[-1])
        for f, v in gio.records(again).items():
            np.testing.assert_array_equal(v, rec[f], err_msg=f"{case.name}/{run.label}/{f}: not reproducible")
        lines.append(f"    {run.label:42s} {counts} preemptions={runs[-1]['summary']['preemptions']}")
    meta = {"kind": "sim", "name": case.name, "description": case.description, "workload": wl_meta,
            "runs": runs, "source": source}
    gio.save(gio.DATA / f"{case.name}.npz", arrays, meta)
    return f"{case.name}: {len(w)} requests, {len(runs)} runs, {time.perf_counter() - t0:.1f} s\n" + "\n".join(lines)


def record_env(ec, source: dict) -> str:
    t0 = time.perf_counter()
    sc = gio.RecordingScenario.wrap(make_scenario(ec.scenario, **ec.overrides))
    meta = {"kind": "env", "name": ec.name, "env_id": ec.env_id, "scenario": ec.scenario,
            "overrides": ec.overrides, "env_kwargs": ec.env_kwargs, "steps": ec.steps, "seed": ec.seed,
            "num_envs": ec.num_envs, "cluster": gio.cluster_json(sc.cluster), "gateway": gio.gateway_json(sc.gateway),
            "source": source}
    env = gio.make_env(meta, sc)
    traj = gio.play(env, meta, rng=np.random.default_rng(0))
    setup = env.unwrapped.setup if not ec.num_envs else env.setup
    env.close()
    sc.build_workload(0)  # the frozen scenario takes its priority bands from workload seed 0
    arrays, wl_meta = {}, {}
    for s, w in sorted(sc.built.items()):
        a, m = gio.workload_arrays(w, prefix=f"wl{s}.")
        arrays.update(a)
        wl_meta[str(s)] = m
    meta["workloads"] = wl_meta
    arrays.update(traj)
    # Replaying on the frozen workloads must give the same trajectory.
    frozen = gio.frozen_scenario(arrays, meta)
    env2 = gio.make_env(meta, frozen)
    setup2 = env2.unwrapped.setup if not ec.num_envs else env2.setup
    assert setup2.band_priorities == setup.band_priorities, (setup2.band_priorities, setup.band_priorities)
    again = gio.play(env2, meta, actions=traj["actions"])
    env2.close()
    for k, v in traj.items():
        np.testing.assert_array_equal(again[k], v, err_msg=f"{ec.name}/{k}: frozen replay differs")
    gio.save(gio.DATA / f"{ec.name}.npz", arrays, meta)
    ends = int(traj["terminated"].sum()), int(traj["truncated"].sum())
    return (f"{ec.name}: {ec.env_id}{' x' + str(ec.num_envs) if ec.num_envs else ''}, {ec.steps} steps, "
            f"{len(sc.built)} workloads, terminated {ends[0]}, truncated {ends[1]}, "
            f"{time.perf_counter() - t0:.1f} s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="case names to (re)record")
    args = ap.parse_args(argv)
    source = _source()
    print(f"recording with {source}")
    gio.DATA.mkdir(parents=True, exist_ok=True)
    for c in cases():
        if args.only is None or c.name in args.only:
            print(record_case(c, source), flush=True)
    for ec in env_cases():
        if args.only is None or ec.name in args.only:
            print(record_env(ec, source), flush=True)
    total = sum(p.stat().st_size for p in gio.DATA.glob("*.npz"))
    print(f"{gio.DATA}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
