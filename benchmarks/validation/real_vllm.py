"""Validation against real vLLM: every measured run of ``../shared/real_vllm/runs.json`` simulated
through the public interface (docs/validation.md, "Validation against real vLLM").

Per run and metric, the absolute percentage error (APE) of:
  blis-tp      this simulator with BLIS's trained-physics coefficients (``blis-trained-physics``),
  calibrated   the shipped ``vllm-calibrated`` coefficients (fitted on all the runs: in-sample),
  lomo         coefficients from ``calibrate`` fitted on the runs of the OTHER models only
               (leave-one-model-out, started from BLIS's coefficients),
  lomo-phys    the same with ``calibrate --physical-prior`` (weight and KV reads at the GPU's peak
               bandwidth, the all-reduce at NVLink's, b6 = 0; the overheads fitted, started from the
               measured decode steps),
  BLIS         BLIS's own prediction for the run, as its authors published it (in-sample for BLIS),
then the median and mean APE (MAPE) of each metric over the runs.

    PYTHONPATH=. python benchmarks/validation/real_vllm.py [--runs ../shared/real_vllm/runs.json] [--json out.json]

``--steps`` prints instead, per measured stage, the decode step the client's ITL implies and the
part of it that weight and KV reads at the GPU's peak bandwidth explain (no simulation).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from llmsched_gym.calibration import (
    FIT_PARAMS,
    PHYSICAL_PRIOR,
    PHYSICAL_PRIOR_DECODE,
    PHYSICAL_PRIOR_FIT,
    STEP_PARAMS,
    ape,
    calibrate,
    decode_step_us,
    decode_steps,
    load_runs,
    simulate_run,
    start_params,
)
from llmsched_gym.engine.latency import VLLM_CALIBRATED

ROOT = Path(__file__).resolve().parents[2]
#: BLIS's names of its whole-run predictions.
BLIS_KEYS = {"ttft_mean": "ttft_mean_ms", "ttft_p90": "ttft_p90_ms", "ttft_p99": "ttft_p99_ms",
             "e2e_mean": "e2e_mean_ms", "e2e_p90": "e2e_p90_ms", "e2e_p99": "e2e_p99_ms"}
SHOWN = ("ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99", "itl_mean_nominal")


def model_of(run) -> str:
    return run.model["name"]


def print_steps(runs) -> None:
    """Per stage: concurrency, the step's weight and KV reads at peak HBM bandwidth (ms), the
    measured step (ms) and what the reads leave unexplained (ms)."""
    reads = {**{p: 0.0 for p in STEP_PARAMS}, "b2b": 1.0, "b3": 1.0}
    print(f"{'run':40s} {'tp':>2s} {'rate':>5s} {'batch':>6s} {'reads':>7s} {'step':>7s} {'rest':>6s}")
    for run, rate, n, ctx, step in decode_steps(runs, VLLM_CALIBRATED["a1"], VLLM_CALIBRATED["a2"]):
        rd = decode_step_us(run, "vllm-calibrated", reads, n, ctx)
        print(f"{run.key[:40]:40s} {run.tp:2d} {rate:5.1f} {n:6.1f} {rd / 1e3:7.2f} {step / 1e3:7.2f} {(step - rd) / 1e3:6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(ROOT.parent / "shared" / "real_vllm" / "runs.json"))
    ap.add_argument("--json", help="write every number of the tables to this file")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--steps", action="store_true", help="print the measured decode steps and exit")
    args = ap.parse_args()
    runs = load_runs(args.runs)
    if args.steps:
        print_steps(runs)
        return
    t0 = time.time()
    apes = {k: {} for k in ("blis-tp", "calibrated", "lomo", "lomo-phys", "BLIS")}
    sims, lomo_params = {}, {}
    for run in runs:
        for col, kind in (("blis-tp", "blis-trained-physics"), ("calibrated", "vllm-calibrated")):
            got = simulate_run(run, kind)["whole"]
            sims.setdefault(run.key, {})[col] = got
            apes[col][run.key] = {m: ape(got[m], run.whole[m]) for m in SHOWN if m in run.whole}
        apes["BLIS"][run.key] = {m: ape(run.blis[k], run.whole[m]) for m, k in BLIS_KEYS.items()} if run.blis else {}
    blis = start_params("blis-trained-physics")
    procedures = {"lomo": {"base_params": blis, "fit": FIT_PARAMS},
                  "lomo-phys": {"base_params": {**blis, **PHYSICAL_PRIOR}, "fit": PHYSICAL_PRIOR_FIT,
                                "from_decode": PHYSICAL_PRIOR_DECODE}}
    for model in sorted({model_of(r) for r in runs}):
        fit_runs = [r for r in runs if model_of(r) != model]
        for col, how in procedures.items():
            params = calibrate(fit_runs, base="vllm-calibrated", iterations=args.iterations, **how)
            lomo_params.setdefault(col, {})[model] = params
            for run in runs:
                if model_of(run) == model:
                    got = simulate_run(run, "vllm-calibrated", params)["whole"]
                    sims[run.key][col] = got
                    apes[col][run.key] = {m: ape(got[m], run.whole[m]) for m in SHOWN if m in run.whole}
            print(f"{col}: held out {model}, fitted on {len(fit_runs)} runs ({time.time() - t0:.0f} s)", flush=True)

    print(f"\nAPE per run, % (blis-tp / calibrated / lomo / lomo-phys / BLIS's own); {len(runs)} runs")
    print(f"{'run':46s} " + " ".join(f"{m:>32s}" for m in ("ttft_mean", "e2e_mean", "itl_mean_nominal")))
    for run in runs:
        cells = []
        for m in ("ttft_mean", "e2e_mean", "itl_mean_nominal"):
            vals = [apes[c][run.key].get(m) for c in apes]
            cells.append("/".join(f"{v:.0f}" if v is not None else "-" for v in vals).rjust(32))
        print(f"{run.key[:46]:46s} " + " ".join(cells))
    print("\nMAPE over the runs, % (median / mean)")
    summary = {}
    print(f"{'metric':18s} " + " ".join(f"{c:>16s}" for c in apes))
    for m in SHOWN:
        row = []
        for col, per_run in apes.items():
            v = [a[m] for a in per_run.values() if m in a]
            summary.setdefault(col, {})[m] = {"median": float(np.median(v)), "mean": float(np.mean(v))} if v else None
            row.append(f"{np.median(v):7.1f} /{np.mean(v):7.1f}" if v else f"{'-':>16s}")
        print(f"{m:18s} " + " ".join(f"{x:>16s}" for x in row))
    print(f"\n{time.time() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"ape_pct": apes, "mape_pct": summary, "sim_ms": sims,
                                               "lomo_params": lomo_params}, indent=1, default=float))


if __name__ == "__main__":
    main()
