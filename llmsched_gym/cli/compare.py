"""``llmsched-gym compare``: policy combinations over load points and paired seeds
(:func:`llmsched_gym.evaluation.harness.run_studies`), with a terminal table of medians,
confidence intervals and changes, CSV/JSON results and figures."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from rich.table import Table

from ..errors import ConfigError, OutputError
from ..evaluation.harness import (
    DEFAULT_SCALE_INTERVAL_S,
    RATE_KINDS,
    ResultTable,
    Study,
    default_studies,
    parse_policies,
    run_studies,
    scenario_classes,
    write_outputs,
)
from ..evaluation.stats import lookup
from ..faults import FaultSchedule
from ..gateway.policy import ROLE_KEYS, parse_policy
from ..gateway.saturation import STALENESS_POLICIES
from ..scenarios import make_scenario
from ..validation import check_name, check_output_dir, fallback_dir
from . import tables
from .epp import add_epp_entries_arg, with_epp_entries
from .flags import (
    add_study_output_args,
    add_window_args,
    backend_from_args,
    check_flags,
    parse_rate_list,
    policy_overrides,
    window_overrides,
)
from .progress import ProgressBar

_COMPARE_HELP = """\
Compare policy combinations on one scenario over load points and paired seeds.

Without arguments, runs the default study: flow control on codegen
(static-usage-limit vs soft-reflective-ceiling at --paper-qps 4,10,16, critical and
sheddable) and routing on chatbot (jsq, llm-d, lmetric at --load 0.5, shortened).

POLICIES: entries separated by ';'. Each entry is one combination of roles joined
by '+'; a part is 'role=SPEC' or a bare SPEC whose role is found from its name:
  'jsq;lmetric;llm-d'                                  three routers
  'static-usage-limit;soft-reflective-ceiling'         two flow-control policies
  'lmetric+soft-reflective-ceiling;jsq+flow_control=none'
  'router=llm-d:prefix_weight=2,queue_weight=1+label=llmd-p2'
  'pd-aggregated;pd-always;pd-dynamo'   P/D decisions (--scenario pd-longprompt)
Roles: router (routing), flow_control (usage-limit, fc; 'none' = no gateway queue),
admission, pd (P/D disaggregation, a scenario with a prefill pool); label=NAME names the entry. SPEC = NAME[:key=value,...] as in
`llmsched-gym policies`. Roles an entry leaves out come from --router /
--flow-control / --admission, else from the scenario's defaults. No --mode is
needed: a bare name's role (router, flow control, admission) comes from the registry.

