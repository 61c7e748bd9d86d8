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

from ..autoscaling import run_autoscaled
from ..errors import ConfigError
from ..gateway.policy import ROLE_KEYS, PolicySpec, make_policy, parse_policy
from ..scenarios import Scenario, make_scenario
from ..simulator import SimulatorBatch
from ..validation import (
    SeedCount,
    atomic_write_text,
    check_seed,
    check_typed,
    checked_keywords,
    require_extra,
)
from ..workloads.workload import class_name
from . import metrics
from .backends import make_backend, warm_up
from .stats import DEFAULT_METRICS, summarize_rows

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
#: Columns of the cells a planner ran (``gateway=lookahead``): its decisions and their rate.
PLANNER_COLUMNS = ("decisions", "decisions_per_s")
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
    controller = make_policy(task["policy"]["gateway"], "gateway")
    out = _cell_result(task, controller.run(task["scenario"], task["seed"]))
    if getattr(controller, "plan_seconds", 0):  # a planner (lookahead) reports its decision rate
        out["cell"].update(decisions=controller.decisions,
                           decisions_per_s=controller.decisions / controller.plan_seconds)
    fleet = getattr(controller, "fleet", None)  # a planner of the fleet size: as a scaler's cell
    if fleet is not None:
        out["cell"].update(scaler=controller.name, gpu_seconds=fleet.gpu_seconds(), cold_starts=fleet.cold_starts)
    return out


def _run_scaled(task: dict) -> dict:
    """One cell under its scaler (``llmsched_gym.autoscaling.run_autoscaled``: the fleet
    the scaler asks for at time 0 starts warm, then it decides every
    ``DEFAULT_SCALE_INTERVAL_S``); the row data gains ``scaler``, ``gpu_seconds`` and
    ``cold_starts``."""
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
    sc = task["scenario"]
    s = metrics.summarize(sim)
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
        prof = sc.profile.scaled(sc.target_qps() / sc.base_rate())  # the stages as run at the cell's rate
        out["classes"] = {**s["classes"], **metrics.summarize_windows(sim, *metrics.run_windows(sim, prof))}
    if task.get("samples"):
        rec = metrics.request_records(t, sim.now)
        out["samples"] = {"ttft": rec["ttft_or_wait"].astype(np.float32), "tpot": rec["tpot"].astype(np.float32),
                          "e2e": rec["e2e"].astype(np.float32), "priority": t.priority.astype(np.int16)}
    return out


# ====================================================================== results
class ResultTable:
    """Rows of an evaluation (one per cell and class) plus per-request samples.

    ``rows`` is a list of dicts (columns: :data:`ID_COLUMNS`, :data:`METRIC_COLUMNS`,
    :data:`CELL_COLUMNS`); ``samples[(scenario, point, policy)]`` holds per-request
    ``ttft``/``tpot``/``e2e``/``priority`` arrays of the first seed when requested.
    :meth:`to_frame` (or ``evaluate(..., as_frame=True)``) gives the rows as a pandas
    DataFrame. The table itself stays this small class rather than a DataFrame: pandas
    is 80 MB installed and 0.4-2 s to import (measured here), which every ``compare``,
    ``tune`` and worker process would pay for a few hundred rows.
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
            atomic_write_text(path, text)
        return text

    def to_json(self, path: "str | os.PathLike | None" = None, **extra) -> str:
        text = json.dumps({"meta": self.meta, **extra, "rows": self.rows}, indent=1, default=_json_default)
        if path is not None:
            atomic_write_text(path, text)
        return text

    def to_dicts(self) -> list[dict]:
        return [dict(r) for r in self.rows]

    def to_frame(self):
        """The rows as a pandas DataFrame (columns as :attr:`columns`, ``meta`` in
        ``frame.attrs["meta"]``); needs pandas (the ``[pandas]`` extra)."""
        require_extra("ResultTable.to_frame", ("pandas",), extra="pandas")
        import pandas as pd  # optional: the [pandas] extra

        frame = pd.DataFrame(self.rows, columns=self.columns)
        frame.attrs["meta"] = self.meta
        return frame

    def stats(self, metrics=None, baseline: str | None = None, **kw) -> list[dict]:
        """Median and bootstrap CI per metric across seeds (see :func:`llmsched_gym.evaluation.stats.summarize_rows`)."""
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
             progress: "Callable[[int, int], None] | None" = None, mp_context=None, backend=None,
             ray_address: str | None = None, as_frame: bool = False) -> ResultTable:
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
        progress: called with ``(done, total)`` as cells finish (the CLI draws a bar with it,
            :class:`llmsched_gym.cli.progress.ProgressBar`).
        mp_context: multiprocessing context for the pool (default: the platform's).
        backend: where the cells run: ``"local"`` (default, a process pool), ``"ray"``
            (the ``[ray]`` extra), or a backend object
            (:mod:`llmsched_gym.evaluation.backends`). Results are the same on any.
        ray_address: with ``backend="ray"``: None starts a local Ray instance, ``"auto"``
            joins the running cluster, ``"ray://host:port"`` a remote one.
        as_frame: return the rows as a pandas DataFrame (:meth:`ResultTable.to_frame`; the
            ``[pandas]`` extra), checked before any cell runs.

    Returns:
        A :class:`ResultTable` (or with ``as_frame``, its DataFrame): one row per cell and
        class (each class of the workload plus ``all``).
    """
    if as_frame:
        require_extra("evaluate(as_frame=True)", ("pandas",), extra="pandas")
    plan = _plan(scenarios, policies, seeds, qps=qps, load=load, paper_qps=paper_qps, overrides=overrides,
                 samples=samples)
    start = time.perf_counter()
    results, n_workers = _execute(plan["tasks"], workers, progress, mp_context, backend, ray_address)
    table = _assemble(plan, results)
    table.meta.update(workers=n_workers, wall_seconds=time.perf_counter() - start)
    return table.to_frame() if as_frame else table


def _plan(scenarios, policies, seeds, *, qps=None, load=None, paper_qps=None, overrides=None, samples=False,
          common: dict | None = None) -> dict:
    specs = [with_defaults(s, common) for s in parse_policies(policies)]
    if isinstance(seeds, (int, np.integer)):
        seed_list = list(range(check_typed("seeds", seeds, SeedCount)))
    else:
        seed_list = [check_seed(f"seeds[{i}]", s) for i, s in enumerate(seeds)]
        if not seed_list:
            raise ConfigError("no seed given")
        check_typed("len(seeds)", len(seed_list), SeedCount)
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
        done = [0]

        def tick(i, r):
            done[0] += len(r)
            if progress:
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
            row.update({k: r["cell"][k] for k in SCALER_COLUMNS + PLANNER_COLUMNS if k in r["cell"]})
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
def run_studies(studies: list[Study], seeds, *, workers=None, progress=None, common: dict | None = None,
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


def write_outputs(out: Path, results, merged: "ResultTable", all_stats: list[dict], *, plots: bool) -> list[Path]:
    """Figures, results.csv, results.json and summary.csv of a compare run in ``out`` (each
    written atomically)."""
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
