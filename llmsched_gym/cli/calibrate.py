"""``llmsched-gym calibrate``: step-time coefficients fitted to measured vLLM runs
(:func:`llmsched_gym.calibration.calibrate`), the error per run printed, a latency-model
file written."""

from __future__ import annotations

import numpy as np

from ..calibration import (
    FIT_PARAMS,
    METRICS,
    PHYSICAL_PRIOR,
    PHYSICAL_PRIOR_DECODE,
    PHYSICAL_PRIOR_FIT,
    STEP_PARAMS,
    calibrate,
    error_rows,
    errors,
    load_runs,
    model_of,
    parse_coefficients,
    start_params,
    write_latency_file,
)
from ..errors import ConfigError
from ..validation import check_output_file


def cmd_calibrate(args) -> int:
    """``llmsched-gym calibrate``."""
    check_output_file("--out", args.out)
    runs = load_runs(args.runs)
    held_models = set(args.holdout_model or [])
    known = {model_of(r) for r in runs}
    unknown = sorted(held_models - known)
    if unknown:
        raise ConfigError(f"--holdout-model {unknown[0]!r} is not a model of {args.runs}; models: {', '.join(sorted(known))}")
    fit_runs = [r for r in runs if model_of(r) not in held_models]
    if not fit_runs:
        raise ConfigError("--holdout-model leaves no run to fit")
    default_fit = PHYSICAL_PRIOR_FIT if args.physical_prior else FIT_PARAMS
    fit = tuple(p.strip() for p in (args.fit or ",".join(default_fit)).split(",") if p.strip())
    fixed = {**(PHYSICAL_PRIOR if args.physical_prior else {}),
             **parse_coefficients("--set", args.set, (*STEP_PARAMS, "a0", "a1", "a2"))}
    clash = [p for p in fit if args.physical_prior and p in PHYSICAL_PRIOR]
    if clash:
        raise ConfigError(f"--fit {clash[0]!r} contradicts --physical-prior, which holds "
                          + ", ".join(f"{k} = {v:.4g}" for k, v in PHYSICAL_PRIOR.items()))
    from_decode = tuple(p.strip() for p in (args.from_decode or "").split(",") if p.strip())
    if args.physical_prior and not from_decode:
        from_decode = tuple(p for p in PHYSICAL_PRIOR_DECODE if p in fit)
    loose = [p for p in from_decode if p not in fit or p not in STEP_PARAMS]
    if loose:
        raise ConfigError(f"--from-decode {loose[0]!r} is invalid; give fitted step coefficients: "
                          + ", ".join(p for p in fit if p in STEP_PARAMS))
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise ConfigError(f"--metrics {bad[0]!r} is not known; allowed: {', '.join(METRICS)}")
    print(f"fitting {', '.join(fit)} of {args.base} on {len(fit_runs)} runs ({len(runs) - len(fit_runs)} held out)")
    params = calibrate(fit_runs, base=args.base, base_params={**start_params(args.start), **fixed}, fit=fit, metrics=metrics,
                       iterations=args.iterations, from_decode=from_decode, log=print)
    rows = errors(runs, args.base, params)
    held = {r.key for r in runs if model_of(r) in held_models}
    table = error_rows(rows, held)
    print(f"{'run':52s} {'held':>5s} " + " ".join(f"{m[:14]:>14s}" for m in METRICS))
    for t in table:
        print(f"{t['key'][:52]:52s} {'yes' if t['held_out'] else '':>5s} "
              + " ".join(f"{t[m]:13.1f}%" if t[m] is not None else f"{'-':>14s}" for m in METRICS))
    summary = {}
    for group, sel in (("fit", [t for t in table if not t["held_out"]]), ("held_out", [t for t in table if t["held_out"]])):
        if sel:
            summary[group] = {m: {"median": float(np.median([t[m] for t in sel if t[m] is not None])),
                                  "mean": float(np.mean([t[m] for t in sel if t[m] is not None]))} for m in METRICS}
            print(f"{group}: " + "; ".join(f"{m} median {v['median']:.1f}% mean {v['mean']:.1f}%"
                                             for m, v in summary[group].items()))
    write_latency_file(args.out, args.base, params, {"runs": str(args.runs), "fit": list(fit), "metrics": list(metrics),
                                                      "fixed": fixed, "from_decode": list(from_decode),
                                                      "held_out_models": sorted(held_models), "errors_pct": table,
                                                      "summary_pct": summary})
    print(f"wrote {args.out} (use it with --latency-model {args.out})")
    return 0


def add_cli(subparsers) -> None:
    """Register ``llmsched-gym calibrate``."""
    p = subparsers.add_parser(
        "calibrate", help="fit step-time coefficients to measured vLLM runs; write a latency-model file",
        description="Fit the coefficients of a trained-physics step-time model to the per-stage statistics of "
                    "measured runs (a runs.json as in docs/validation.md), each run simulated under its own "
                    "open-loop inference-perf arrivals; report the error per run, on fitted and held-out runs.")
    p.add_argument("--runs", required=True, help="measured runs (JSON; see docs/validation.md)")
    p.add_argument("--out", required=True, help="latency-model file to write (JSON)")
    p.add_argument("--base", default="vllm-calibrated", help="step-time model whose coefficients are fitted "
                   "(vllm-calibrated or blis-trained-physics; the others keep its values)")
    p.add_argument("--fit", help=f"coefficients to fit (comma-separated; default {','.join(FIT_PARAMS)}, with "
                   f"--physical-prior {','.join(PHYSICAL_PRIOR_FIT)})")
    p.add_argument("--set", metavar="NAME=VALUE,...", help="coefficients set before the fit: those not fitted keep "
                   "these values, fitted ones start from them (e.g. b6=0)")
    p.add_argument("--physical-prior", action="store_true",
                   help="price from the hardware what a held-out model cannot identify: weight and KV reads at the "
                   "GPU's peak HBM bandwidth (b3 = b2b = 1), the all-reduce at NVLink's (b4 = 3.35 TB/s / 450 GB/s), "
                   "the per-request cost through the decode FLOPs (b6 = 0); fit a0, b2a, b5, b7, the last three "
                   "started by --from-decode (docs/validation.md reports its leave-one-model-out errors)")
    p.add_argument("--from-decode", metavar="NAMES",
                   help="fitted step coefficients (comma-separated) whose starting values are solved by linear least "
                   "squares from the measured decode steps (ITL at the Little's-law concurrency) rather than taken "
                   "from --start")
    p.add_argument("--metrics", default="ttft_mean,e2e_mean", help="per-stage statistics fitted (comma-separated)")
    p.add_argument("--holdout-model", action="append", metavar="MODEL",
                   help="leave this model's runs out of the fit (repeatable); they are reported as held out")
    p.add_argument("--iterations", type=int, default=12, help="Levenberg-Marquardt iterations at most")
    p.add_argument("--start", help="initial coefficients: blis-trained-physics, vllm-calibrated or a latency-model "
                   "file (default: the base's)")
    p.set_defaults(func=cmd_calibrate)