Output: a table in the terminal (median over seeds, bootstrap 95% CI, paired change
vs --baseline), and in --out: results.csv, results.json (per cell and class),
summary.csv (statistics) and PNG figures (TTFT/TPOT CDFs, change bars per load
point, load sweep).
"""


def add_cli(subparsers) -> None:
    """Register ``llmsched-gym compare``."""
    p = subparsers.add_parser("compare", help="compare policy combinations over load points and seeds",
                              description=_COMPARE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", help="scenario name or YAML file (default: the built-in default study)")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--qps", help="comma-separated request rates, e.g. 4,10,16")
    rate.add_argument("--load", help="comma-separated fractions of measured capacity, e.g. 0.3,0.5,0.7")
    rate.add_argument("--paper-qps", help="comma-separated published QPS points (codegen, chat, reasoning)")
    p.add_argument("--policies", help="';'-separated policy combinations (see above); default depends on the scenario")
    p.add_argument("--router", help="router for entries that do not set one")
    p.add_argument("--flow-control", help="flow control for entries that do not set one ('none' = no queue)")
    p.add_argument("--admission", help="admission for entries that do not set one")
    p.add_argument("--pd", help="P/D decision for entries that do not set one (a scenario with a prefill pool)")
    p.add_argument("--scaler", help="scaling policy for entries that do not set one: the cell runs autoscaled "
                   "(e.g. hpa-kv:target=0.3; docs/environments.md, Autoscaling-v0)")
    p.add_argument("--eviction", action="store_true",
                   help="llm-d's demand-driven in-flight eviction in every cell (entries need flow control)")
    p.add_argument("--faults", metavar="FILE", help="run every cell under this fault schedule (a YAML file: "
                   "crashes, crash_rate, scrape_outages, stragglers; docs/scenarios.md, \"Faults\")")
    p.add_argument("--staleness-policy", choices=STALENESS_POLICIES,
                   help="the saturation detector's stalenessPolicy for every cell (default: the scenario's)")
    p.add_argument("--baseline", help="label of the policy entry that changes are relative to (default: the first)")
    p.add_argument("--seeds", type=int, default=3, help="number of paired seeds (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    add_window_args(p)
    p.add_argument("--class", dest="classes", help="comma-separated classes to show (default: critical,sheddable,all)")
    add_study_output_args(p, "compare", "cells")
    add_epp_entries_arg(p)
    p.set_defaults(func=cmd_compare)


def _default_policies(scenario) -> str:
    sc = make_scenario(scenario)
    if sc.gateway.flow_control is not None:
        return "static-usage-limit;soft-reflective-ceiling"
    return "jsq;llm-d;lmetric"


def cmd_compare(args) -> int:
    """``llmsched-gym compare``."""
    args = with_epp_entries(args)
    check_flags(args, skip=RATE_KINDS)  # the rate points are lists, parsed below
    for flag in ("--scenario", "--policies", "--baseline", "--class"):
        check_name(flag, getattr(args, "classes" if flag == "--class" else flag[2:]), none_ok=True,
                   what={"--scenario": "a scenario name or YAML path", "--policies": "';'-separated policies",
                         "--baseline": "a policy label", "--class": "comma-separated class names"}[flag])
    out = check_output_dir("--out", args.out if args.out is not None else  # before the run: a bad path
                           Path("results") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}",  # must not cost the results
                           force=args.force)
    backend = backend_from_args(args)  # starts nothing yet (Ray starts with the first cells)
    common = policy_overrides(args)
    if common:
        parse_policy({k: v for k, v in common.items()})  # validate names
    overrides = window_overrides(args)
    if args.eviction:
        overrides["eviction"] = True
    if args.faults is not None:  # read here once: every cell (a worker, a Ray node) gets the schedule
        overrides["faults"] = FaultSchedule.from_value(args.faults, "--faults")
    if args.staleness_policy is not None:
        overrides["staleness_policy"] = args.staleness_policy
    rates = {k: parse_rate_list(k, getattr(args, k)) for k in RATE_KINDS if getattr(args, k) is not None}
    if args.scenario is None and args.policies is None and not rates:
        studies = default_studies()
        for st in studies:
            st.overrides.update(overrides)
        if args.baseline:
            raise ConfigError("--baseline needs --scenario and --policies")
        if args.classes:
            raise ConfigError("--class needs --scenario (the default study shows its own classes)")
    else:
        scenario = args.scenario or "codegen"
        sc = make_scenario(scenario)  # clear error for unknown names
        policies = args.policies if args.policies is not None else _default_policies(scenario)
        specs = parse_policies(policies, "--policies")
        classes = tuple(c.strip() for c in args.classes.split(",")) if args.classes else ("critical", "sheddable", "all")
        if args.classes:
            known = scenario_classes(sc)
            bad = [c for c in classes if c not in known]
            if bad:
                raise ConfigError(f"--class={args.classes!r} is invalid; scenario {sc.name!r} has the classes "
                                  f"{', '.join(known)} ({', '.join(map(repr, bad))} not among them)")
        studies = [Study(scenario, specs, args.baseline or specs[0].label, rates, overrides, classes, "")]
    seeds = list(range(args.seed, args.seed + args.seeds))
    console = tables.console()
    start = time.perf_counter()
    try:
        with ProgressBar("simulating") as bar:
            results = run_studies(studies, seeds, progress=bar, common=common, backend=backend)
    finally:
        backend.close()
    all_rows, all_stats = [], []
    for st, table, stats in results:
        print_study(st, table, stats, console)
        for line in what_ran(st.policies, common):
            console.print(line, highlight=False)
        print_fleet(table, console)
        all_rows += table.rows
        all_stats += stats
    merged = ResultTable(all_rows, meta={"seeds": seeds, "studies": [
        {"scenario": str(st.scenario), "policies": [parse_policy(p).label for p in st.policies],
         "baseline": st.baseline, "rates": st.rates, "overrides": st.overrides} for st in studies]})
    try:
        figures = write_outputs(out, results, merged, all_stats, plots=not args.no_plots)
    except OutputError as e:  # e.g. --out removed or made read-only during the run: keep the results
        saved = fallback_dir("llmsched-gym-compare-")
        write_outputs(saved, results, merged, all_stats, plots=not args.no_plots)
        raise OutputError(f"--out: {e}; the results were saved to {saved} instead") from None
    wall = time.perf_counter() - start
    console.print(f"\n{len(all_rows)} rows from {sum(t.meta['cells'] for _, t, _ in results)} cells in {wall:.1f} s.")
    console.print(f"results: {out / 'results.csv'}, {out / 'results.json'}, {out / 'summary.csv'}")
    if figures:
        console.print("figures: " + ", ".join(str(f) for f in figures))
    return 0


def what_ran(policies, common: dict | None = None) -> list[str]:
    """``LABEL = router=..., flow_control=...`` for every entry whose label does not
    already say everything that ran: a ``label=``, an ``--epp-config``'s weights, and the
    roles ``--router`` / ``--pd`` / ... filled in for every entry."""
    common = {k: v for k, v in (common or {}).items() if k in ROLE_KEYS}
    out = []
    for p in policies:
        spec = parse_policy(p)
        roles = {**common, **spec.kwargs()}
        text = ", ".join(f"{k}={'none' if v is None else getattr(v, 'name', v)}" for k, v in roles.items())
        says_all = spec.label in (text, *map(str, spec.kwargs().values()))  # "lmetric", "router=jsq"
        if text and (common or not says_all):
            out.append(f"  {spec.label} = {text}")
    return (["policies as run:"] + out) if out else []


# ====================================================================== terminal tables
KEY_METRICS = (("ttft_mean", "TTFT mean", 1.0), ("ttft_p99", "TTFT p99", 1.0), ("tpot_mean", "TPOT mean", 1e3),
               ("tpot_p99", "TPOT p99", 1e3), ("e2e_p99", "E2E p99", 1.0), ("throughput_rps", "req/s", 1.0),
               ("slo_attainment", "SLO", 1.0), ("goodput_rps", "goodput", 1.0))


#: What the less obvious columns of the compare table mean (printed under it).
COLUMN_NOTES = ("SLO: fraction of the class's arrivals that finished within its TTFT and TPOT SLOs (a class "
                "without SLOs: fraction finished; rejected, expired, dropped, evicted, unfinished are misses); goodput: "
                "those requests per second; rej+exp: requests rejected (admission or a full band queue) plus "
                "expired (waited longer than the gateway TTL), median over seeds; evicted (where shown): revoked "
                "in flight by the gateway's demand-driven eviction.")


CHANGE_COLUMNS = ("ttft_mean", "ttft_p99", "tpot_mean", "e2e_p99", "throughput_rps")


def _fmt(v, scale=1.0, digits=3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    v *= scale
    return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:.0f}"


def _pct(v) -> str:
    return "" if v is None or not math.isfinite(v) else f"{v * 100:+.0f}%"


def print_study(st: Study, table: ResultTable, stats: list[dict], console=None) -> None:
    """Rich table: per point, class and policy: median [95% CI] and change vs the baseline."""
    console = console or tables.console()
    name = table.rows[0]["scenario"] if table.rows else str(st.scenario)
    n = len(table.meta.get("seeds", []))
    t = Table(title=f"{name}" + (f": {st.title}" if st.title else "") + f" - median over {n} seeds ± 95% CI half-width"
                    + (f", (change vs {st.baseline})" if st.baseline else ""), show_lines=False)
    for col in ("point", "class", "policy"):
        t.add_column(col)
    for _, label, scale in KEY_METRICS:
        unit = " (ms)" if scale == 1e3 else (" (s)" if label.startswith(("TTFT", "E2E")) else "")
        t.add_column(label + unit, justify="right")
    t.add_column("rej+exp", justify="right")
    evicting = any(r.get("evicted") for r in table.rows)  # a column only where the gateway evicts
    if evicting:
        t.add_column("evicted", justify="right")
    classes = [c for c in st.classes if c in table.unique("class")] or table.unique("class")
    if len([c for c in table.unique("class") if c != "all"]) == 1 and len(classes) > 1:
        classes = [c for c in classes if c != "all"]  # one class: its rows are the "all" rows
    for point in table.unique("point"):
        for cls in classes:
            for pol in table.unique("policy"):
                cells = []
                for m, _, scale in KEY_METRICS:
                    rec = lookup(stats, point=point, policy=pol, metric=m, **{"class": cls})
                    if rec is None:
                        cells.append("-")
                        continue
                    txt = _fmt(rec["median"], scale)
                    if rec["n"] > 1 and math.isfinite(rec["ci_low"]) and rec["ci_low"] != rec["ci_high"]:
                        hw = max(rec["ci_high"] - rec["median"], rec["median"] - rec["ci_low"])
                        txt += f" ±{_fmt(hw, scale, 2)}"
                    if st.baseline and pol != st.baseline and m in CHANGE_COLUMNS:
                        txt += f" ({_pct(rec.get('change'))})"
                    cells.append(txt)
                rej = lookup(stats, point=point, policy=pol, metric="rejected", **{"class": cls})
                exp = lookup(stats, point=point, policy=pol, metric="expired", **{"class": cls})
                cells.append(_fmt((rej["median"] if rej else 0) + (exp["median"] if exp else 0), 1, 4))
                if evicting:
                    ev = lookup(stats, point=point, policy=pol, metric="evicted", **{"class": cls})
                    cells.append(_fmt(ev["median"] if ev else 0, 1, 4))
                t.add_row(point, cls, pol, *cells)
            t.add_section()
    t.caption = COLUMN_NOTES
    tables.print_table(t, console, keys=3)


def print_fleet(table: ResultTable, console=None) -> None:
    """For autoscaled cells: median GPU-seconds, cold starts and SLO attainment (all
    arrivals) per point and policy."""
    console = console or tables.console()
    rows = [r for r in table.rows if r["class"] == "all" and r.get("gpu_seconds") is not None]
    if not rows:
        return
    t = Table(title=f"{rows[0]['scenario']}: autoscaled cells (scaling every {DEFAULT_SCALE_INTERVAL_S:g} s) - "
                    "median over seeds")
    for col in ("point", "policy", "scaler", "SLO attainment", "GPU-seconds", "cold starts"):
        t.add_column(col, justify="left" if col in ("point", "policy", "scaler") else "right")
    for point in table.unique("point"):
        for pol in table.unique("policy"):
            cells = [r for r in rows if r["point"] == point and r["policy"] == pol]
            if cells:
                med = {k: float(np.median([r[k] for r in cells])) for k in ("slo_attainment", "gpu_seconds",
                                                                            "cold_starts")}
                t.add_row(point, pol, cells[0]["scaler"], f"{med['slo_attainment']:.4f}", f"{med['gpu_seconds']:,.0f}",
                          f"{med['cold_starts']:g}")
    tables.print_table(t, console, keys=2)


