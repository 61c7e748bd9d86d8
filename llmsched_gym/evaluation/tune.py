"""Parameter search for gateway policies: ``llmsched-gym tune``.

:func:`tune` searches the parameters of one or more policies (a router, a flow-control
policy, an admission policy, or several of them jointly) on one scenario at one load
point for an objective, with Optuna's TPE sampler (the ``[tune]`` extra). Every trial
evaluates its candidate through the harness's cells (:mod:`.harness`) on the same
*paired* seeds, so trials differ only by their parameters; the objective is computed from
the medians over those seeds, as ``compare`` reports them.

Search space (``--space``, one per role; several make a joint space)::

    POLICY:PARAM=LOW..HIGH[:log][:int][,PARAM=...][,PARAM=VALUE]
    'bailian:lam=0..1'
    'aibrix:imbalance=1..64:log'                 # an int parameter is searched over integers
    'llm-d:queue_weight=0..5,kv_weight=0..5,prefix_weight=0..5'
    'static-usage-limit:threshold=0.5..1'        # with a router space: a joint search

``PARAM=VALUE`` (no ``..``) fixes a parameter. Names, types and ranges are checked
against the policy's constructor (``llmsched-gym policies``); the roles a space leaves out
come from ``--router`` / ``--flow-control`` / ``--admission``, else from the scenario. A
YAML file (``--space space.yaml``) maps policy names to their parameters::

    llm-d:
      queue_weight: 0..5                         # the string form
      kv_weight: [0, 5]                          # low, high
      prefix_weight: {low: 0.1, high: 5, log: true}
      block_tokens: 64                           # fixed
    static-usage-limit:
      threshold: {low: 0.5, high: 1.0}

Objective (``--objective``), **minimized**: ``[max:]TERM[(+|-)TERM...]`` with
``TERM = [WEIGHT*]METRIC[:CLASS]`` (class default ``all``), e.g. ``ttft_mean``,
``ttft_p99:critical``, ``0.7*ttft_p99:critical+0.3*tpot_p99``; ``max:`` maximizes instead
(``max:goodput_rps``). Metrics are the harness's per-class columns (seconds for times;
``llmsched_gym.evaluation.harness.METRIC_COLUMNS``); a weighted sum is taken over the
medians of its terms.

Constraints (``--constraint``, any number): ``METRIC[:CLASS] >= BOUND`` or ``<=``, where
``BOUND`` is a number or ``[FACTOR*]POLICY`` (that policy combination's median of the same
metric and class, measured once on the same seeds, e.g.
``throughput_rps:sheddable>=0.9*static-usage-limit``). The best trial is the best
*feasible* one; TPE is told each trial's violations (Optuna's constrained TPE).

Determinism: the sampler is ``TPESampler(seed=sampler_seed)``, trials are asked and told
in order (``batch`` trials at a time, evaluated together), and a cell's result depends
only on its task, so the same arguments give the same trial table on any backend and any
number of workers. Float parameters are rounded to 4 significant digits (more where a
linear range needs them to resolve 1e-4 of its width) before a trial runs, so the best
policy spec reproduces its trial exactly. A trial whose parameters
repeat an earlier trial's reuses its result.

Where it runs: each round's cells (``batch`` trials x seeds) are one ``map`` of the
harness's backend, so ``--backend ray`` runs them as Ray tasks and ``--batch N`` keeps N
trials in flight on a cluster. Ray Tune is not used: its Optuna searcher is told trials in
completion order, which would make concurrent searches depend on timing
(docs/architecture.md, "Parameter search").

Outputs (:meth:`TuneResult.write`): ``best.txt`` (the best spec, usable as
``compare --policies``), ``best.json``, ``trials.csv`` / ``trials.json`` and one figure per
parameter, ``objective-vs-POLICY.PARAM.png``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import ConfigError, MissingExtraError
from ..gateway.policy import ROLE_KEYS, PolicySpec, list_policies, parse_policy
from ..validation import (
    Seed,
    SeedCount,
    atomic_write_text,
    check_call_kwargs,
    check_keys,
    check_number,
    check_seed,
    check_typed,
    checked_keywords,
    ranged,
    require_extra,
    signature_params,
    split_range,
    type_name,
)
from .backends import make_backend
from .harness import METRIC_COLUMNS, _assemble, _execute, resolve_points, scenario_classes, with_defaults

#: Metrics every trial records besides the objective's and constraints' (class ``all``).
REPORT_METRICS = ("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99")
#: Significant digits of a float parameter (the value the trial runs and the spec shows), at least.
DIGITS = 4


# ====================================================================== search space
@dataclass(frozen=True)
class Param:
    """One searched parameter of one policy."""

    role: str
    policy: str
    name: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    @property
    def key(self) -> str:
        """Its column and Optuna name: ``POLICY.PARAM``."""
        return f"{self.policy}.{self.name}"

    def distribution(self):
        from optuna.distributions import FloatDistribution, IntDistribution

        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(float(self.low), float(self.high), log=self.log)

    def value(self, v):
        """What the trial runs: an int, or a float rounded to :data:`DIGITS` significant digits,
        more where a linear range needs them to resolve 1e-4 of its width."""
        if self.integer:
            return int(v)
        v, digits = float(v), DIGITS
        if not self.log and v != 0:
            decimals = math.ceil(-math.log10((self.high - self.low) * 1e-4))
            digits = max(DIGITS, math.floor(math.log10(abs(v))) + 1 + decimals)
        return min(max(float(f"{v:.{digits}g}"), float(self.low)), float(self.high))

    def describe(self) -> str:
        return (f"{self.key}={_num(self.low)}..{_num(self.high)}" + (":log" if self.log else "")
                + (":int" if self.integer else ""))


@dataclass
class RoleSpace:
    """A policy for one role: its fixed parameters and its searched ones."""

    role: str
    policy: str
    fixed: dict = field(default_factory=dict)  # {name: text as in a policy spec}
    params: list = field(default_factory=list)  # [Param]

    def spec(self, values: dict) -> str:
        items = [f"{k}={v}" for k, v in self.fixed.items()]
        items += [f"{p.name}={_num(p.value(values[p.key]))}" for p in self.params]
        return self.policy + (":" + ",".join(items) if items else "")


@dataclass
class Space:
    """A (joint) search space: one :class:`RoleSpace` per role, in role order."""

    roles: list

    @property
    def params(self) -> list:
        return [p for r in self.roles for p in r.params]

    def spec(self, values: dict, common: dict | None = None) -> str:
        """The policy combination of ``values`` (``{POLICY.PARAM: value}``) as a spec string,
        with the roles of ``common`` the space does not set (``--router`` ...)."""
        by_role = {r.role: r for r in self.roles}
        parts = []
        for role in ROLE_KEYS:
            if role in by_role:
                parts.append(by_role[role].spec(values))
            elif common and role in common:
                v = common[role]
                parts.append(f"{role}=" + ("none" if v is None else str(getattr(v, "name", v))))
        return "+".join(parts)

    def describe(self) -> str:
        return "; ".join(r.spec({p.key: p.low for p in r.params}).partition(":")[0] + ":"
                         + ",".join([f"{k}={v}" for k, v in r.fixed.items()]
                                    + [p.describe().partition(".")[2] for p in r.params]) for r in self.roles)


def _num(v) -> str:
    """A number as a policy spec writes it (floats keep a '.' or 'e' so they parse back as floats)."""
    if isinstance(v, (bool, np.bool_)):
        return str(v).lower()
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return repr(float(v))


_RANGE_OPTIONS = ("log", "int")


def _range(where: str, text: str) -> tuple[float, float, set]:
    """``LOW..HIGH[:log][:int]`` -> (low, high, options)."""
    bounds, *opts = [s.strip() for s in text.split(":")]
    bad = [o for o in opts if o not in _RANGE_OPTIONS]
    if bad:
        raise ConfigError(f"{where}: unknown option {bad[0]!r}; allowed after the range: {', '.join(_RANGE_OPTIONS)}")
    lo, _, hi = bounds.partition("..")
    out = []
    for name, s in (("low", lo), ("high", hi)):
        try:
            out.append(float(s))
        except ValueError:
            raise ConfigError(f"{where}: {name} bound {s.strip()!r} is not a number; write LOW..HIGH, e.g. 0..1") from None
    return out[0], out[1], set(opts)


def _param(where: str, role: str, policy: str, factory, name: str, low, high, log: bool, integer: bool) -> Param:
    sig = {n: tp for n, tp, _ in signature_params(factory)}
    if name not in sig:  # the registry's message, listing what the policy takes
        check_call_kwargs(f"{where}: policy {policy!r}", factory, {name: None}, label=policy)
        raise ConfigError(f"{where}: policy {policy!r} has no declared parameter {name!r}")
    tp = split_range(sig[name])[0]  # the declared range is checked below, through the constructor
    if tp not in (int, float):
        kind = type_name(tp) or "untyped"
        tunable = [n for n, t in sig.items() if split_range(t)[0] in (int, float)]
        raise ConfigError(f"{where}: {policy}.{name} is a {kind} parameter; only int and float parameters can be "
                          f"searched ({policy} has: {', '.join(tunable) or 'none'})")
    for bname, b in (("low", low), ("high", high)):
        check_number(f"{where}: {policy}.{name} {bname} bound", b)
    if integer and tp is float:  # 0..1:int would search {0, 1} only
        raise ConfigError(f"{where}: {policy}.{name} is a float parameter; ':int' applies only to int parameters "
                          "(drop it to search the whole range)")
    integer = integer or tp is int
    if integer:
        for bname, b in (("low", low), ("high", high)):
            if float(b) != int(b):
                raise ConfigError(f"{where}: {policy}.{name} is searched over integers; {bname} bound {_num(b)} "
                                  "is not an integer")
        low, high = int(low), int(high)
    if not low < high:
        raise ConfigError(f"{where}: {policy}.{name}: low bound {_num(low)} must be below the high bound {_num(high)}")
    if log and low <= 0:
        raise ConfigError(f"{where}: {policy}.{name}: a :log range needs a low bound > 0 (got {_num(low)})")
    return Param(role, policy, name, low, high, bool(log), bool(integer))


def _role_space(where: str, policy: str, items: list[tuple[str, object]]) -> RoleSpace:
    """``items``: ``[(name, raw)]``; raw is a range string, a (low, high, opts) tuple or a fixed value."""
    registry = list_policies()
    try:
        role = parse_policy(policy).roles[0][0]  # unknown names: the registry's message, listing the known
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    factory = registry[policy]
    rs = RoleSpace(role, policy)
    seen = set()
    for name, raw in items:
        name = name.strip().replace("-", "_")
        if not name:
            raise ConfigError(f"{where}: empty parameter name; write PARAM=LOW..HIGH")
        if name in seen:
            raise ConfigError(f"{where}: parameter {name!r} is given twice")
        seen.add(name)
        if isinstance(raw, tuple):
            lo, hi, opts = raw
            rs.params.append(_param(where, role, policy, factory, name, lo, hi, "log" in opts, "int" in opts))
        elif isinstance(raw, str) and ".." in raw:
            lo, hi, opts = _range(f"{where}: {policy}.{name}", raw)
            rs.params.append(_param(where, role, policy, factory, name, lo, hi, "log" in opts, "int" in opts))
        else:
            rs.fixed[name] = _num(raw) if isinstance(raw, (int, float, np.number)) else str(raw).strip()
    # Every bound through the constructor (its own range checks), the others at their low bounds.
    for p in rs.params:
        for bound in (p.low, p.high):
            values = {q.key: q.low for q in rs.params}
            values[p.key] = bound
            try:
                parse_policy(rs.spec(values))
            except ConfigError as e:
                raise ConfigError(f"{where}: {p.key} bound {_num(bound)}: {e}") from None
    if not rs.params:
        parse_policy(rs.spec({}))  # fixed values checked too
    return rs


def _from_string(text: str) -> RoleSpace:
    where = f"--space {text!r}"
    policy, _, rest = text.strip().partition(":")
    policy = policy.strip()
    if "=" in policy:
        raise ConfigError(f"{where}: write POLICY:PARAM=LOW..HIGH (e.g. 'bailian:lam=0..1'); roles come from "
                          "the policy's name")
    items = []
    for item in filter(None, (s.strip() for s in rest.split(","))):
        name, eq, value = item.partition("=")
        if not eq or not value.strip():
            raise ConfigError(f"{where}: {item!r} must be PARAM=LOW..HIGH[:log][:int] or PARAM=VALUE")
        items.append((name, value.strip()))
    return _role_space(where, policy, items)


def _from_yaml(path: str) -> list[RoleSpace]:
    import yaml

    where = f"--space {path}"
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"{where}: cannot read the file ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{where}: expected a mapping of policy names to their parameters, e.g. "
                          "'bailian: {lam: 0..1}'")
    out = []
    for policy, params in data.items():
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ConfigError(f"{where}: {policy}: expected a mapping of parameters (PARAM: LOW..HIGH)")
        items = []
        for name, raw in params.items():
            w = f"{where}: {policy}.{name}"
            if isinstance(raw, list):
                if len(raw) != 2:
                    raise ConfigError(f"{w}: a list range is [low, high] (got {len(raw)} items)")
                raw = (raw[0], raw[1], set())
            elif isinstance(raw, dict):
                check_keys(w, raw, ("low", "high", "log", "int"))
                for k in ("low", "high"):
                    if k not in raw:
                        raise ConfigError(f"{w}: missing {k!r}; give low and high (log, int optional)")
                for k in ("log", "int"):
                    if not isinstance(raw.get(k, False), bool):
                        raise ConfigError(f"{w}: {k}={raw[k]!r} is invalid; it must be true or false")
                raw = (raw["low"], raw["high"], {k for k in ("log", "int") if raw.get(k)})
            elif isinstance(raw, bool):
                raw = str(raw).lower()
            items.append((str(name), raw))
        out.append(_role_space(where, str(policy), items))
    return out


def parse_space(space: "str | Sequence[str] | Space") -> Space:
    """A :class:`Space` from ``--space`` values (strings or YAML file paths; syntax in the
    module docstring). Raises a one-line ConfigError naming the bad part."""
    if isinstance(space, Space):
        return space
    items = [space] if isinstance(space, str) else list(space)
    if not items:
        raise ConfigError("--space: no search space given; e.g. --space 'bailian:lam=0..1'")
    roles = []
    for text in items:
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"--space {text!r} is invalid; give POLICY:PARAM=LOW..HIGH or a YAML file")
        if text.strip().endswith((".yaml", ".yml")) or Path(text).is_file():
            roles += _from_yaml(text.strip())
        else:
            roles.append(_from_string(text))
    by_role: dict = {}
    for r in roles:
        if r.role in by_role:
            raise ConfigError(f"--space: two policies for the {r.role} ({by_role[r.role].policy}, {r.policy}); "
                              "a joint space takes one policy per role")
        by_role[r.role] = r
    space = Space([by_role[k] for k in ROLE_KEYS if k in by_role])
    if not space.params:
        raise ConfigError(f"--space {'; '.join(items)!r}: nothing to search; give at least one PARAM=LOW..HIGH")
    return space


# ====================================================================== objective and constraints
_NUM = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_CLASS = r"[A-Za-z_][A-Za-z0-9_]*(?:-p-?\d+)?"
_TERM = re.compile(rf"\s*(?P<sign>[+-])?\s*(?:(?P<w>{_NUM})\s*\*\s*)?(?P<metric>{_NAME})(?::(?P<cls>{_CLASS}))?\s*")


@dataclass(frozen=True)
class Term:
    weight: float
    metric: str
    cls: str = "all"

    @property
    def key(self) -> str:
        return f"{self.metric}:{self.cls}"


def _check_metric(where: str, metric: str) -> None:
    if metric not in METRIC_COLUMNS:
        raise ConfigError(f"{where}: unknown metric {metric!r}; allowed: {', '.join(METRIC_COLUMNS)}")


@dataclass(frozen=True)
class Objective:
    """A weighted sum of per-class metric medians, minimized (``maximize``: maximized)."""

    text: str
    terms: tuple
    maximize: bool = False

    def value(self, medians: dict) -> float:
        v = sum(t.weight * medians[t.key] for t in self.terms)
        return float(v) if math.isfinite(v) else math.nan

    @property
    def direction(self) -> str:
        return "maximize" if self.maximize else "minimize"


def parse_objective(text: str) -> Objective:
    """``[max:]TERM[(+|-)TERM...]``, ``TERM = [WEIGHT*]METRIC[:CLASS]`` (see the module docstring)."""
    where = f"--objective {text!r}"
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"--objective {text!r} is invalid; give METRIC[:CLASS], e.g. ttft_mean or ttft_p99:critical")
    body, maximize = text.strip(), False
    if body.lower().startswith(("max:", "min:")):
        maximize, body = body[:3].lower() == "max", body[4:]
    terms, pos = [], 0
    while pos < len(body):
        m = _TERM.match(body, pos)
        if not m or m.end() == pos or (terms and not m.group("sign")):
            raise ConfigError(f"{where}: cannot parse at {body[pos:]!r}; write [max:][WEIGHT*]METRIC[:CLASS] joined "
                              "by + or -, e.g. 0.7*ttft_p99:critical+0.3*tpot_p99")
        _check_metric(where, m.group("metric"))
        w = float(m.group("w")) if m.group("w") else 1.0
        terms.append(Term(-w if m.group("sign") == "-" else w, m.group("metric"), m.group("cls") or "all"))
        pos = m.end()
    if not terms:
        raise ConfigError(f"{where}: no metric given; e.g. ttft_mean")
    return Objective(text.strip(), tuple(terms), maximize)


@dataclass(frozen=True)
class Constraint:
    """``METRIC[:CLASS] >= BOUND`` or ``<=``; ``BOUND = number`` or ``factor * reference policy``."""

    text: str
    term: Term
    op: str
    factor: float
    reference: str | None = None  # a policy combination, measured on the trials' seeds
    bound: float | None = None  # resolved (number, or factor x the reference's median)

    def violation(self, value: float) -> float:
        """> 0 when violated (by that much), <= 0 when met; inf when the metric is undefined."""
        if not math.isfinite(value) or self.bound is None or not math.isfinite(self.bound):
            return math.inf
        return (self.bound - value) if self.op == ">=" else (value - self.bound)


def parse_constraint(text: str) -> Constraint:
    where = f"--constraint {text!r}"
    m = re.fullmatch(r"\s*(.+?)\s*(>=|<=)\s*(.+?)\s*", text or "")
    if not m:
        raise ConfigError(f"{where}: write METRIC[:CLASS]>=BOUND or <=, where BOUND is a number or "
                          "[FACTOR*]POLICY, e.g. 'throughput_rps:sheddable>=0.9*static-usage-limit'")
    lhs, op, rhs = m.groups()
    t = re.fullmatch(rf"(?P<metric>{_NAME})(?::(?P<cls>{_CLASS}))?", lhs)
    if not t:
        raise ConfigError(f"{where}: the left side {lhs!r} must be one METRIC[:CLASS], e.g. throughput_rps:sheddable")
    _check_metric(where, t.group("metric"))
    term = Term(1.0, t.group("metric"), t.group("cls") or "all")
    try:
        number = float(rhs)
    except ValueError:
        number = None
    if number is not None:
        return Constraint(text.strip(), term, op, 1.0, None, check_number(f"{where}: bound", number))
    f = re.fullmatch(rf"({_NUM})\s*\*\s*(.+)", rhs)
    factor, ref = (float(f.group(1)), f.group(2).strip()) if f else (1.0, rhs)
    try:
        parse_policy(ref)
    except ConfigError as e:
        raise ConfigError(f"{where}: reference {ref!r}: {e}") from None
    return Constraint(text.strip(), term, op, factor, ref)


# ====================================================================== results
@dataclass
class TuneResult:
    """The trials of a search and the best one.

    ``trials``: one dict per trial (``trial``, one column per parameter, ``spec``,
    ``objective``, ``feasible``, ``violation``, ``state``, metric medians as
    ``METRIC:CLASS``); ``best``: the best feasible trial (the least violating one if none is
    feasible, None if no trial has a finite objective); ``meta``: the search's settings.
    """

    trials: list
    best: dict | None
    meta: dict
    space: Space
    objective: Objective
    wall_seconds: float = 0.0

    @property
    def best_spec(self) -> str | None:
        return self.best["spec"] if self.best else None

    def columns(self) -> list[str]:
        cols: list[str] = []
        for r in self.trials:
            cols += [k for k in r if k not in cols]
        return cols

    def to_csv(self, path=None) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns(), lineterminator="\n")
        w.writeheader()
        for r in self.trials:
            w.writerow({k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v) for k, v in r.items()})
        text = buf.getvalue()
        if path is not None:
            atomic_write_text(path, text)
        return text

    def to_json(self, path=None) -> str:
        text = json.dumps(_finite({"meta": self.meta, "best": self.best, "trials": self.trials}), indent=1)
        if path is not None:
            atomic_write_text(path, text)
        return text

    def write(self, out, *, plots: bool = True, extra: dict | None = None) -> list[Path]:
        """``best.txt``, ``best.json``, ``trials.csv``, ``trials.json`` and (``plots``) the
        figures in ``out``; returns the figures' paths."""
        out = Path(out)
        figures = self.figures(out) if plots else []
        self.to_csv(out / "trials.csv")
        self.to_json(out / "trials.json")
        atomic_write_text(out / "best.json", json.dumps(_finite(self.best_summary(extra)), indent=1))
        atomic_write_text(out / "best.txt", (self.best_spec or "") + "\n")
        return figures

    def best_summary(self, extra: dict | None = None) -> dict:
        """What ``best.json`` holds: the best spec, its objective, parameters and metric
        medians, and the search's settings (``search``)."""
        b = self.best or {}
        keys = [p.key for p in self.space.params]
        return {"spec": self.best_spec, "objective": b.get("objective"), "objective_text": self.objective.text,
                "direction": self.objective.direction, "trial": b.get("trial"), "feasible": b.get("feasible"),
                "params": {k: b[k] for k in keys if k in b},
                "metrics": {k: v for k, v in b.items() if ":" in k}, "search": self.meta, **(extra or {})}

    def figures(self, out) -> list[Path]:
        """One figure per parameter: the objective of every trial against its value."""
        from . import plots

        files = []
        ok = [r for r in self.trials if r["objective"] is not None and math.isfinite(r["objective"])]
        for p in self.space.params:
            series = [{"label": self.meta.get("scenario", ""), "x": [r[p.key] for r in ok],
                       "y": [r["objective"] for r in ok], "feasible": [r["feasible"] for r in ok]}]
            best = (self.best[p.key], self.best["objective"]) if self.best else None
            files.append(plots.plot_objective_vs_param(
                series, out / f"objective-vs-{p.key}.png", xlabel=p.key, ylabel=f"{self.objective.text} "
                f"({self.objective.direction}d)", log=p.log, connect=len(self.space.params) == 1, best=best,
                title=f"{self.meta.get('scenario', '')} @ {self.meta.get('point', '')}: {len(ok)} trials"))
        return files


