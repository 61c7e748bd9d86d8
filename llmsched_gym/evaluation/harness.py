"""Evaluation harness: policies x scenarios x load points x seeds, in parallel.

:func:`evaluate` runs every cell ``(scenario, load point, policy combination, seed)``
and returns a :class:`ResultTable` with one row per cell and request class. Seeds are
*paired*: the requests of a cell depend only on the scenario, its rate and the seed,
so every policy sees exactly the same requests and differences between policies are not
workload noise. Cells run as independent tasks of a backend
(:mod:`llmsched_gym.evaluation.backends`: local worker processes, ``workers=``, or Ray,
``backend="ray"``); a cell's result does not depend on where it runs, so parallel, serial
and Ray results are identical.

The ``llmsched-gym compare`` subcommand (:func:`add_cli`) wraps it with statistics
(:mod:`llmsched_gym.evaluation.stats`), a terminal table, CSV/JSON output and figures
(:mod:`llmsched_gym.evaluation.plots`).

Policy combinations (``policies=``) are strings or dicts such as ``"lmetric"``,
``"lmetric+soft-reflective-ceiling"`` or ``{"router": "jsq", "flow_control": None}``,
parsed by :func:`llmsched_gym.gateway.policy.parse_policy` (the syntax is in that
module's docstring); ``;`` separates several in one string.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import tables
from ..errors import ConfigError, OutputError
from ..gateway.policy import ROLE_KEYS, PolicySpec, parse_policy
from ..validation import SEEDS, check_number, checked_keywords
from .backends import make_backend, warm_up

RATE_KINDS = ("qps", "load", "paper_qps")
#: Overrides applied after the rate is resolved (they do not change the capacity a
#: ``load`` refers to): a shorter window measures the same cluster at the same rate.
_LATE_OVERRIDES = {"duration_s", "num_requests", "horizon_s"}

#: Per-class metric columns of the result table (times in seconds).
METRIC_COLUMNS = (
    "requests", "finished", "rejected", "expired", "dropped", "evicted", "crashed", "in_flight",
    "ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99", "ttft_censored",
    "tpot_mean", "tpot_p50", "tpot_p90", "tpot_p99",
    "e2e_mean", "e2e_p50", "e2e_p90", "e2e_p99",
    "slo_attainment", "goodput_rps", "throughput_rps", "output_tokens_per_s",
    "prefix_hit_token_ratio", "preemptions", "retries",
)
ID_COLUMNS = ("scenario", "point", "rate_kind", "rate", "qps", "policy", "router", "flow_control", "admission",
              "seed", "class")
CELL_COLUMNS = ("instance_imbalance", "instance_cv", "sim_seconds", "wall_seconds")
#: Columns of the autoscaled cells only (a combination with a ``scaler``).
SCALER_COLUMNS = ("scaler", "gpu_seconds", "cold_starts")
DEFAULT_SCALE_INTERVAL_S = 15.0  # Kubernetes HPA's default sync period


# ====================================================================== policies
def parse_policies(text: "str | Sequence", field: str = "policies") -> list[PolicySpec]:
    """A ``;``-separated list (or a sequence) of policy combinations; ``field`` names
    the flag or keyword in errors."""
    items = text.split(";") if isinstance(text, str) else list(text)
    if not items or all(isinstance(p, str) and not p.strip() for p in items):
        raise ConfigError(f"{field}={text!r} is invalid; it names no policy (give ';'-separated policy "
                          "combinations, see `llmsched-gym policies`)")
    if any(isinstance(p, str) and not p.strip() for p in items):
        raise ConfigError(f"{field}={text!r} is invalid; it has an empty entry between ';'")
    specs = [parse_policy(p) for p in items]
    labels = [s.label for s in specs]
    dup = {x for x in labels if labels.count(x) > 1}
    if dup:
        raise ConfigError(f"policy labels must be unique; repeated: {', '.join(sorted(dup))} (use label=NAME)")
    return specs


# ====================================================================== scenarios and points
@dataclass
class _Point:
    scenario: str
    label: str
    rate_kind: str | None
    rate: float | None
    qps: float
    sc: Any  # Scenario at exactly qps, overrides applied


def _scenario_entries(scenarios) -> list[tuple[Any, dict]]:
    from ..scenarios import Scenario

    if isinstance(scenarios, (str, Scenario, os.PathLike)):
        scenarios = [scenarios]
    if isinstance(scenarios, dict):
        scenarios = list(scenarios.items())
    out = []
    for entry in scenarios:
        if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[1], dict):
            out.append((entry[0], dict(entry[1])))
        else:
            out.append((entry, {}))
    if not out:
        raise ConfigError("no scenario given")
    return out


def _as_list(v) -> list:
    if v is None:
        return []
    try:
        if isinstance(v, str):
            return [float(x) for x in v.split(",") if x.strip()]
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            return [float(v)]
        if isinstance(v, (list, tuple, np.ndarray)) and not any(isinstance(x, (bool, str)) for x in v):
            return [float(x) for x in v]
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"rate {v!r} is invalid; give a number, a list of numbers or a comma-separated string")


def resolve_points(scenarios, *, qps=None, load=None, paper_qps=None, overrides: dict | None = None) -> list[_Point]:
    """Every (scenario, load point) with its exact request rate (measures capacity if needed).

    A scenario entry may carry its own overrides and rate list: ``("codegen",
    {"paper_qps": [4, 10, 16], "duration_s": 60})``; otherwise the global
    ``qps``/``load``/``paper_qps`` lists apply, else the scenario's default rate.
    """
    from ..scenarios import make_scenario

    out = []
    for entry, own in _scenario_entries(scenarios):
        ov = {**(overrides or {}), **own}
        rates = {k: _as_list(ov.pop(k, None)) for k in RATE_KINDS}
        rates = {k: v for k, v in rates.items() if v}
        if not rates:
            rates = {k: _as_list(v) for k, v in {"qps": qps, "load": load, "paper_qps": paper_qps}.items() if v is not None}
            rates = {k: v for k, v in rates.items() if v}
        if len(rates) > 1:
            raise ConfigError(f"give at most one of qps, load, paper_qps (got {', '.join(rates)})")
        early = {k: v for k, v in ov.items() if k not in _LATE_OVERRIDES}
        late = {k: v for k, v in ov.items() if k in _LATE_OVERRIDES}
        if rates:
            kind, values = next(iter(rates.items()))
        else:  # the scenario's default rate
            default = dict(make_scenario(entry, **early).default_rate)
            kind, values = (next(iter(default.items())) if default else (None, None))
            values = [values]
        for value in values:
            sc = make_scenario(entry, **early, **({kind: value} if kind else {}))
            q = sc.target_qps()
            run_sc = make_scenario(sc, **late).at_rate(q)
            run_sc.check_size(sc.rate_setting())  # before any cell: a point too large to allocate
            label = f"{kind}={value:g}" if kind else f"qps={q:.4g}"
            out.append(_Point(sc.name, label, kind or "qps", float(value) if kind else q, q, run_sc))
    return out


# ====================================================================== one cell
def _run_cells(tasks: list[dict]) -> list[dict]:
    """Run cells as one batched simulation (cluster c of a batch gives what it gives
    alone, bit for bit); their results in order (top-level, so it pickles for spawned
    workers). A cell with a scaler runs on its own, autoscaled (:func:`_run_scaled`), and
    one with a gateway controller on its own too (:func:`_run_gateway`)."""
    from ..simulator import SimulatorBatch

    plain = [t for t in tasks if "scaler" not in t["policy"] and "gateway" not in t["policy"]]
    sims = [t["scenario"].simulator(t["seed"], **t["policy"], batch=False) for t in plain]
    if sims:
        SimulatorBatch(sims).run()
    done = {id(t): _cell_result(t, sim) for t, sim in zip(plain, sims)}
    return [done[id(t)] if id(t) in done else _run_gateway(t) if "gateway" in t["policy"] else _run_scaled(t)
            for t in tasks]


def _run_gateway(task: dict) -> dict:
    """One cell run by a gateway controller (a Gateway-v0 model), which drives its own
    simulator of the cell's scenario and seed."""
    from ..gateway.policy import make_policy

    controller = make_policy(task["policy"]["gateway"], "gateway")
    return _cell_result(task, controller.run(task["scenario"], task["seed"]))


