"""Scenarios: a cluster + a workload + default gateway policies + a horizon (docs/scenarios.md).

A :class:`Scenario` is everything needed to run one experiment except the policies
under test and the seed. Built-in scenarios (:mod:`llmsched_gym.builtin_scenarios`,
registered on ``import llmsched_gym``) have fixed names so that results are
comparable across versions; users add their own with :func:`register_scenario` or write
them as YAML (:func:`load_scenario`, ``llmsched-gym run --scenario path.yaml``).

Rates: a scenario's workload has a *base* request rate (the spec's ``rate``, or a
trace's own mean rate). ``make_scenario(name, qps=...)`` sets the rate literally;
``load=...`` sets it to a fraction of the cluster's capacity for this workload, measured
by :func:`measure_capacity`; ``paper_qps=...`` (seed flow-control scenarios) maps a
published QPS point to ``load = paper_qps / published_capacity_qps``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Callable, Literal

import numpy as np
import yaml
from pydantic import BaseModel, BeforeValidator, Field, create_model

from .capacity import METHOD, capacity_record, steady_state
from .engine import EngineConfig
from .errors import ConfigError
from .faults import FaultSchedule
from .gateway.epp import gateway_from_yaml
from .gateway.eviction import EvictionConfig
from .gateway.policy import check_policy_ref, make_policy
from .gateway.saturation import SaturationConfig
from .simulator import ClusterConfig, GatewayConfig, Simulator
from .validation import (
    MAX_QPS,
    MAX_REQUESTS,
    STRICT,
    Duration,
    Fraction,
    LoadFactor,
    Name,
    Rate,
    RequestCount,
    check_keys,
    check_number,
    check_seed,
    checked_keywords,
    config_dataclass,
    from_mapping,
    invalid,
    model_fields,
    validate_model,
)
from .workloads.inference_perf import InferencePerfProfile
from .workloads.synthetic import WorkloadSpec, generate
from .workloads.trace_registry import TRACES, locate, trace_dir
from .workloads.traces import TRACE_FORMATS, assign_priorities, load_trace
from .workloads.workload import Workload, merge_workloads


@config_dataclass("trace")
class TraceSource:
    """A workload replayed from a trace file.

    Args:
        path: the file; a relative path is resolved against the trace directory
            (``LLMSCHED_TRACE_DIR`` or ``../shared/traces`` beside the repository).
        format: ``mooncake``, ``azure`` or ``blis``.
        limit: use only the first ``limit`` requests.
        critical_share: fraction of requests made critical (priority 0, chosen with the
            seed); the rest are sheddable (-1). None keeps the trace's priorities.
    """

    path: Name
    format: Literal[TRACE_FORMATS]
    limit: RequestCount | None = None
    critical_share: Fraction | None = None

    def resolve(self) -> Path:
        p = Path(self.path).expanduser()
        if not p.is_absolute():
            p = trace_dir() / p
        if not p.exists():
            # a trace name, or a path under the download cache
            found = None if Path(self.path).is_absolute() else locate(self.path)
            if found is not None:
                return found
            raise ConfigError(
                f"trace file {p} not found; download it (`llmsched-gym traces list`, see docs/scenarios.md) and "
                f"set workload.trace.path or the LLMSCHED_TRACE_DIR environment variable"
            )
        return p

    def load(self) -> Workload:
        key = (str(self.resolve()), self.format, self.limit)
        if key not in _TRACE_CACHE:
            kwargs = {} if self.format == "blis" else {"limit": self.limit}
            _TRACE_CACHE[key] = load_trace(self.resolve(), self.format, **kwargs)
        return _TRACE_CACHE[key]

    def base_rate(self) -> float:
        return self.load().mean_rate


_TRACE_CACHE: dict[tuple, Workload] = {}
_DIGESTS: dict[tuple, str] = {}


def _file_digest(p: Path) -> str:
    """SHA-256 of a file's content (memoized per path, size and mtime): the same trace
    has the same fingerprint on every machine."""
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()[:16]
    return _DIGESTS[key]


#: Cluster options added after capacities were first shipped, and their defaults.
_CLUSTER_OPTION_DEFAULTS = {"cpu_kv_gb": 0.0, "cpu_link_gbps": None, "cpu_kv_events": True,
                            "cpu_kv_shared": False, "cold_start_s": None, "prefill_instances": 0,
                            "kv_link": "rdma", "kv_link_gbps": None, "kv_link_latency_s": None, "pools": None}


@checked_keywords
@dataclass
class Scenario:
    """One experiment setting.

    Args:
        name: registry name.
        description: one line for ``llmsched-gym scenarios``.
        cluster: the instances (:class:`ClusterConfig`).
        workload: a :class:`WorkloadSpec`, a list of them (a mixture, generated with
            independent seeds and merged), or a :class:`TraceSource`.
        gateway: default policies (overridden per run by the evaluation harness).
        horizon_s: stop time; None runs until every request has finished.
        qps / load / paper_qps: the rate setting; at most one is used, in that order.
        published_capacity_qps: capacity implied by the published regimes (for paper_qps).
        default_rate: what an unspecified rate means: ``{"load": 0.5}``, ``{"paper_qps": 16}``
            or ``{}`` (the workload's own base rate).
        capacity_horizon_s: arrival window used when measuring capacity.
        faults: faults inside the cluster (:class:`~llmsched_gym.faults.FaultSchedule` or a
            mapping of its fields): crashes, scrape outages, stragglers; None: none.
            Capacity is measured without them.
    """

    name: str
    description: str
    cluster: ClusterConfig
    workload: WorkloadSpec | list | TraceSource
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    horizon_s: float | None = None
    qps: float | None = None
    load: float | None = None
    paper_qps: float | None = None
    published_capacity_qps: float | None = None
    default_rate: dict = field(default_factory=dict)
    capacity_horizon_s: float = 120.0
    faults: FaultSchedule | dict | None = None

    def __post_init__(self) -> None:
        self.faults = FaultSchedule.from_value(self.faults)

    # ------------------------------------------------------------------ rates
    @property
    def trace(self) -> TraceSource | None:
        """The trace this scenario replays (None: a synthetic workload)."""
        return self.workload if isinstance(self.workload, TraceSource) else None

    @property
    def profile(self) -> InferencePerfProfile | None:
        """The inference-perf run this scenario replays (None: another workload)."""
        return self.workload if isinstance(self.workload, InferencePerfProfile) else None

    @property
    def specs(self) -> list[WorkloadSpec]:
        if isinstance(self.workload, (TraceSource, InferencePerfProfile)):
            return []
        return list(self.workload) if isinstance(self.workload, (list, tuple)) else [self.workload]

    def base_rate(self) -> float:
        """Request rate of the workload as written (before any qps/load setting)."""
        if isinstance(self.workload, TraceSource):
            return self.workload.base_rate()
        if self.profile is not None:
            return self.profile.mean_rate
        return float(sum(s.arrival.rate for s in self.specs))

    def target_qps(self) -> float:
        """The request rate this scenario runs at (may measure capacity, cached)."""
        setting = {k: getattr(self, k) for k in ("qps", "load", "paper_qps") if getattr(self, k) is not None}
        if not setting:
            setting = dict(self.default_rate)
        if "qps" in setting:
            return float(setting["qps"])
        if "paper_qps" in setting:
            if not self.published_capacity_qps:
                raise ConfigError(f"scenario {self.name!r} has no published capacity; use qps or load instead of paper_qps")
            setting = {"load": setting["paper_qps"] / self.published_capacity_qps}
        if "load" in setting:
            return float(setting["load"]) * measure_capacity(self)
        return self.base_rate()

    def at_rate(self, qps: float) -> "Scenario":
        """A copy running at exactly ``qps`` requests/s."""
        check_number("qps", qps, gt=0)
        return replace(self, qps=float(qps), load=None, paper_qps=None)

    # ------------------------------------------------------------------ building
    def rate_setting(self) -> str | None:
        """The rate this scenario was given as ``qps=...`` (or load, paper_qps; None: the
        workload's own rate), for messages."""
        setting = {k: getattr(self, k) for k in ("qps", "load", "paper_qps") if getattr(self, k) is not None}
        setting = setting or dict(self.default_rate)
        return ", ".join(f"{k}={v:g}" for k, v in setting.items()) or None

    def _checked_qps(self) -> float:
        """:meth:`target_qps`, within the rate any real cluster takes (a load far above
        capacity, or a trace squeezed by a tiny time scale, is an error)."""
        qps = self.target_qps()
        if qps > MAX_QPS:
            raise ConfigError(f"{self.rate_setting()} is invalid; it means {qps:.4g} req/s, above the "
                              f"{MAX_QPS:g} req/s any real cluster takes")
        return qps

    def check_size(self, rate: str | None = None) -> None:
        """The rate within what a real cluster takes, and the requests it generates within
        what one simulation holds, before any is allocated; ``rate`` names the setting
        in the message (default: this scenario's)."""
        qps = self._checked_qps()
        factor = qps / self.base_rate()
        expected = sum(s.num_requests if s.num_requests is not None else s.arrival.rate * factor * s.duration_s
                       for s in self.specs)
        if expected > MAX_REQUESTS:
            window = ", ".join(f"{s.duration_s:g} s" for s in self.specs if s.duration_s is not None)
            raise ConfigError(f"{rate or self.rate_setting() or f'qps={qps:g}'} is invalid for scenario "
                              f"{self.name!r}: about {expected:.3g} requests over its {window} arrival window, more "
                              f"than the {MAX_REQUESTS:,} one simulation takes; lower the rate or the window "
                              "(duration_s)")

    @checked_keywords
    def build_workload(self, seed: int = 0) -> Workload:
        """The requests of this scenario for ``seed`` (same seed, same requests)."""
        check_seed("seed", seed)
        if isinstance(self.workload, TraceSource):
            w = self.workload.load()
            if self.rate_setting() is not None:
                if w.duration_s <= 0:  # no span, no rate: nothing to rescale
                    raise ConfigError(f"{self.rate_setting()} does not apply to trace {self.workload.path}: its "
                                      f"{len(w)} request(s) all arrive at t={w.arrival_s[0]:g} s (a zero time span); "
                                      "replay it at its own timestamps (no rate)")
                w = w.scaled(w.mean_rate / self._checked_qps())
            if self.workload.critical_share is not None:
                w = assign_priorities(w, self.workload.critical_share, seed=seed)
            return w
        self.check_size()
        factor = self.target_qps() / self.base_rate()
        if self.profile is not None:  # a qps / load setting scales every stage's rate
            return (self.profile.scaled(factor) if factor != 1.0 else self.profile).generate(seed)
        parts = []
        for k, spec in enumerate(self.specs):
            s = replace(spec, arrival=replace(spec.arrival, rate=spec.arrival.rate * factor))
            parts.append(generate(s, seed=seed * 1000 + k))
        return parts[0] if len(parts) == 1 else merge_workloads(parts, name=self.name)

    @checked_keywords
    def simulator(self, seed: int = 0, *, router=None, flow_control=..., admission=None,
                  workload: Workload | None = None, horizon_s=..., batch: bool = True, faults=...,
                  hint: str | None = None, **gateway) -> Simulator:
        """A :class:`Simulator` of this scenario; policy arguments override the defaults.
        ``faults`` (default: the scenario's) replaces its fault schedule (None: none).
        ``hint``: a compiled router consulted while routing is decided outside the engine
        (``Simulator``'s ``hint``).

        ``flow_control=None`` disables the gateway queue; leave it out to keep the
        scenario's default. ``batch=False`` leaves it to be placed in a shared batched
        state (:class:`~llmsched_gym.simulator.SimulatorBatch`).
        """
        check_seed("seed", seed)
        if horizon_s is not ...:
            check_number("horizon_s", horizon_s, gt=0, none_ok=True)
        if router is not None:
            gateway["router"] = router
        if admission is not None:
            gateway["admission"] = admission
        if flow_control is not ...:
            gateway["flow_control"] = flow_control
        g = replace(self.gateway, **gateway)  # validated together (GatewayConfig.__post_init__)
        horizon_s = self.horizon_s if horizon_s is ... else horizon_s
        if workload is None:
            workload = self.build_workload(seed)
            self._check_servable(workload)
        faults = self.faults if faults is ... else faults
        return Simulator(workload, self.cluster, g, seed=seed, horizon_s=horizon_s, faults=faults, batch=batch,
                         hint=hint)

    def check_runnable(self, seed: int = 0) -> None:
        """What :meth:`simulator` and :meth:`check_horizon` check, on the workload of
        ``seed``, before any simulation (a study's points, before their cells)."""
        w = self.build_workload(seed)
        self._check_servable(w)
        self.check_horizon(w, self.horizon_s)

    def check_horizon(self, w: Workload, horizon_s: float | None) -> None:
        """A run (not an RL episode, which may be empty) whose horizon ends before its
        first request is an error naming both, not a table of dashes."""
        if horizon_s is not None and len(w) and w.arrival_s[0] >= horizon_s:
            raise ConfigError(f"horizon_s={horizon_s:g}: no request arrives before it (the first at "
                              f"t={w.arrival_s[0]:.4g} s with {self.rate_setting() or 'the workload rate'}); "
                              "raise the horizon or the rate")

    def _check_servable(self, w: Workload) -> None:
        """A workload with no request, or none that fits one instance's KV cache, is an
        error naming the cause (not a table of dashes or of drops)."""
        if len(w) == 0:
            raise ConfigError(f"{self.rate_setting() or 'the workload rate'}: no request arrives in the arrival "
                              f"window of scenario {self.name!r}; raise the rate or the window (duration_s)")
        c = self.cluster
        bs, blocks = c.engine.block_size, c.total_blocks()
        need = int(np.min(-(-(w.input_tokens + w.output_tokens) // bs)))
        if need > blocks:
            raise ConfigError(f"cluster.kv_blocks={blocks}: a KV cache of {blocks} blocks of {bs} tokens per "
                              f"instance is smaller than any request (the smallest needs {need} blocks), so every "
                              f"request would be dropped; give kv_blocks >= {need}")
        max_len = c.engine.max_model_len
        if max_len is not None and int(np.min(w.input_tokens + w.output_tokens)) > max_len:
            raise ConfigError(f"cluster.engine.max_model_len={max_len} is shorter than any request (the shortest "
                              f"has {int(np.min(w.input_tokens + w.output_tokens))} tokens), so every request "
                              "would be dropped")

    def to_dict(self) -> dict:
        """YAML-ready description (what :func:`scenario_from_dict` reads back)."""
        c = self.cluster
        cluster = {f.name: getattr(c, f.name) for f in fields(ClusterConfig) if f.name != "engine"}
        cluster["engine"] = {f.name: getattr(c.engine, f.name) for f in fields(EngineConfig)}
        gw = {f.name: getattr(self.gateway, f.name) for f in fields(GatewayConfig)}
        gw = {k: (v.to_dict() if hasattr(v, "to_dict") else
                  v if isinstance(v, (str, int, float, type(None))) else getattr(v, "name", str(v)))
              for k, v in gw.items()}
        if isinstance(self.workload, TraceSource):
            wl = {"trace": {f.name: getattr(self.workload, f.name) for f in fields(TraceSource)}}
        elif self.profile is not None:
            wl = {"inference_perf": self.profile.to_dict()}
        else:
            wl = [s.to_dict() for s in self.specs]
            wl = wl[0] if len(wl) == 1 else {"mixture": wl}
        out = {"name": self.name, "description": self.description, "cluster": cluster, "workload": wl,
               "gateway": gw, "horizon_s": self.horizon_s, "capacity_horizon_s": self.capacity_horizon_s}
        for k in ("qps", "load", "paper_qps", "published_capacity_qps"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.default_rate:
            out["default_rate"] = dict(self.default_rate)
        if self.faults is not None:
            out["faults"] = self.faults.to_dict()
        return out

    def fingerprint(self) -> str:
        """Hash of everything that determines capacity (cluster, workload shape, router)."""
        d = self.to_dict()
        d = {k: d[k] for k in ("cluster", "workload", "capacity_horizon_s")} | {"router": d["gateway"]["router"]}
        for k, default in _CLUSTER_OPTION_DEFAULTS.items():  # at its default, older fingerprints stay valid
            if d["cluster"].get(k, default) == default:
                d["cluster"].pop(k, None)
        if not d["cluster"]["engine"].get("async_scheduling"):  # added later; off: older fingerprints stay valid
            d["cluster"]["engine"].pop("async_scheduling", None)
        # The run's own window (duration_s / num_requests) does not enter: capacity is
        # measured over the scenario's capacity window whatever the run's length.
        for spec in d["workload"].get("mixture", [d["workload"]]) if self.profile is None else []:
            spec.pop("duration_s", None)
            spec.pop("num_requests", None)
        if isinstance(self.workload, TraceSource):
            d["trace_sha256"] = _file_digest(self.workload.resolve())
        d["capacity_method"] = METHOD
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ====================================================================== registry
_REGISTRY: dict[str, Scenario | Callable[[], Scenario]] = {}


def register_scenario(name: str, scenario_or_factory: Scenario | Callable[[], Scenario], *,
                      overwrite: bool = False) -> None:
    """Register a scenario (or a zero-argument factory returning one) under ``name``."""
    if name in _REGISTRY and not overwrite:
        raise ConfigError(f"scenario {name!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[name] = scenario_or_factory


def list_scenarios() -> list[str]:
    """Names of the registered scenarios."""
    return sorted(_REGISTRY)


# ====================================================================== settings
# Configuration models of a scenario's settings. The YAML schema, ``make_scenario``'s
# keywords, the environments' keywords and the CLI's flags are all validated by these
# (and by the config dataclasses they hold), so a rule is declared once, as a field type.
class RateSetting(BaseModel):
    """A scenario's rate: a literal request rate, a fraction of capacity, or a published QPS
    point (at most one is given; None: not given)."""

    model_config = STRICT
    qps: Rate | None = None
    load: LoadFactor | None = None
    paper_qps: Rate | None = None


RATE_KEYS = tuple(RateSetting.model_fields)
#: ``make_scenario`` keywords that set a field of the scenario's cluster, with its type.
CLUSTER_OVERRIDES = ("instances", "hardware", "model", "latency_model", "kv_blocks", "scrape_interval_s", "cpu_kv_gb",
                     "cpu_link_gbps", "cpu_kv_events", "cpu_kv_shared", "prefill_instances", "kv_link", "kv_link_gbps",
                     "kv_link_latency_s")
#: ``make_scenario`` keywords that set a gateway policy (a name, a spec or an object).
POLICY_OVERRIDES = ("router", "flow_control", "admission", "pd")


class _ScenarioSettings(RateSetting):
    """The keywords of :func:`make_scenario` besides the cluster's (see :data:`ScenarioOverrides`)."""

    horizon_s: Duration | None = None
    capacity_horizon_s: Duration | None = None
    duration_s: Duration | None = None
    num_requests: RequestCount | None = None
    router: object = None
    flow_control: object = None
    admission: object = None
    pd: object = None
    eviction: object = None  # built by EvictionConfig.from_value
    trace_path: Name | Path | None = None
    #: a FaultSchedule, a mapping of its fields or a YAML file's path (``--faults FILE``)
    faults: Annotated[FaultSchedule | None, BeforeValidator(FaultSchedule.from_value)] = None
    staleness_policy: model_fields(SaturationConfig)["staleness_policy"] | None = None


#: The keywords of :func:`make_scenario`: the rate, the window, the gateway's policies and
#: the cluster fields of :data:`CLUSTER_OVERRIDES` (their types are ClusterConfig's).
ScenarioOverrides = create_model("ScenarioOverrides", __base__=_ScenarioSettings,
                                 __doc__="The keywords of make_scenario (one validation for Python, CLI and envs).",
                                 **{k: (model_fields(ClusterConfig)[k], None) for k in CLUSTER_OVERRIDES})


def check_scenario_overrides(overrides: dict, *, model: type[BaseModel] = ScenarioOverrides, label: str = "make_scenario",
                             names: dict | None = None, what: str = "keyword") -> BaseModel:
    """Names, types and ranges of ``make_scenario`` keywords (or of ``model``, a model that
    extends :data:`ScenarioOverrides`: an environment's keywords), and the policies they name;
    the validated model. ``names`` shows a field by another name (the CLI flag that set it)."""
    checked = validate_model(model, overrides, label=label, names=names, what=what)
    for k in POLICY_OVERRIDES:
        if k in overrides:
            check_policy_ref((names or {}).get(k, k), overrides[k], none_ok=k != "router")
    return checked


def make_scenario(name: "str | Scenario | os.PathLike", **overrides) -> Scenario:
    """A scenario by registry name, YAML path or object, with overrides applied.

    Overrides: ``qps``, ``load``, ``paper_qps`` (rate; one at most), ``instances``,
    ``hardware``, ``model``, ``latency_model``, ``kv_blocks``, ``scrape_interval_s``,
    ``cpu_kv_gb``, ``cpu_link_gbps``, ``cpu_kv_events``, ``cpu_kv_shared`` (the CPU KV tier),
    ``prefill_instances``, ``kv_link``, ``kv_link_gbps``, ``kv_link_latency_s`` (P/D pools and link),
    ``horizon_s``, ``duration_s`` / ``num_requests`` (synthetic window),
    ``capacity_horizon_s``, ``router``, ``flow_control``, ``admission``, ``pd``, ``eviction`` (the
    gateway's demand-driven eviction, :class:`~llmsched_gym.simulator.GatewayConfig`), ``trace_path``,
    ``faults`` (a :class:`~llmsched_gym.faults.FaultSchedule`, a mapping or a YAML path; None: none),
    ``staleness_policy`` (the saturation detector's ``stalenessPolicy``: saturated, ignore).
    """
    if isinstance(name, Scenario):
        sc = copy.deepcopy(name)
    elif str(name).endswith((".yaml", ".yml")):
        sc = load_scenario(name)
    else:
        if name not in _REGISTRY:
            raise ConfigError(f"unknown scenario {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
        entry = _REGISTRY[name]
        sc = copy.deepcopy(entry if isinstance(entry, Scenario) else entry())
    checked = check_scenario_overrides(overrides)  # names, types, ranges, finiteness
    for k in ("duration_s", "num_requests"):
        if k in overrides and isinstance(sc.workload, (TraceSource, InferencePerfProfile)):
            raise ConfigError(f"{k}={overrides[k]!r} does not apply to {sc.name!r}, which replays a trace "
                              "(use horizon_s, or the trace's limit)")
    rate = {k: overrides.pop(k) for k in ("qps", "load", "paper_qps") if overrides.get(k) is not None}
    for k in ("qps", "load", "paper_qps"):
        overrides.pop(k, None)
    if len(rate) > 1:
        raise ConfigError(f"give at most one of qps, load, paper_qps (got {', '.join(rate)})")
    for k, v in rate.items():
        sc.qps = sc.load = sc.paper_qps = None
        setattr(sc, k, float(v))
    cl = {k: overrides.pop(k) for k in list(overrides) if k in CLUSTER_OVERRIDES}
    if cl:
        sc.cluster = replace(sc.cluster, **cl)
        sc.cluster.make_latency()  # validate names now, before any simulation
    for k in POLICY_OVERRIDES:
        if k in overrides:
            setattr(sc.gateway, k, overrides.pop(k))
    if "eviction" in overrides:
        sc.gateway.eviction = EvictionConfig.from_value(overrides.pop("eviction"), "eviction")
    if "faults" in overrides:  # a file's path read once, by the check
        overrides.pop("faults")
        sc.faults = checked.faults
    if overrides.get("staleness_policy") is not None:  # the utilization detector's stalenessPolicy
        sc.gateway.saturation = replace(sc.gateway.saturation, staleness_policy=overrides.pop("staleness_policy"))
    if "horizon_s" in overrides:
        sc.horizon_s = overrides.pop("horizon_s")
    if "capacity_horizon_s" in overrides:
        sc.capacity_horizon_s = float(overrides.pop("capacity_horizon_s"))
    if "trace_path" in overrides:
        if not isinstance(sc.workload, TraceSource):
            raise ConfigError(f"trace_path applies to trace scenarios; {sc.name!r} is synthetic")
        sc.workload.path = str(overrides.pop("trace_path"))
    for k in ("duration_s", "num_requests"):
        if k in overrides:
            v = overrides.pop(k)
            for s in sc.specs:
                s.duration_s, s.num_requests = (v, None) if k == "duration_s" else (None, v)
                s.validate()
    return sc


# ====================================================================== YAML
def _faults_section(d):
    """A scenario file's ``faults`` section: a mapping of :class:`FaultSchedule`'s fields
    (a file's path is ``make_scenario``'s and ``--faults``' form, not a section's)."""
    if isinstance(d, (str, os.PathLike)):
        raise invalid("faults", d, "it must be a mapping of faults (crashes, crash_rate, scrape_outages, "
                      "stragglers, on_crash, max_retries, seed, kv_link_slowdowns, kv_link_outages, kv_load_failure)")
    return FaultSchedule.from_value(d)


class ScenarioFile(RateSetting):
    """A scenario YAML file's top level (docs/scenarios.md). The cluster and the gateway
    are built by their config classes; the workload's forms by theirs."""

    name: Name
    description: str = ""
    cluster: Annotated[ClusterConfig, from_mapping(ClusterConfig)]
    workload: dict
    gateway: Annotated[GatewayConfig, from_mapping(GatewayConfig)] = Field(default_factory=GatewayConfig)
    horizon_s: Duration | None = None
    published_capacity_qps: Rate | None = None
    default_rate: RateSetting | None = None
    capacity_horizon_s: Duration = 120.0
    faults: Annotated[FaultSchedule | None, BeforeValidator(_faults_section)] = None


#: The forms of a YAML workload section: ``{trace: ...}``, ``{inference_perf: ...}``,
#: ``{mixture: [...]}``, or one WorkloadSpec's fields.
WORKLOAD_FORMS = ("trace", "inference_perf", "mixture")


def _workload_from_dict(wl: dict, cluster: ClusterConfig, source: str):
    """The workload of a YAML scenario's ``workload`` section."""
    form = next((k for k in WORKLOAD_FORMS if k in wl), None)
    if form is not None:
        check_keys(f"{source}.workload", wl, [form], what="field")
    if form == "trace":
        tr = wl["trace"]
        if isinstance(tr, dict) and "format" not in tr and tr.get("path") in TRACES:  # a trace by name carries its format
            tr = {**tr, "format": TRACES[tr["path"]].format}
        if not isinstance(tr, dict):
            raise ConfigError(f"{source}.workload.trace must be a mapping, got {type(tr).__name__}")
        try:
            return TraceSource(**tr)
        except ConfigError as e:
            raise ConfigError(f"{source}.workload.{e}") from None
    if form == "inference_perf":
        ip = wl["inference_perf"]
        workload = InferencePerfProfile.from_dict(ip, f"{source}.workload.inference_perf")
        if isinstance(ip, dict) and "block_tokens" not in ip:  # hash blocks = the engine's KV blocks
            workload.block_tokens = cluster.engine.block_size
        return workload
    if form == "mixture":
        return [WorkloadSpec.from_dict(w, f"{source}.workload.mixture[{i}]") for i, w in enumerate(wl["mixture"])]
    return WorkloadSpec.from_dict(wl, f"{source}.workload")


def scenario_from_dict(d: dict, source: str = "scenario") -> Scenario:
    """Build and validate a scenario from a dict (the YAML schema, :class:`ScenarioFile`);
    errors name the field."""
    if not isinstance(d, dict):
        raise ConfigError(f"{source} must be a mapping, got {type(d).__name__}")
    gw = d.get("gateway")
    if isinstance(gw, dict) and "epp_config" in gw:  # an llm-d EndpointPickerConfig (docs/epp.md)

        d = {**d, "gateway": gateway_from_yaml(gw, source)}
    f = validate_model(ScenarioFile, {**d, "gateway": d.get("gateway") or {}}, prefix=source, label=source)
    try:
        f.cluster.make_latency()
    except ConfigError as e:
        raise ConfigError(f"{source}.cluster: {e}") from None
    workload = _workload_from_dict(f.workload, f.cluster, source)
    for role, key in (("routing", "router"), ("admission", "admission"), ("usage-limit", "flow_control"),
                      ("pd", "pd")):
        spec = getattr(f.gateway, key)
        if spec is not None and spec != "external":
            try:
                make_policy(spec, role)
            except ConfigError as e:
                raise ConfigError(f"{source}.gateway.{key}: {e}") from None
    default_rate = f.default_rate.model_dump(exclude_none=True) if f.default_rate is not None else {}
    if len(default_rate) > 1:
        raise ConfigError(f"{source}.default_rate: give at most one of qps, load, paper_qps")
    rate = {k: getattr(f, k) for k in RATE_KEYS if getattr(f, k) is not None}
    if len(rate) > 1:
        raise ConfigError(f"{source}: give at most one of qps, load, paper_qps")
    return Scenario(name=f.name, description=f.description, cluster=f.cluster, workload=workload, gateway=f.gateway,
                    horizon_s=f.horizon_s, published_capacity_qps=f.published_capacity_qps, default_rate=default_rate,
                    capacity_horizon_s=f.capacity_horizon_s, faults=f.faults, **rate)


@checked_keywords
def load_scenario(path: "str | os.PathLike") -> Scenario:
    """Read a scenario from a YAML file (schema: see docs/scenarios.md)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"scenario file {p} not found")
    try:
        d = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {' '.join(str(e).split())}") from None
    return scenario_from_dict(d, source=str(p))


# ====================================================================== capacity
def is_stable(scenario: Scenario, qps: float, seed: int = 0) -> tuple[bool, int]:
    """Whether ``scenario`` sustains ``qps`` in steady state (the criterion of
    :mod:`llmsched_gym.capacity`: over the second half of the capacity window,
    delivered throughput keeps up with the offered rate and the number of requests
    waiting for a first token does not grow). Returns ``(stable, waiting at the end)``;
    :func:`llmsched_gym.capacity.steady_state` has the figures."""
    check = steady_state(scenario, qps, seed)
    return check.stable, check.waiting_end


@checked_keywords
def measure_capacity(scenario: Scenario, *, rel_tol: float = 0.02, seed: int = 0, use_cache: bool = True) -> float:
    """Highest request rate (req/s) the cluster sustains in steady state (see
    :func:`is_stable` and docs/scenarios.md, "Rates and capacity").

    Deterministic doubling and geometric bisection, with the scenario's default router
    and no flow control. Built-in scenarios read it from the table shipped with the
    package; others measure once per scenario fingerprint and machine and cache it in
    memory and in ``~/.cache/llmsched-gym/capacity.json`` (``LLMSCHED_CACHE_DIR``).
    :func:`llmsched_gym.capacity.capacity_record` says how it was found.
    """
    return float(capacity_record(scenario, rel_tol=rel_tol, seed=seed, use_cache=use_cache)["qps"])