def _finite(o):
    """``o`` with non-finite floats as None (valid JSON)."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def _import_optuna():
    require_extra("tune", modules=("optuna",), extra="tune")
    import optuna

    if not hasattr(optuna.trial.Trial, "set_constraint"):
        raise MissingExtraError(f"tune needs optuna >= 5 (installed: {optuna.__version__}): "
                                'pip install -e ".[tune]"')
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _medians(rows: list[dict], label: str, keys: Sequence[tuple[str, str]]) -> dict:
    """``{METRIC:CLASS: median over seeds}`` of one policy's rows (NaN values dropped, as the harness)."""
    out = {}
    for metric, cls in keys:
        vals = np.array([r[metric] for r in rows if r["policy"] == label and r["class"] == cls
                         and r[metric] is not None], float)
        vals = vals[np.isfinite(vals)]
        out[f"{metric}:{cls}"] = float(np.median(vals)) if len(vals) else math.nan
    return out


# ====================================================================== the search
#: The most trials of one search (each runs every seed; beyond, a search never ends).
MAX_TRIALS = 10_000
#: A number of trials (or of trials evaluated together); of random trials before TPE (may be 0).
TrialCount = ranged(int, ge=1, le=MAX_TRIALS)
StartupTrials = ranged(int, ge=0, le=MAX_TRIALS)


