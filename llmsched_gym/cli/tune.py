"""``llmsched-gym tune``: a policy's parameters searched for an objective
(:func:`llmsched_gym.evaluation.tune.tune`, Optuna TPE), with a terminal table of the best
trials and the results written to ``--out``."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from rich.table import Table

from ..errors import OutputError
from ..evaluation.tune import (
    StartupTrials,
    TrialCount,
    parse_constraint,
    parse_objective,
    parse_space,
    tune,
)
from ..scenarios import make_scenario
from ..validation import Seed, check_name, check_output_dir, fallback_dir
from . import tables
from .flags import (
    FlagValues,
    add_study_output_args,
    add_window_args,
    backend_from_args,
    check_flags,
    policy_overrides,
    window_overrides,
)
from .progress import ProgressBar


class TuneFlags(FlagValues):
    """``tune``'s flags: the shared ones and the search's own."""

    trials: TrialCount = 20
    batch: TrialCount = 1
    startup_trials: StartupTrials = 10
    sampler_seed: Seed = 0


_TUNE_HELP = """\
Search a policy's parameters on one scenario at one load point for an objective
(Optuna TPE, seeded: the same arguments give the same trials). Needs the [tune] extra.

SPACE (--space, one per role; several make a joint space; or a YAML file):
  'bailian:lam=0..1'                                      a float in [0, 1]
  'aibrix:imbalance=1..64:log'                            an int parameter: integers, log scale
  'llm-d:queue_weight=0..5,kv_weight=0..5,prefix_weight=0..5'
  --space 'bailian:lam=0..1' --space 'static-usage-limit:threshold=0.5..1'   router + flow control
PARAM=VALUE fixes a parameter; parameter names as in `llmsched-gym policies`.

OBJECTIVE (minimized; 'max:' maximizes): [WEIGHT*]METRIC[:CLASS] joined by + or -,
class default 'all', over the medians across seeds:
  ttft_mean   ttft_p99:critical   tpot_p99   0.7*ttft_p99:critical+0.3*tpot_p99   max:goodput_rps

CONSTRAINT (any number): METRIC[:CLASS]>=BOUND or <=; BOUND is a number or
[FACTOR*]POLICY (that policy's median on the same seeds):
  'throughput_rps:sheddable>=0.9*static-usage-limit'   'slo_attainment:critical>=0.95'

Output in --out: best.txt (the best policy spec, usable as `compare --policies`),
best.json, trials.csv, trials.json and objective-vs-PARAM.png per parameter.
"""


def add_cli(subparsers) -> None:
    """Register ``llmsched-gym tune``."""
    p = subparsers.add_parser("tune", help="search a policy's parameters for an objective (Optuna TPE)",
                              description=_TUNE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", required=True, help="scenario name or YAML file")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--qps", type=float, help="request rate (req/s)")
    rate.add_argument("--load", type=float, help="fraction of the measured capacity, e.g. 0.5")
    rate.add_argument("--paper-qps", type=float, help="a published QPS point (codegen, chat, reasoning)")
    p.add_argument("--space", action="append", required=True, metavar="SPACE",
                   help="POLICY:PARAM=LOW..HIGH[:log][:int],... or a YAML file; repeat for a joint space")
    p.add_argument("--objective", default="ttft_mean", help="what to minimize (default ttft_mean; see above)")
    p.add_argument("--constraint", action="append", default=[], metavar="EXPR",
                   help="METRIC[:CLASS]>=BOUND or <=BOUND (repeatable; see above)")
    p.add_argument("--trials", type=int, default=20, help="number of trials (default 20)")
    p.add_argument("--seeds", type=int, default=2, help="paired seeds every trial runs (default 2)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--sampler-seed", type=int, default=0, help="seed of the TPE sampler (default 0)")
    p.add_argument("--startup-trials", type=int, default=10, help="random trials before TPE (default 10)")
    p.add_argument("--batch", type=int, default=1,
                   help="trials evaluated together, their cells in one run of the backend (default 1; "
                        "more uses a cluster's CPUs; results depend on it)")
    p.add_argument("--router", help="router when the space sets none")
    p.add_argument("--flow-control", help="flow control when the space sets none ('none' = no queue)")
    p.add_argument("--admission", help="admission when the space sets none")
    add_window_args(p)
    add_study_output_args(p, "tune", "cells of a trial")
    p.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    """``llmsched-gym tune``."""
    check_flags(args, TuneFlags)
    check_name("--scenario", args.scenario, what="a scenario name or YAML path")
    out = check_output_dir("--out", args.out if args.out is not None else
                           Path("results") / f"tune-{time.strftime('%Y%m%d-%H%M%S')}", force=args.force)
    make_scenario(args.scenario)  # clear error for unknown names
    common = policy_overrides(args)
    space = parse_space(args.space)
    obj = parse_objective(args.objective)
    cons = [parse_constraint(c) for c in args.constraint]
    backend = backend_from_args(args)
    overrides = window_overrides(args)
    console = tables.console()
    try:
        with ProgressBar("tuning") as bar:
                res = tune(args.scenario, space, obj, constraints=cons, trials=args.trials,
                       seeds=list(range(args.seed, args.seed + args.seeds)), qps=args.qps, load=args.load,
                       paper_qps=args.paper_qps, overrides=overrides, common=common, sampler_seed=args.sampler_seed,
                       startup_trials=args.startup_trials, batch=args.batch, backend=backend, progress=bar)
    finally:
        backend.close()
    m = res.meta
    t = Table(title=f"{m['scenario']} @ {m['point']} ({m['qps']:.4g} req/s): {obj.text} ({obj.direction}d), "
                    f"{m['trials']} trials x {len(m['seeds'])} seeds; best 10")
    cols = ["trial", *[p.key for p in space.params], "objective", "feasible"] + [
        k for k in res.columns() if ":" in k and k not in ("objective",)]
    for c in cols:
        t.add_column(c, justify="right")
    sign = -1.0 if obj.maximize else 1.0
    ranked = sorted((r for r in res.trials if r["state"] == "complete"),
                    key=lambda r: (not r["feasible"], sign * r["objective"], r["trial"]))
    for r in ranked[:10]:
        t.add_row(*[_cell(r.get(c)) for c in cols], style="bold" if res.best and r["trial"] == res.best["trial"] else None)
    tables.print_table(t, console)
    for c in m["constraints"]:
        console.print(f"constraint {c['text']}: bound {_cell(c['bound'])}")
    extra = {"wall_seconds": round(res.wall_seconds, 2),
             "arguments": {k: v for k, v in vars(args).items() if k not in ("func", "command")}}
    try:
        figures = res.write(out, plots=not args.no_plots, extra=extra)
    except OutputError as e:
        saved = fallback_dir("llmsched-gym-tune-")
        res.write(saved, plots=not args.no_plots, extra=extra)
        raise OutputError(f"--out: {e}; the results were saved to {saved} instead") from None
    console.print(f"\n{m['trials']} trials ({m['evaluated']} distinct) in {res.wall_seconds:.1f} s.")
    if res.best is None:
        console.print("no trial produced a finite objective; see trials.csv")
        return 1
    if not res.best["feasible"]:
        console.print("[bold red]no trial met the constraints[/]; best.txt holds the least violating one")
    console.print(f"best: {res.best_spec}  ({obj.text} = {res.best['objective']:.4g}, trial {res.best['trial']})")
    console.print(f"results: {out / 'best.txt'}, {out / 'best.json'}, {out / 'trials.csv'}, {out / 'trials.json'}")
    if figures:
        console.print("figures: " + ", ".join(str(f) for f in figures))
    return 0


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)