def _run_scaled(task: dict) -> dict:
    """One cell under its scaler (``llmsched_gym.autoscaling.run_autoscaled``: the fleet
    the scaler asks for at time 0 starts warm, then it decides every
    ``DEFAULT_SCALE_INTERVAL_S``); the row data gains ``scaler``, ``gpu_seconds`` and
    ``cold_starts``."""
    from ..autoscaling import run_autoscaled

    policy = dict(task["policy"])
    scaler = policy.pop("scaler")
    sim = task["scenario"].simulator(task["seed"], **policy)
    sim, fleet = run_autoscaled(sim, scaler, DEFAULT_SCALE_INTERVAL_S)
    out = _cell_result(task, sim)
    out["cell"].update(scaler=str(getattr(scaler, "name", scaler)), gpu_seconds=fleet.gpu_seconds(),
                       cold_starts=fleet.cold_starts)
    return out


def _batches(tasks: list[dict], workers: int) -> list[list[int]]:
    """Task indices in batches: the seeds of each (point, policy) together, split further
    while there are fewer batches than workers."""
    groups: dict = {}
    for i, t in enumerate(tasks):
        groups.setdefault(t["key"][:2], []).append(i)
    batches = list(groups.values())
    while len(batches) < workers:
        big = max(range(len(batches)), key=lambda b: len(batches[b]))
        if len(batches[big]) < 2:
            break
        group = batches.pop(big)
        batches[big:big] = [group[: len(group) // 2], group[len(group) // 2:]]
    return batches


def _cell_result(task: dict, sim) -> dict:
    """The summary row data of one finished cell."""
    from .metrics import request_records, summarize

    sc = task["scenario"]
    s = summarize(sim)
    t = sim.table
    dispatched = t.instance[t.instance >= 0]
    per_inst = np.bincount(dispatched, minlength=sc.cluster.instances).astype(float)
    cell = {
        "instance_imbalance": float(per_inst.max() / per_inst.mean()) if per_inst.sum() else math.nan,
        "instance_cv": float(per_inst.std() / per_inst.mean()) if per_inst.sum() else math.nan,
        "sim_seconds": s["sim_seconds"], "wall_seconds": s["wall_seconds"],
        "router": sim.router.name if sim.router else None, "admission": sim.admission.name,
        "flow_control": sim.flow.name if sim.flow else None,
    }
    out = {"classes": s["classes"], "cell": cell}
    if getattr(sc, "profile", None) is not None:  # an inference-perf run: its stages as rows too
        from .metrics import run_windows, summarize_windows

        prof = sc.profile.scaled(sc.target_qps() / sc.base_rate())  # the stages as run at the cell's rate
        out["classes"] = {**s["classes"], **summarize_windows(sim, *run_windows(sim, prof))}
    if task.get("samples"):
        rec = request_records(t, sim.now)
        out["samples"] = {"ttft": rec["ttft_or_wait"].astype(np.float32), "tpot": rec["tpot"].astype(np.float32),
                          "e2e": rec["e2e"].astype(np.float32), "priority": t.priority.astype(np.int16)}
    return out


# ====================================================================== results
class ResultTable:
    """Rows of an evaluation (one per cell and class) plus per-request samples.

    ``rows`` is a list of dicts (columns: :data:`ID_COLUMNS`, :data:`METRIC_COLUMNS`,
    :data:`CELL_COLUMNS`); ``samples[(scenario, point, policy)]`` holds per-request
    ``ttft``/``tpot``/``e2e``/``priority`` arrays of the first seed when requested.
    """

    def __init__(self, rows: list[dict], samples: dict | None = None, meta: dict | None = None):
        self.rows = rows
        self.samples = samples or {}
        self.meta = meta or {}

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    @property
    def columns(self) -> list[str]:
        cols: list[str] = []
        for r in self.rows:
            cols += [k for k in r if k not in cols]
        return cols

    def filter(self, **match) -> "ResultTable":
        """Rows whose fields equal every ``match`` value (e.g. ``policy="lmetric", class_="all"``)."""
        match = {k.rstrip("_"): v for k, v in match.items()}
        return ResultTable([r for r in self.rows if all(r.get(k) == v for k, v in match.items())], self.samples, self.meta)

    def column(self, name: str) -> list:
        return [r.get(name) for r in self.rows]

    def unique(self, name: str) -> list:
        seen = []
        for r in self.rows:
            if r.get(name) not in seen:
                seen.append(r.get(name))
        return seen

    def to_csv(self, path: "str | os.PathLike | None" = None) -> str:
        """The table as CSV text (also written to ``path`` if given)."""
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns, lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
        text = buf.getvalue()
        if path is not None:
            from ..validation import atomic_write_text

            atomic_write_text(path, text)
        return text

    def to_json(self, path: "str | os.PathLike | None" = None, **extra) -> str:
        text = json.dumps({"meta": self.meta, **extra, "rows": self.rows}, indent=1, default=_json_default)
        if path is not None:
            from ..validation import atomic_write_text

            atomic_write_text(path, text)
        return text

    def to_dicts(self) -> list[dict]:
        return [dict(r) for r in self.rows]

    def stats(self, metrics=None, baseline: str | None = None, **kw) -> list[dict]:
        """Median and bootstrap CI per metric across seeds (see :func:`llmsched_gym.evaluation.stats.summarize_rows`)."""
        from .stats import DEFAULT_METRICS, summarize_rows

        return summarize_rows(self.rows, metrics or DEFAULT_METRICS, baseline=baseline, **kw)


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


# ====================================================================== evaluate
@checked_keywords
def evaluate(scenarios, policies, seeds: "int | Sequence[int]" = 3, *, qps=None, load=None, paper_qps=None,
             overrides: dict | None = None, workers: int | None = None, samples: bool = False,
             progress: "bool | Callable[[int, int], None]" = False, mp_context=None, backend=None,
             ray_address: str | None = None) -> ResultTable:
    """Run every (scenario, load point, policy combination, seed) cell.

    Args:
        scenarios: a name / YAML path / :class:`~llmsched_gym.scenarios.Scenario`, or a
            list of them; an entry may be ``(scenario, overrides)`` with its own rate list,
            e.g. ``("codegen", {"paper_qps": [4, 10, 16]})``.
        policies: policy combinations (``;``-separated string, or a list of strings /
            dicts; see the module docstring).
        seeds: a count (seeds ``0..n-1``) or an explicit list.
        qps / load / paper_qps: load points for every scenario (a number, a list, or a
            comma-separated string); at most one kind. Default: each scenario's default rate.
        overrides: scenario overrides for every scenario (``duration_s``, ``instances``...).
            ``duration_s`` / ``num_requests`` / ``horizon_s`` apply after the rate is
            resolved, so ``load`` keeps meaning a fraction of the unshortened scenario's
            capacity.
        workers: processes (default ``min(cpu count, cells)``; 1 runs in this process); with
            ``backend="ray"``, the local Ray instance's CPUs (or the tasks in flight on a cluster).
        samples: keep per-request TTFT/TPOT/E2E of the first seed of every
            (scenario, point, policy) in ``result.samples`` (for CDF figures).
        progress: True shows a rich progress bar; a callable gets ``(done, total)``.
        mp_context: multiprocessing context for the pool (default: the platform's).
        backend: where the cells run: ``"local"`` (default, a process pool), ``"ray"``
            (the ``[ray]`` extra), or a backend object
            (:mod:`llmsched_gym.evaluation.backends`). Results are the same on any.
        ray_address: with ``backend="ray"``: None starts a local Ray instance, ``"auto"``
            joins the running cluster, ``"ray://host:port"`` a remote one.

    Returns:
        A :class:`ResultTable`: one row per cell and class (each class of the workload
        plus ``all``).
    """
    plan = _plan(scenarios, policies, seeds, qps=qps, load=load, paper_qps=paper_qps, overrides=overrides,
                 samples=samples)
    start = time.perf_counter()
    results, n_workers = _execute(plan["tasks"], workers, progress, mp_context, backend, ray_address)
    table = _assemble(plan, results)
    table.meta.update(workers=n_workers, wall_seconds=time.perf_counter() - start)
    return table


def _plan(scenarios, policies, seeds, *, qps=None, load=None, paper_qps=None, overrides=None, samples=False,
          common: dict | None = None) -> dict:
    specs = [with_defaults(s, common) for s in parse_policies(policies)]
    if isinstance(seeds, (int, np.integer)):
        seed_list = list(range(check_number("seeds", seeds, **SEEDS)))
    else:
        from ..validation import check_seed

        seed_list = [check_seed(f"seeds[{i}]", s) for i, s in enumerate(seeds)]
        if not seed_list:
            raise ConfigError("no seed given")
        check_number("len(seeds)", len(seed_list), **SEEDS)
    points = resolve_points(scenarios, qps=qps, load=load, paper_qps=paper_qps, overrides=overrides)
    for pt in points:  # no request, none that fits, a horizon before the first: before any cell
        pt.sc.check_runnable(seed_list[0])
    tasks = []
    for pi, pt in enumerate(points):
        for si, spec in enumerate(specs):
            for k, seed in enumerate(seed_list):
                tasks.append({"scenario": pt.sc, "policy": spec.kwargs(), "seed": seed,
                              "samples": bool(samples) and k == 0, "key": (pi, si, seed)})
    return {"specs": specs, "seeds": seed_list, "points": points, "tasks": tasks}


def _execute(tasks: list[dict], workers, progress, mp_context=None, backend=None,
             ray_address: str | None = None) -> tuple[list[dict], int]:
    """Every cell through the backend, in task order; and how many workers ran them."""
    be = make_backend(backend, workers=workers, address=ray_address, mp_context=mp_context)
    total = len(tasks)
    batches = _batches(tasks, be.workers(total))
    run = [[tasks[i] for i in b] for b in batches]

    def in_task_order(per_batch: list[list[dict]]) -> list[dict]:
        results: list = [None] * total
        for b, rs in zip(batches, per_batch):
            for i, r in zip(b, rs):
                results[i] = r
        return results

    try:
        warm_up()  # a first compile says so before the bar is drawn, which then moves from the first cell
        if progress is True:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            with Progress(TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          TextColumn("eta"), TimeRemainingColumn()) as bar:
                task_id = bar.add_task("cells", total=total)
                results = be.map(_run_cells, run, lambda i, r: bar.advance(task_id, len(r)))
        else:
            done = [0]

            def tick(i, r):
                done[0] += len(r)
                if callable(progress):
                    progress(done[0], total)

            results = be.map(_run_cells, run, tick)
        return in_task_order(results), be.workers(len(run))
    finally:
        if be is not backend:  # made here: release it (a Ray instance it started)
            be.close()


def _assemble(plan: dict, results: list[dict]) -> ResultTable:
    points, specs = plan["points"], plan["specs"]
    rows, sample_map = [], {}
    for t, r in zip(plan["tasks"], results):
        pi, si, seed = t["key"]
        pt, spec = points[pi], specs[si]
        ident = {"scenario": pt.scenario, "point": pt.label, "rate_kind": pt.rate_kind, "rate": pt.rate,
                 "qps": pt.qps, "policy": spec.label, "router": r["cell"]["router"],
                 "flow_control": r["cell"]["flow_control"], "admission": r["cell"]["admission"], "seed": seed}
        for cls, m in r["classes"].items():
            row = dict(ident, **{"class": cls})
            row.update({k: m.get(k) for k in METRIC_COLUMNS})
            row.update({k: r["cell"][k] for k in CELL_COLUMNS})
            row.update({k: r["cell"][k] for k in SCALER_COLUMNS if k in r["cell"]})
            rows.append(row)
        if "samples" in r:
            sample_map[(pt.scenario, pt.label, spec.label)] = r["samples"]
    meta = {"seeds": plan["seeds"], "policies": [s.label for s in specs], "cells": len(plan["tasks"]),
            "points": [{"scenario": p.scenario, "point": p.label, "qps": p.qps} for p in points]}
    return ResultTable(rows, sample_map, meta)


def with_defaults(spec: PolicySpec, common: dict | None) -> PolicySpec:
    """``spec`` with the roles of ``common`` it does not set itself (none for a gateway
    controller, which sets every gateway role)."""
    if not common or spec.get("gateway") is not None:
        return spec
    roles = {**common, **spec.kwargs()}
    return PolicySpec(spec.label, tuple((r, roles[r]) for r in ROLE_KEYS if r in roles))


# ====================================================================== compare (CLI)
@dataclass
class Study:
    """One comparison: a scenario, its load points, the policies and the baseline."""

    scenario: Any
    policies: list
    baseline: str | None = None
    rates: dict = field(default_factory=dict)  # {"paper_qps": [4, 10, 16]}
    overrides: dict = field(default_factory=dict)
    classes: tuple = ("critical", "sheddable", "all")
    title: str = ""


def default_studies(quick: bool = True) -> list[Study]:
    """What ``llmsched-gym compare`` runs without arguments (about a minute on 2 cores)."""
    return [
        Study("codegen", ["static-usage-limit", "soft-reflective-ceiling"], "static-usage-limit",
              {"paper_qps": [4, 10, 16]}, {}, ("critical", "sheddable"),
              "flow control: soft-reflective ceiling vs static threshold 1.0 (router llm-d)"),
        Study("chatbot", ["jsq", "llm-d", "lmetric"], "jsq", {"load": [0.5]},
              {"duration_s": 60.0} if quick else {}, ("all",),
              "routing at 50% load (no gateway queue)"),
    ]


@checked_keywords
def run_studies(studies: list[Study], seeds, *, workers=None, progress=True, common: dict | None = None,
                mp_context=None, backend=None, ray_address: str | None = None
                ) -> list[tuple[Study, ResultTable, list[dict]]]:
    """Evaluate several studies in one run of the backend (:func:`evaluate`'s ``backend``);
    ``[(study, table, stats)]`` in order."""
    plans = [_plan([(st.scenario, {**st.rates, **st.overrides})], st.policies, seeds, samples=True, common=common)
             for st in studies]
    for st, plan in zip(studies, plans):
        labels = [s.label for s in plan["specs"]]
        if st.baseline is not None and st.baseline not in labels:
            raise ConfigError(f"baseline {st.baseline!r} is not one of the policies: {', '.join(labels)}")
    tasks = [t for plan in plans for t in plan["tasks"]]
    start = time.perf_counter()
    results, n_workers = _execute(tasks, workers, progress, mp_context, backend, ray_address)
    out, k = [], 0
    for st, plan in zip(studies, plans):
        n = len(plan["tasks"])
        table = _assemble(plan, results[k:k + n])
        table.meta.update(workers=n_workers, wall_seconds=time.perf_counter() - start)
        k += n
        out.append((st, table, table.stats(baseline=st.baseline)))
    return out


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
    from rich.table import Table

    from .stats import lookup

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
    from rich.table import Table

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


def make_figures(st: Study, table: ResultTable, stats: list[dict], out: Path, prefix: str | None = None) -> list[Path]:
    """The study's figures in ``out``: CDFs, change bars (with a baseline), load sweep (>= 2 points)."""
    from . import plots

    name = table.rows[0]["scenario"]
    prefix = prefix or name
    focus = st.classes[0] if st.classes else "all"
    files = []
    points = table.unique("point")
    cdf_point = points[-1]
    files.append(plots.plot_cdfs(table.samples, out / f"{prefix}-ttft-tpot-cdf.png", scenario=name, point=cdf_point,
                                 policies=table.unique("policy"), cls=focus))
    if st.baseline is not None and len(table.unique("policy")) > 1:
        files.append(plots.plot_change_bars(stats, out / f"{prefix}-change-vs-{_slug(st.baseline)}.png",
                                            scenario=name, baseline=st.baseline, cls=focus))
    if len(points) >= 2:
        files.append(plots.plot_load_sweep(stats, out / f"{prefix}-load-sweep.png", scenario=name, cls=focus))
    return files


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in s).strip("-")


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
    import argparse

    from ..flags import add_backend_args, add_force_arg, add_window_args

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
    p.add_argument("--staleness-policy", choices=("saturated", "ignore"),
                   help="the saturation detector's stalenessPolicy for every cell (default: the scenario's)")
    p.add_argument("--baseline", help="label of the policy entry that changes are relative to (default: the first)")
    p.add_argument("--seeds", type=int, default=3, help="number of paired seeds (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    add_window_args(p)
    p.add_argument("--class", dest="classes", help="comma-separated classes to show (default: critical,sheddable,all)")
    p.add_argument("--out", help="output directory (default results/compare-<timestamp>)")
    p.add_argument("--workers", type=int, help="processes (default: min(CPU count, cells)); with --backend ray, "
                   "the local Ray instance's CPUs")
    add_backend_args(p)
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    add_force_arg(p)
    p.set_defaults(func=cmd_compare)


def _default_policies(scenario) -> str:
    from ..scenarios import make_scenario

    sc = make_scenario(scenario)
    if sc.gateway.flow_control is not None:
        return "static-usage-limit;soft-reflective-ceiling"
    return "jsq;llm-d;lmetric"


def cmd_compare(args) -> int:

    from ..flags import backend_from_args, check_flags, policy_overrides, window_overrides
    from ..validation import check_name, check_output_dir

    check_flags(args, ["--seed", "--seeds", "--workers", "--duration", "--horizon"])
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
    if args.faults is not None:
        from ..faults import FaultSchedule

        overrides["faults"] = FaultSchedule.from_value(args.faults, "--faults")
    if args.staleness_policy is not None:
        overrides["staleness_policy"] = args.staleness_policy
    rates = {k: _parse_rates(k, getattr(args, k)) for k in RATE_KINDS if getattr(args, k) is not None}
    if args.scenario is None and args.policies is None and not rates:
        studies = default_studies()
        for st in studies:
            st.overrides.update(overrides)
        if args.baseline:
            raise ConfigError("--baseline needs --scenario and --policies")
        if args.classes:
            raise ConfigError("--class needs --scenario (the default study shows its own classes)")
    else:
        from ..scenarios import make_scenario

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
        results = run_studies(studies, seeds, progress=True, common=common, backend=backend)
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
        figures = _write_outputs(out, results, merged, all_stats, plots=not args.no_plots)
    except OutputError as e:  # e.g. --out removed or made read-only during the run: keep the results
        from ..validation import fallback_dir

        saved = fallback_dir("llmsched-gym-compare-")
        _write_outputs(saved, results, merged, all_stats, plots=not args.no_plots)
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


def _parse_rates(kind: str, text: str) -> list[float]:
    from ..flags import FLAG_RULES

    flag = f"--{kind.replace('_', '-')}"
    try:
        vals = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag}={text!r} is invalid; give comma-separated numbers") from None
    for v in vals:
        try:
            check_number(flag, v, **FLAG_RULES[flag])
        except ConfigError as e:  # the whole list, and what every value must be
            raise ConfigError(f"{flag}={text!r} is invalid; {str(e).split('; ', 1)[1].replace('it must', 'every value must', 1)}") from None
    dup = sorted({v for v in vals if vals.count(v) > 1})
    if dup:
        raise ConfigError(f"{flag}={text!r} is invalid; {', '.join(f'{v:g}' for v in dup)} given twice "
                          "(each point is simulated once)")
    return vals


def _write_outputs(out: Path, results, merged: "ResultTable", all_stats: list[dict], *, plots: bool) -> list[Path]:
    """Figures, results.csv, results.json and summary.csv in ``out`` (each written atomically)."""
    figures = []
    if plots:
        for st, table, stats in results:
            figures += make_figures(st, table, stats, out)
    merged.to_csv(out / "results.csv")
    merged.to_json(out / "results.json", stats=all_stats)
    ResultTable(all_stats).to_csv(out / "summary.csv")
    return figures


def scenario_classes(sc) -> list[str]:
    """The request classes a scenario's rows can have (its classes, then ``all``)."""
    from ..workloads.workload import class_name

    if sc.trace is not None:
        if sc.trace.critical_share is not None:
            prios = {0, -1}
        else:
            prios = {int(p) for p in np.unique(sc.trace.load().priority)}
    elif getattr(sc, "profile", None) is not None:  # an inference-perf run: one class, then its stages
        return [class_name(0)] + [f"stage{k + 1}" for k in range(len(sc.profile.stages))] + ["all"]
    else:
        prios = {int(c.priority) for spec in sc.specs for c in spec.classes}
    return [class_name(p) for p in sorted(prios, reverse=True)] + ["all"]