@checked_keywords
def tune(scenario, space, objective: "str | Objective" = "ttft_mean", *, constraints: Sequence = (),
         trials: int = 20, seeds: "int | Sequence[int]" = 2, qps=None, load=None, paper_qps=None,
         overrides: dict | None = None, common: dict | None = None, sampler_seed: int = 0,
         startup_trials: int = 10, batch: int = 1, workers: int | None = None, backend=None,
         ray_address: str | None = None, progress: "Callable[[int, int, dict | None], None] | None" = None
         ) -> TuneResult:
    """Search ``space`` on ``scenario`` at one load point for ``objective``.

    Args:
        scenario: a scenario name, YAML path or :class:`~llmsched_gym.scenarios.Scenario`.
        space: ``--space`` strings / YAML paths, or a :class:`Space` (module docstring).
        objective: the objective text (minimized unless ``max:``), or an :class:`Objective`.
        constraints: ``METRIC[:CLASS]>=BOUND`` / ``<=`` texts (module docstring).
        trials: number of trials; seeds: a count (``0..n-1``) or the list every trial uses.
        qps / load / paper_qps: one load point (default: the scenario's rate).
        overrides: scenario overrides (``duration_s`` ...), as :func:`~.harness.evaluate`.
        common: roles the space does not set, as ``Scenario.simulator`` keywords
            (``{"flow_control": None}``).
        sampler_seed: the TPE sampler's seed; startup_trials: random trials before TPE.
        batch: trials asked and evaluated together (their cells in one map of the
            backend: parallelism across trials on a cluster); results depend on it.
        workers / backend / ray_address: where the cells run (:func:`~.harness.evaluate`).
        progress: called with ``(done, total, best trial so far)`` after each trial (the CLI
            draws a bar with it, :class:`llmsched_gym.cli.progress.ProgressBar`).
    """
    space = parse_space(space)
    obj = objective if isinstance(objective, Objective) else parse_objective(objective)
    cons = [c if isinstance(c, Constraint) else parse_constraint(c) for c in constraints]
    trials = check_typed("trials", trials, TrialCount)
    startup_trials = check_typed("startup_trials", startup_trials, StartupTrials)
    batch = check_typed("batch", batch, TrialCount)
    sampler_seed = check_typed("sampler_seed", sampler_seed, Seed)
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        seed_list = list(range(check_typed("seeds", seeds, SeedCount)))
    else:
        seed_list = [check_seed(f"seeds[{i}]", s) for i, s in enumerate(seeds)]
        if not seed_list:
            raise ConfigError("no seed given")
    if common:
        clash = [r for r in space.roles if r.role in common]
        if clash:
            raise ConfigError(f"the {clash[0].role} is set by both --space ({clash[0].policy}) and "
                              f"--{clash[0].role.replace('_', '-')}; give it once")
    points = resolve_points(scenario, qps=qps, load=load, paper_qps=paper_qps, overrides=overrides)
    if len(points) != 1:
        raise ConfigError(f"tune searches at one load point; got {len(points)} "
                          f"({', '.join(p.label for p in points)}): give one value")
    pt = points[0]
    pt.sc.check_runnable(seed_list[0])  # no request, none that fits, a horizon before the first
    classes = scenario_classes(pt.sc)
    keys: list[tuple[str, str]] = []
    for t in [*obj.terms, *(c.term for c in cons), *(Term(1.0, m) for m in REPORT_METRICS)]:
        if t.cls not in classes:
            what = "--objective" if t in obj.terms else "--constraint"
            raise ConfigError(f"{what}: class {t.cls!r} is invalid; scenario {pt.scenario!r} has the classes "
                              f"{', '.join(classes)}")
        if (t.metric, t.cls) not in keys:
            keys.append((t.metric, t.cls))
    parse_policy(space.spec({q.key: q.low for q in space.params}, common))  # valid with the common roles
    optuna = _import_optuna()  # after the checks: bad input says so with or without the extra

    be = make_backend(backend, workers=workers, address=ray_address)
    cache: dict[str, dict] = {}
    start = time.perf_counter()

    def run(specs: list[str]) -> None:
        """Evaluate the specs not in the cache (one map of the backend) and cache their medians."""
        todo = list(dict.fromkeys(s for s in specs if s not in cache))
        if not todo:
            return
        pspecs = [with_defaults(PolicySpec(f"c{i}", parse_policy(s).roles), common) for i, s in enumerate(todo)]
        tasks = [{"scenario": pt.sc, "policy": ps.kwargs(), "seed": seed, "samples": False, "key": (0, si, seed)}
                 for si, ps in enumerate(pspecs) for seed in seed_list]
        results, _ = _execute(tasks, None, False, backend=be)  # the seeds of a spec as one batched run
        table = _assemble({"points": [pt], "specs": pspecs, "seeds": seed_list, "tasks": tasks}, results)
        for ps, s in zip(pspecs, todo):
            cache[s] = _medians(table.rows, ps.label, keys)

    try:
        # references of the constraints, once, on the same seeds
        refs = [c.reference for c in cons if c.reference is not None]
        run(refs)
        resolved = []
        for c in cons:
            bound = c.bound if c.reference is None else c.factor * cache[c.reference][c.term.key]
            resolved.append(Constraint(c.text, c.term, c.op, c.factor, c.reference, bound))
        cons = resolved
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=sampler_seed, n_startup_trials=startup_trials,
                                                 multivariate=len(space.params) > 1, constant_liar=batch > 1)
        study = optuna.create_study(direction=obj.direction, sampler=sampler)
        dists = {p.key: p.distribution() for p in space.params}
        rows: list[dict] = []
        while len(rows) < trials:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                asked = [study.ask(dists) for _ in range(min(batch, trials - len(rows)))]
            values = [{p.key: p.value(t.params[p.key]) for p in space.params} for t in asked]
            specs = [space.spec(v, common) for v in values]
            run(specs)
            for t, v, s in zip(asked, values, specs):
                med = cache[s]
                value = obj.value(med)
                viol = [c.violation(med[c.term.key]) for c in cons]
                for i, x in enumerate(viol):
                    t.set_constraint(f"c{i}", x)
                if math.isfinite(value):
                    study.tell(t, value)
                else:
                    study.tell(t, state=optuna.trial.TrialState.FAIL)
                row = {"trial": t.number, **v, "spec": s, "objective": value,
                       "feasible": all(x <= 0 for x in viol), "violation": float(sum(max(x, 0.0) for x in viol)),
                       "state": "complete" if math.isfinite(value) else "failed", **med}
                rows.append(row)
                if progress:
                    progress(len(rows), trials, _best(rows, obj))
    finally:
        if be is not backend:
            be.close()
    meta = {"scenario": pt.scenario, "point": pt.label, "qps": pt.qps, "space": space.describe(),
            "objective": obj.text, "direction": obj.direction,
            "constraints": [{"text": c.text, "bound": c.bound, "reference": c.reference} for c in cons],
            "trials": trials, "seeds": seed_list, "sampler": "optuna TPESampler", "sampler_seed": sampler_seed,
            "startup_trials": startup_trials, "batch": batch, "optuna": optuna.__version__,
            "evaluated": len(cache) - len(set(refs)), "overrides": dict(overrides or {}),
            "common": {k: (None if v is None else str(v)) for k, v in (common or {}).items()}}
    # The wall time is not in meta: the trial tables stay deterministic.
    return TuneResult(rows, _best(rows, obj), meta, space, obj, time.perf_counter() - start)


def _best(rows: list[dict], obj: Objective) -> dict | None:
    """The best feasible trial (ties: the first); if none is feasible, the least violating."""
    ok = [r for r in rows if r["state"] == "complete"]
    if not ok:
        return None
    feasible = [r for r in ok if r["feasible"]]
    sign = -1.0 if obj.maximize else 1.0
    if feasible:
        return min(feasible, key=lambda r: (sign * r["objective"], r["trial"]))
    return min(ok, key=lambda r: (r["violation"], sign * r["objective"], r["trial"]))
