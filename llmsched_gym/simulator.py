"""The cluster simulator: gateway (admission, band queues, dispatch) + instances.

One discrete-event loop over five event sources, earliest first (ties in this order):
request becomes schedulable at an instance, instance iteration ends, metrics scrape,
arrival at the gateway, dispatch cycle. Instance state is held in numpy arrays; the
next iteration end of every instance is one array (``argmin`` picks the next).

The loop can pause when a routing decision is needed (``router="external"``), which is
how the Routing environment hands decisions to an agent.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time as _time
import weakref
from dataclasses import field, replace
from typing import Annotated, Literal

import numpy as np
from pydantic import SkipValidation

from .engine import EngineConfig
from .engine.api import (
    ADMIT_PY,
    BACKGROUND,
    FLOW_PY,
    FOREGROUND,
    ROUTER_PY,
    ST_ADMIT,
    ST_ROUTE,
    ST_TIME,
    STATUS_NAMES,
    ClusterInputs,
    CompiledForm,
    EngineState,
    RequestTable,
    cache_is_cold,
    compile_subtrees,
    compiled_form,
    lower_policies,
)
from .engine.hardware import get_hardware, get_kv_link, get_model, kv_capacity_blocks
from .engine.latency import make_latency_model
from .errors import ConfigError, PolicyError
from .faults import FaultSchedule
from .faults import apply as apply_fault
from .gateway.eviction import EvictionConfig
from .gateway.policy import (
    AdmissionPolicy,
    RoutingPolicy,
    UsageLimitPolicy,
    check_policy_ref,
    list_policies,
    make_policy,
)
from .gateway.saturation import SaturationConfig
from .gateway.view import RequestInfo, RouterView
from .validation import (
    MAX_INSTANCES,
    MAX_KV_BLOCKS,
    CpuKvGb,
    Duration,
    Instances,
    LinkGbps,
    Name,
    RequestCount,
    check_keys,
    checked_keywords,
    config_dataclass,
    from_mapping,
    invalid,
    ranged,
)
from .workloads.workload import Workload

#: A KV capacity per instance in blocks: a count, ``"unlimited"``, or None (derived from GPU memory).
KvBlocks = ranged(int, ge=1, le=MAX_KV_BLOCKS, limit=True) | Literal["unlimited"] | None

EXTERNAL = "external"  # router placeholder: routing decisions are taken via Simulator.route()
UNLIMITED_BLOCKS = 2**40

def _check_cluster(c, prefix: str = "cluster") -> None:
    """A ClusterConfig's cross-field rules and the presets it names (its fields' types and
    ranges are their annotations, checked when it is built)."""
    if c.prefill_instances and c.prefill_instances >= c.instances:
        raise invalid(f"{prefix}.prefill_instances", c.prefill_instances,
                      f"it must leave a decode instance: an integer in [0, {c.instances - 1}] for {c.instances} "
                      "instances (0: every instance aggregated)")
    _check_applies(c, prefix)
    _check_pools(c, prefix)
    try:
        get_kv_link(c.kv_link)
    except ConfigError as e:
        raise ConfigError(f"{prefix}.{e}") from None
    for name, get in (("hardware", get_hardware), ("model", get_model)):  # a bad config.json fails here
        try:
            get(getattr(c, name))
        except ConfigError as e:
            raise ConfigError(f"{prefix}.{name}: {e}") from None


def _check_applies(c, prefix: str) -> None:
    """Options of a CPU tier or of P/D pools set on a cluster without one are errors, not
    silently ignored."""
    if not c.cpu_kv_gb:
        for name, default in (("cpu_kv_shared", False), ("cpu_link_gbps", None), ("cpu_kv_events", True)):
            if getattr(c, name) != default:
                raise invalid(f"{prefix}.{name}", getattr(c, name), "it applies only to a CPU KV tier, and the "
                              "cluster has none (set cpu_kv_gb > 0, --cpu-kv-gb)")
    if not c.prefill_instances:
        for name in ("kv_link_gbps", "kv_link_latency_s"):
            if getattr(c, name) is not None:
                raise invalid(f"{prefix}.{name}", getattr(c, name), "it applies only to P/D disaggregation, and "
                              "the cluster has no prefill pool (set prefill_instances >= 1, --prefill-instances)")


#: What a pool of a mixed fleet may set (ClusterConfig.pools).
POOL_KEYS = ("instances", "hardware", "tp", "kv_blocks", "gpu_memory_utilization", "latency_params")


def _check_pools(c, prefix: str) -> None:
    """A mixed fleet's pools: mappings of :data:`POOL_KEYS` with ``instances``, adding up to
    the cluster's instances; each pool a valid cluster of its own."""
    if c.pools is None:
        return
    if not isinstance(c.pools, list) or not c.pools:
        raise invalid(f"{prefix}.pools", c.pools, "it must be a non-empty list of mappings "
                      "{instances, hardware, tp, kv_blocks, gpu_memory_utilization, latency_params}")
    total = 0
    for k, p in enumerate(c.pools):
        where = f"{prefix}.pools[{k}]"
        if not isinstance(p, dict):
            raise invalid(where, p, "it must be a mapping {instances, hardware, tp, ...}")
        check_keys(where, p, POOL_KEYS, what="key")
        if "instances" not in p:
            raise invalid(where, p, "it must give its instances (an integer >= 1)")
        try:  # each pool a valid cluster of its own, its instances included
            replace(c, pools=None, prefill_instances=0, kv_link_gbps=None, kv_link_latency_s=None, **p)
        except ConfigError as e:
            raise ConfigError(str(e).replace(f"{prefix}.", f"{where}.", 1)) from None
        total += p["instances"]
    if total != c.instances:
        raise invalid(f"{prefix}.pools", c.pools, f"their instances add up to {total}; they must add up to "
                      f"cluster.instances={c.instances}")


# ====================================================================== configs


@config_dataclass("cluster")
class ClusterConfig:
    """Hardware, model and engine of a homogeneous cluster.

    Args:
        instances: number of model instances.
        hardware: a GPU preset name or a GPU description mapping (``peak_tflops``,
            ``hbm_tbps``, ``memory_gib``, ...; ``engine.hardware.get_hardware``).
        model: a model preset name, a HuggingFace ``config.json`` path, or a mapping
            ``{config, name, weight_dtype, kv_cache_dtype}`` (``engine.hardware.get_model``).
        tp: tensor parallelism.
        latency_model: ``linear``, ``roofline``, ``blis-trained-physics``, ``vllm-calibrated``
            (fitted on real vLLM runs, docs/validation.md), ``blis-roofline`` (BLIS's
            roofline formula; for parity runs only), or the path of a latency-model file
            written by ``llmsched-gym calibrate``.
        latency_params: keyword overrides for the step-time model's coefficients.
        kv_blocks: KV capacity per instance in blocks; None derives it from memory
            (docs/architecture.md); ``"unlimited"`` disables capacity limits and eviction.
        gpu_memory_utilization: fraction of GPU memory vLLM may use.
        engine: per-instance limits (``EngineConfig``).
        scrape_interval_s: how often the gateway's metrics refresh (0 = always fresh).
        cpu_kv_gb: a CPU KV tier per instance of this many GB (1e9 bytes; 0 = none): GPU
            blocks evicted from the prefix cache are kept there (LRU), and a prefix hit
            in it loads back instead of recomputing (docs/architecture.md, "CPU KV tier").
        cpu_link_gbps: the host link's bandwidth per GPU, GB/s, the CPU tier loads over;
            None: the hardware preset's (``host_link_gbps``).
        cpu_kv_events: whether the CPU tier publishes its blocks to the router (as
            LMCache's KV events do for llm-d's precise prefix scorer), so that precise
            prefix views count its units; False: the routers see the GPU caches only.
        cpu_kv_shared: one CPU tier for the whole cluster (a Mooncake store), of
            ``cpu_kv_gb`` per instance pooled, that every instance writes its evictions
            to and loads from; False: one tier per instance.
        cold_start_s: seconds from starting an instance to its serving (autoscaling only:
            :mod:`llmsched_gym.autoscaling`); None: the model x hardware preset
            (``autoscaling.cold_start_preset``).
        prefill_instances: P/D disaggregation: the first this many instances are the
            prefill pool, the rest the decode pool; 0 (default): every instance is
            aggregated. The gateway's ``pd`` policy decides per request
            (docs/architecture.md, "Prefill/decode disaggregation").
        kv_link: the link a prompt's KV moves over, prefill GPU to decode GPU, a preset of
            ``engine.hardware.KV_LINKS``: ``nvlink``, ``rdma`` / ``infiniband``, ``ethernet``, ``tcp``.
        kv_link_gbps: its bandwidth per GPU, GB/s; None: the preset's.
        kv_link_latency_s: its fixed time per transfer, seconds; None: the preset's.
        pools: a mixed fleet: instances of other GPUs in one cluster, as a list of mappings
            ``{instances, hardware, tp, kv_blocks, gpu_memory_utilization, latency_params}``
            (every key but ``instances`` optional: the cluster's value), in instance order,
            their instances adding up to ``instances``. Each instance prices its iterations
            with its own step-time model (the cluster's ``latency_model`` kind) and holds
            its own KV capacity; the model served is the cluster's, and per-request
            overheads (arrival and finish delays) are the first pool's. None: every
            instance is the cluster's hardware.
    """

    instances: Instances = 2
    hardware: Name | dict = "H100"
    model: Name | dict = "qwen3-14b"
    tp: ranged(int, ge=1, le=64) = 1
    latency_model: Name = "linear"
    latency_params: dict = field(default_factory=dict)
    kv_blocks: KvBlocks = None
    gpu_memory_utilization: ranged(float, gt=0, le=1) = 0.9
    engine: Annotated[EngineConfig, from_mapping(EngineConfig)] = field(default_factory=EngineConfig)
    scrape_interval_s: ranged(float, ge=0, le=3600) = 0.05
    cpu_kv_gb: CpuKvGb = 0.0
    cpu_link_gbps: LinkGbps | None = None
    cpu_kv_events: bool = True
    cpu_kv_shared: bool = False
    cold_start_s: ranged(float, ge=0, le=3600) | None = None
    prefill_instances: ranged(int, ge=0, le=MAX_INSTANCES - 1) = 0
    kv_link: Name = "rdma"
    kv_link_gbps: LinkGbps | None = None
    kv_link_latency_s: ranged(float, ge=0, le=60) | None = None
    pools: list | None = None

    def __post_init__(self) -> None:
        _check_cluster(self)

    def make_latency(self):
        """The step-time model of the cluster's instances (of a mixed fleet: its first pool's)."""
        return self.pool_configs()[0][1].make_latency() if self.pools else self._latency_of(self)

    def _latency_of(self, c: "ClusterConfig"):
        return make_latency_model(c.latency_model, hardware=c.hardware, model=c.model, tp=c.tp, **c.latency_params)

    def pool_configs(self) -> list[tuple[int, "ClusterConfig"]]:
        """``(instances, config)`` of each pool of a mixed fleet: the cluster with the pool's
        keys (one pool of every instance without ``pools``)."""
        if not self.pools:
            return [(self.instances, self)]
        return [(p["instances"], replace(self, instances=p["instances"], pools=None, prefill_instances=0,
                                         kv_link_gbps=None, kv_link_latency_s=None,
                                         **{k: v for k, v in p.items() if k != "instances"}))
                for p in self.pools]

    def instance_latencies(self) -> tuple:
        """One step-time model per instance, in instance order."""
        return tuple(m for n, c in self.pool_configs() for m in [c._latency_of(c)] * n)

    def instance_blocks(self) -> np.ndarray:
        """KV capacity per instance in blocks, in instance order."""
        return np.concatenate([np.full(n, c.total_blocks(), np.int64) for n, c in self.pool_configs()])

    def cpu_blocks(self) -> int:
        """Blocks of the CPU KV tier of each instance (0: none)."""
        if not self.cpu_kv_gb:
            return 0
        return int(self.cpu_kv_gb * 1e9 // (get_model(self.model).kv_bytes_per_token * self.engine.block_size))

    def cpu_load_us_per_token(self) -> float:
        """Microseconds to load one token's KV from the CPU tier: its bytes over the host
        links of the instance's ``tp`` GPUs (each loads its own shard)."""
        gbps = self.cpu_link_gbps if self.cpu_link_gbps is not None else get_hardware(self.hardware).host_link_gbps
        return get_model(self.model).kv_bytes_per_token / (gbps * 1e3 * self.tp)  # 1 GB/s = 1e3 bytes/us

    def kv_transfer_us_per_token(self) -> float:
        """Microseconds to move one prompt token's KV from a prefill to a decode instance:
        its bytes over the links of the instance's ``tp`` GPUs (each sends its own shard)."""
        gbps = self.kv_link_gbps if self.kv_link_gbps is not None else get_kv_link(self.kv_link).gbps
        return get_model(self.model).kv_bytes_per_token / (gbps * 1e3 * self.tp)  # 1 GB/s = 1e3 bytes/us

    def kv_transfer_latency_s(self) -> float:
        """Fixed seconds per KV transfer (``kv_link_latency_s`` or the link preset's)."""
        return self.kv_link_latency_s if self.kv_link_latency_s is not None else get_kv_link(self.kv_link).latency_s

    def total_blocks(self) -> int:
        if self.kv_blocks == "unlimited":
            return UNLIMITED_BLOCKS
        if self.kv_blocks is not None:
            return int(self.kv_blocks)
        return kv_capacity_blocks(get_hardware(self.hardware), get_model(self.model), tp=self.tp,
                                  gpu_memory_utilization=self.gpu_memory_utilization,
                                  block_size=self.engine.block_size)


@config_dataclass("gateway")
class GatewayConfig:
    """Admission, flow control and routing in front of the instances (docs/architecture.md).

    Args:
        router: routing policy name/instance, or ``"external"`` (decided via ``route``).
        admission: admission policy (default ``always-admit``).
        flow_control: usage-limit policy for the band-queue dispatch loop; None
            dispatches every admitted request on arrival (no gateway queue).
        ttl_s: time a request may wait in a band queue before it expires.
        band_capacity: requests per band queue; arrivals to a full band are rejected.
        dispatch_interval_s: period of dispatch cycles while anything is queued.
        saturation: the saturation detector (:class:`~llmsched_gym.gateway.saturation.SaturationConfig`
            or a mapping with its fields or llm-d's names); default llm-d's utilization
            detector (queue depth 5, KV utilization 0.8, metrics stale after 200 ms).
        pd: the P/D decision (a ``pd``-role policy, ``baselines/pd.py``) of a cluster with a
            prefill pool (``ClusterConfig.prefill_instances``); None: ``pd-always`` there,
            nothing elsewhere.
        eviction: llm-d's demand-driven in-flight eviction (flow control only): True for
            llm-d's defaults, an :class:`~llmsched_gym.gateway.eviction.EvictionConfig` or a
            mapping of its fields; None (default) or False: off.
        client_timeout_s: the clients' timeout: a request not finished this many seconds
            after its arrival is aborted (outcome ``timed_out``; the instance frees its KV
            between steps, as vLLM does for a closed stream); None (default): no timeout.
            Not simulated with flow control (gateway queues) or P/D disaggregation.
    """

    router: object = "round-robin"
    admission: object = "always-admit"
    flow_control: object = None
    ttl_s: Duration = 60.0
    band_capacity: RequestCount = 5000
    dispatch_interval_s: ranged(float, gt=0, le=3600) = 0.001
    saturation: SkipValidation[SaturationConfig | dict | None] = None  # built by SaturationConfig.from_dict
    pd: object = None
    eviction: SkipValidation[EvictionConfig | dict | bool | None] = None  # built by EvictionConfig.from_value
    client_timeout_s: Duration | None = None

    def __post_init__(self) -> None:
        self.saturation = SaturationConfig.from_dict(self.saturation, "gateway.saturation")
        self.eviction = EvictionConfig.from_value(self.eviction, "gateway.eviction")
        if self.eviction is not None and self.flow_control is None:
            raise ConfigError("gateway.eviction needs flow control (gateway.flow_control): llm-d evicts when a "
                              "queued band is blocked by saturation")
        for k in ("router", "admission", "flow_control", "pd"):  # names or policy objects
            check_policy_ref(f"gateway.{k}", getattr(self, k), none_ok=k != "router")


def hint_form(spec) -> CompiledForm:
    """The compiled form of a ``hint`` router spec (``Simulator(hint=...)``, Routing-v0's
    ``hint``); a ConfigError for an unknown router or one that runs in Python only."""
    form = compiled_form(make_policy(spec, "routing"), ROUTER_PY)
    if form.code == ROUTER_PY:
        compiled = [n for n, f in list_policies("routing").items() if "compiled_form" in getattr(f, "__dict__", {})]
        raise ConfigError(f"hint={spec!r} is a Python router; a hint is a compiled router's choice: one of "
                          f"{', '.join(compiled)}")
    return form


def _weak(method):
    """``method`` of the simulator, callable from the view the simulator owns without keeping
    the simulator alive: a bound method there closes a reference cycle that only the garbage
    collector frees, so every reset of a vector env left its engine states behind until a
    full collection (about 150 MB per reset of 16 chatbot clusters)."""
    ref = weakref.WeakMethod(method)
    return lambda *args: ref()(*args)


@checked_keywords
class Simulator:
    """One cluster serving one workload, simulated by the compiled engine.

    Args:
        workload: the requests (see :class:`~llmsched_gym.workloads.workload.Workload`).
        cluster: a :class:`ClusterConfig`.
        gateway: a :class:`GatewayConfig`.
        seed: seeds the gateway's generator (policies' randomness).
        horizon_s: stop at this simulated time; requests still running are ``in_flight``.
        faults: a :class:`~llmsched_gym.faults.FaultSchedule` (or a mapping of its fields, or
            a YAML file's path): instance crashes, scrape outages, stragglers; None: none.
        hint: a compiled router (name or spec) consulted while routing is decided outside the
            engine (``router="external"`` or a Python router): its books and route-time state
            follow every dispatch, and :meth:`suggest` gives its choice (Routing-v0's ``hint``
            observation). None (default): a Python router's own ``hint`` attribute, if any.

    Several simulators can share one batched state (:func:`simulate_batch`, the vector
    environments); a simulator alone is a batch of one. Built-in policies run inside the
    compiled loop; any other policy (or ``router="external"``) is asked in Python at the
    moment of its decision, with the same view and the same random generator.
    """

    def __init__(self, workload: Workload, cluster: ClusterConfig | None = None,
                 gateway: GatewayConfig | None = None, seed: int = 0, horizon_s: float | None = None,
                 faults: FaultSchedule | dict | str | None = None, *, batch: bool = True, hint: str | None = None):
        self.workload = workload
        self.cluster = cluster = cluster or ClusterConfig()
        self.gateway = gateway = gateway or GatewayConfig()
        self.horizon = np.inf if horizon_s is None else float(horizon_s)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.latency = cluster.make_latency()
        I = cluster.instances

        self.state: EngineState | None = None
        self.external_router = gateway.router == EXTERNAL
        self.router: RoutingPolicy | None = None if self.external_router else make_policy(gateway.router, "routing")
        self.admission: AdmissionPolicy = make_policy(gateway.admission, "admission")
        self.flow: UsageLimitPolicy | None = (
            None if gateway.flow_control is None else make_policy(gateway.flow_control, "usage-limit"))
        for p in (self.router, self.admission, self.flow):
            if p is not None:
                p.reset(I, self.rng)
        self.hint_rng = copy.deepcopy(self.rng)  # the hint router's draws, apart from the cluster's

        # Bands: one FCFS queue per priority present in the workload, highest first.
        self.band_priorities = tuple(sorted({int(p) for p in np.unique(workload.priority)}, reverse=True)) or (0,)
        self.band_of = {p: b for b, p in enumerate(self.band_priorities)}
        lookup = np.array(self.band_priorities)
        self._band_index = (np.searchsorted(-lookup, -workload.priority) if len(workload)
                            else np.zeros(0, np.int64)).astype(np.int64)
        self.expected_output = float(workload.output_tokens.mean()) if len(workload) else 0.0
        self._info: RequestInfo | None = None  # cache of pending_info
        self.wall_seconds = 0.0
        self.inputs = ClusterInputs(
            workload=workload, band_index=self._band_index, num_bands=len(self.band_priorities), instances=I,
            kv_blocks=cluster.total_blocks(), engine=cluster.engine, latency=self.latency,
            scrape_interval_s=cluster.scrape_interval_s, ttl_s=gateway.ttl_s, band_capacity=gateway.band_capacity,
            dispatch_interval_s=gateway.dispatch_interval_s, horizon_s=self.horizon,
            expected_output=self.expected_output, rng=self.rng, saturation=gateway.saturation,
            eviction=gateway.eviction,
            client_timeout_s=np.inf if gateway.client_timeout_s is None else float(gateway.client_timeout_s))
        if gateway.client_timeout_s is not None and (gateway.flow_control is not None or cluster.prefill_instances):
            raise ConfigError(f"gateway.client_timeout_s={gateway.client_timeout_s} with "
                              f"{'flow control' if gateway.flow_control is not None else 'P/D disaggregation'} "
                              "is not simulated; allowed: a cluster without gateway queues or a prefill pool")
        if cluster.pools:  # a mixed fleet: each instance its own step times and KV capacity
            self.inputs.kv_blocks = cluster.instance_blocks()
            self.inputs.instance_latency = cluster.instance_latencies()
        if cluster.cpu_kv_gb:
            self.inputs.cpu_blocks = cluster.cpu_blocks()
            self.inputs.cpu_load_us_per_token = cluster.cpu_load_us_per_token()
            self.inputs.cpu_visible = cluster.cpu_kv_events
            self.inputs.cpu_shared = cluster.cpu_kv_shared
        self._codes = lower_policies(self.router, self.flow, self.admission)
        self.pd = self._pd_policy(cluster, gateway)
        if self.pd is not None and self.pd.disaggregates:
            self.inputs.prefill_instances = cluster.prefill_instances
            self.inputs.kv_us_per_token = cluster.kv_transfer_us_per_token()
            self.inputs.kv_latency_s = cluster.kv_transfer_latency_s()
        self._hint = self._hint_form(getattr(self.router, "hint", None) if hint is None else hint)
        # what a compiled router keeps in the engine state
        needs = self._codes.router_needs if self._hint is None else self._hint.needs
        self.inputs.router_block_keys = needs.get("router_block_keys")
        self.inputs.prefix_classes = needs.get("prefix_classes")
        self._set_faults(FaultSchedule.from_value(faults))
        if batch:
            SimulatorBatch([self])

    def _hint_form(self, spec) -> CompiledForm | None:
        """The compiled form of the ``hint`` router (None: no hint), checked (:func:`hint_form`,
        and routing decided outside the engine)."""
        if spec is None:
            return None
        form = hint_form(spec)
        if self._codes.router != ROUTER_PY:
            raise ConfigError(f"hint={spec!r} needs routing decided outside the engine (router='external' or a "
                              f"Python router); the compiled router {self.router.name!r} routes itself")
        return form

    def suggest(self, r: int | None = None) -> int:
        """The ``hint`` router's choice for request ``r`` (default: the pending one) now, drawn
        from :attr:`hint_rng`; the simulation is unchanged. On a P/D cluster: the decode instance."""
        if self._hint is None:
            raise ConfigError("suggest needs a simulator built with hint=<compiled router>")
        r = self.pending_route if r is None else r
        if r is None:
            raise PolicyError("no routing decision is pending")
        return self.state.suggest(self.c, self.r0 + int(r), self.hint_rng)

    def _suggest_for(self, request: RequestInfo) -> int:
        return self.suggest(request.id)

    def _set_faults(self, faults: FaultSchedule | None) -> None:
        """The fault schedule's timeline, applied at pause points by :meth:`SimulatorBatch.advance_clusters`."""
        self.faults = faults
        self._fault_actions, self._fault_i = [], 0
        self._slow = [[] for _ in range(self.cluster.instances + 1)]  # each instance's, then the KV link's
        if faults is None:
            return
        faults.check_cluster(self.cluster.instances, bool(self.cluster.prefill_instances),
                             self.gateway.client_timeout_s is not None)
        w = self.workload
        end = self.horizon if self.horizon < np.inf else (float(w.arrival_s[-1]) if len(w) else 0.0)
        self._fault_actions = faults.timeline(self.cluster.instances, self.seed, end)
        self.inputs.faults = bool(faults.crashes_possible or faults.scrape_outages)
        self.inputs.retry_max = faults.max_retries if faults.on_crash == "retry" else 0
        self.inputs.kv_recompute = faults.kv_load_failure == "recompute"

    @property
    def next_fault_s(self) -> float:
        """The time of the next fault action (inf: none left)."""
        return self._fault_actions[self._fault_i][0] if self._fault_i < len(self._fault_actions) else np.inf

    def _apply_faults(self) -> None:
        """Apply the fault actions due by now (the cluster paused at their time)."""
        now = self.now
        while self._fault_i < len(self._fault_actions) and self._fault_actions[self._fault_i][0] <= now:
            apply_fault(self.state, self.c, self.cluster.instances, self._fault_actions[self._fault_i], self._slow)
            self._fault_i += 1
        if self._cl.log_len:  # a Python router hears of the requests a crash lost before any other finish
            self._replay_finishes()

    def _pd_policy(self, cluster: ClusterConfig, gateway: GatewayConfig):
        """The P/D decision policy (None: the cluster has no prefill pool), checked against
        the cluster and the router."""
        P = cluster.prefill_instances
        if gateway.pd is None and not P:
            return None
        pd = make_policy("pd-always" if gateway.pd is None else gateway.pd, "pd")
        if gateway.eviction is not None and pd.disaggregates:
            raise ConfigError(f"gateway.eviction on a P/D cluster (cluster.prefill_instances={P}) is not simulated")
        if not P:
            if pd.disaggregates:
                raise ConfigError(f"gateway.pd={pd.name!r} disaggregates, but the cluster has no prefill pool: "
                                  "set cluster.prefill_instances (>= 1), or use pd-aggregated")
            return pd
        if pd.disaggregates and self._codes.router == ROUTER_PY and not self.external_router:
            raise ConfigError(f"P/D disaggregation (cluster.prefill_instances={P}) needs a compiled router or "
                              f"an external one (an environment's agent); router {self.router.name!r} is a "
                              "Python policy")
        return pd

    def _attach(self, state: EngineState, c: int) -> None:
        """Start this simulation in slot ``c`` of a batched state (loaded with its inputs)."""
        codes = self._codes
        state.set_policy(c, "router", codes.router, codes.router_params)
        if self._hint is not None:  # its books, then routing handed out: the books stay (CI_BOOKS)
            state.set_policy(c, "router", self._hint.code, self._hint.params)
            state.set_policy(c, "router", ROUTER_PY)
        state.set_policy(c, "flow", codes.flow, codes.flow_params)
        state.set_policy(c, "admission", codes.admission, codes.admission_params)
        if state.clusters.nprefill[c]:
            state.set_policy(c, "pd", *self.pd.compiled_form())
        self._python_router = codes.router == ROUTER_PY and not self.external_router
        I = self.cluster.instances
        self.view = RouterView(
            now=0.0, num_instances=I, waiting=None, running=None, kv_util=None, metrics_age_s=np.zeros(I),
            in_flight=None, queued_prefill_tokens=None, saturation=0.0,
            prefix_hit_tokens=None, latency_model=self.latency,
            engine=self.cluster.engine, kv_blocks=None, rng=self.rng,
            band_priorities=self.band_priorities, band_lengths=np.zeros(len(self.band_priorities), np.int64),
            band_oldest_wait_s=np.zeros(len(self.band_priorities)), arrivals_since=None, suggest=None,
        )
        self._bind(state, c)
        self.router = self.router  # Python routers hear of finishes (see the setter)
        for p in (self.router, self.admission, self.flow):
            if p is not None:
                p.bind(self.view)
        state.scrape(c, 0.0)

    def _bind(self, state: EngineState, c: int) -> None:
        """Point the table and the view at slot ``c`` of ``state`` (also after the state
        was regrown: the simulation itself is unchanged)."""
        self.state, self.c = state, c
        self.r0 = int(state.req_off[c])
        i0, i1 = int(state.inst_off[c]), int(state.inst_off[c + 1])
        self._cl = state.cluster(c)  # this cluster's fields, read and written in the state
        self.table = RequestTable(self.workload, self.cluster.engine.block_size, state, c)
        inst = state.instances
        i1 = i0 + int(self._cl.nserve)  # policies see the serving instances (all unless autoscaled)
        self.in_flight, self.queued_prefill = inst.inflight[i0:i1], inst.qprefill[i0:i1]
        self.kv_blocks = inst.total[i0:i1].copy()
        self._scrape_t = inst.scrape_t[i0:i1]
        v = self.view
        v.num_instances = i1 - i0
        if len(v.metrics_age_s) != i1 - i0:
            v.metrics_age_s = np.zeros(i1 - i0)
        v.waiting, v.running, v.kv_util = inst.scr_waiting[i0:i1], inst.scr_running[i0:i1], inst.scr_kv[i0:i1]
        v.in_flight, v.queued_prefill_tokens, v.kv_blocks = self.in_flight, self.queued_prefill, self.kv_blocks
        # set here, not once: a copy (bound_copies) must call its own methods, not the original's
        v.prefix_hit_tokens, v.arrivals_since = _weak(self.prefix_hit_tokens), _weak(self.arrivals_since)
        v.suggest = None if self._hint is None else _weak(self._suggest_for)

    @property
    def needs_python(self) -> bool:
        """Whether the kernel may pause this simulation for a Python policy or finish hook."""
        ci = self._cl
        return bool(self._python_router or ci.flow == FLOW_PY or ci.admit == ADMIT_PY or ci.log_finish)

    @property
    def router(self) -> RoutingPolicy | None:
        """The routing policy; with an external router, a policy set here (an environment's
        observer) still receives the ``on_dispatch`` / ``on_finish`` hooks."""
        return self._router

    @router.setter
    def router(self, policy: RoutingPolicy | None) -> None:
        self._router = policy
        if self.state is not None:  # a compiled router keeps its own books
            hooks = policy is not None and (self._python_router or self.external_router)
            self._cl.log_finish = int(hooks)

    # ================================================================ public API
    def run(self) -> "Simulator":
        """Simulate until every request is final or the horizon is reached."""
        if self.external_router:
            raise ConfigError("router='external' needs decisions via Simulator.route(); use advance()")
        self.advance()
        return self

    @property
    def now(self) -> float:
        """Simulated time, seconds."""
        return float(self._cl.now)

    @property
    def arrived(self) -> int:
        """Requests that have arrived at the gateway so far (a prefix of the workload)."""
        return int(self._cl.ptr)

    @property
    def done(self) -> bool:
        """No request left to arrive or in the system."""
        return self.arrived >= len(self.workload) and self._cl.active == 0

    @property
    def pending_route(self) -> int | None:
        """The request awaiting an external routing decision, if any."""
        return int(self._cl.pending) - self.r0 if self._cl.status == ST_ROUTE else None

    @property
    def pending_info(self) -> RequestInfo | None:
        """The request of the latest routing decision pause (the one awaiting a decision
        while ``pending_route`` is set), or None before the first."""
        r = int(self._cl.last_route) - self.r0
        if r < 0:
            return None
        if self._info is None or self._info.id != r:
            self._info = self.request_info(r)
        return self._info

    @property
    def saturation(self) -> float:
        """The saturation detector's value now (utilization: as of the last scrape, 1.0
        once those metrics are stale; concurrency: from the gateway's in-flight counts)."""
        return self.state.saturation_now(self.c)

    def advance(self, until: float = np.inf) -> str:
        """Run events up to time ``until`` (capped at the horizon).

        Returns ``"route"`` when an external routing decision is needed
        (``pending_route`` is set), ``"done"`` when the workload has drained,
        ``"horizon"`` at the horizon, else ``"time"``.
        """
        start = _time.perf_counter()
        try:
            return SimulatorBatch.advance_clusters(self.state, {self.c: self}, [self.c], until)[0]
        finally:
            self.wall_seconds += _time.perf_counter() - start

    def fork(self, k: int) -> "SimulatorBatch":
        """``k`` copies of this simulation as it stands now, in a batch of their own.

        Each copy has its own engine state slot, random generator and policy objects: advanced
        with the same decisions, every copy reproduces this simulation request for request, and
        copies given different decisions diverge only through them. The batch advances all
        copies in one compiled call (``SimulatorBatch.advance_clusters``), which is what a
        lookahead planner needs. The workload and configs are shared, not copied.
        """
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ConfigError(f"fork count {k!r} is invalid; it must be an integer >= 1")
        state = self.state.forked(self.c, int(k))
        return SimulatorBatch.of(state, self.bound_copies(state))

    def bound_copies(self, state: EngineState) -> list["Simulator"]:
        """A copy of this simulation bound to each slot of ``state``, a state of copies of its
        cluster (``EngineState.forked`` / ``fork``): its own policy objects, drawing from the
        slot's random generator as the slot does; the workload and configs are shared."""
        shared = (self.workload, self.cluster, self.gateway, self.latency, self._band_index, self.inputs.units)
        copies = []
        for j in range(state.num_clusters):
            # the copy's policies and its slot draw from one generator, the slot's
            memo = {id(self.state): state, id(self.rng): state.rngs[j], **{id(o): o for o in shared}}
            sim = copy.deepcopy(self, memo)
            sim._bind(state, j)
            copies.append(sim)
        return copies

    def take_over_routing(self) -> RoutingPolicy:
        """From now on, route every request from outside (:meth:`route`), as
        ``router="external"`` does, while the state keeps what the configured compiled router
        needs (its prefix index, its detector's classes), so that forked copies can hand their
        routing back to it (``EngineState.set_policy``): a lookahead planner's rollouts.
        Returns the configured router, which still hears every dispatch and finish, so it
        can be asked what it would choose."""
        if self.external_router or self.router is None:
            raise ConfigError("take_over_routing needs a simulator built with a router, not router='external'")
        self.external_router, self._python_router = True, False
        self.state.set_policy(self.c, "router", ROUTER_PY)
        self.router = self.router  # it hears dispatches and finishes from now on (see the setter)
        return self.router

    def route(self, instance: int) -> None:
        """Answer the pending external routing decision with ``instance``."""
        if self.pending_route is None:
            raise PolicyError("no routing decision is pending")
        self._route_to(self.pending_info, instance, "external router")

    def wake_dispatch(self) -> None:
        """Run a dispatch cycle at ``now`` if anything is queued.

        For usage limits changed from outside between ``advance`` calls (the
        FlowControl environment): a blocked gateway otherwise sleeps until the next
        scrape when its policy is stationary.
        """
        if self.flow is not None:
            self.state.wake_dispatch(self.c)

    def set_ceilings(self, ceilings: np.ndarray) -> None:
        """Per-band ceilings (band 0 highest) of an externally set usage limit (FlowControl env)."""
        self.state.ceil_ext[self.c, :len(self.band_priorities)] = ceilings

    def set_flow_params(self, params) -> None:
        """Parameters of the compiled usage limit (e.g. the soft-reflective ceiling's ramp
        and period scale: FlowControl ``action="soft-reflective"``), from the next dispatch cycle."""
        self.state.set_policy(self.c, "flow", None, params)

    def set_rejection_probs(self, probs: np.ndarray) -> None:
        """Per-band rejection probabilities of an externally set admission (Admission env)."""
        self.state.aprob[self.c, :len(self.band_priorities)] = probs

    @property
    def serving(self) -> int:
        """Instances that take new requests: the first ``serving`` of the cluster (all of
        them unless an autoscaler set fewer, :meth:`set_serving`)."""
        return int(self._cl.nserve)

    def set_serving(self, n: int) -> None:
        """Let routing choose among the first ``n`` instances only, from now on (an
        autoscaler's serving fleet, :mod:`llmsched_gym.autoscaling`). The other instances
        keep running and finishing the requests they hold; the saturation detector and
        the policies' view cover the serving ones."""
        I = self.cluster.instances
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or not 1 <= n <= I:
            raise ConfigError(f"serving instances {n!r} is invalid; it must be an integer in [1, {I}]")
        if self._cl.nprefill and n != I:
            raise ConfigError(f"serving instances {n!r}: a P/D cluster (cluster.prefill_instances="
                              f"{int(self._cl.nprefill)}) cannot be autoscaled; it serves all {I} instances")
        self._cl.nserve = int(n)
        self._bind(self.state, self.c)

    def request_info(self, r: int) -> RequestInfo:
        w = self.workload
        return RequestInfo(
            id=r, arrival_s=float(w.arrival_s[r]), input_tokens=int(w.input_tokens[r]),
            output_tokens=int(w.output_tokens[r]), expected_output_tokens=self.expected_output,
            priority=int(w.priority[r]), hash_ids=w.hashes(r), hash_block_tokens=w.hash_block_tokens,
            prefix_group=int(w.prefix_group[r]), session_id=int(w.session_id[r]),
        )

    def prefix_hit_tokens(self, request: RequestInfo) -> np.ndarray:
        """Precise prefix hit of ``request`` on every serving instance (cached prompt tokens)."""
        hit = self.state.cached_tokens(self.c, self.r0 + request.id)
        return hit if len(hit) == self.serving else hit[:self.serving]

    def fits(self, r: int) -> np.ndarray:
        """Whether request ``r`` can ever run on each instance (else it would be dropped)."""
        return self.state.fits(self.c, self.r0 + r)

    def kv_used(self) -> np.ndarray:
        """Referenced KV blocks per instance now."""
        return self.state.kv_used(self.c)

    @property
    def iterations(self) -> np.ndarray:
        """Engine iterations run per instance so far."""
        i0, i1 = self.state.inst_off[self.c], self.state.inst_off[self.c + 1]
        return self.state.instances.iters[i0:i1]

    def arrivals_since(self, t: float) -> np.ndarray:
        """Arrivals at the gateway per band (band 0 highest) after time ``t`` until now."""
        ptr = self.arrived
        lo = int(np.searchsorted(self.workload.arrival_s[:ptr], t, side="right"))
        return np.bincount(self._band_index[lo:ptr], minlength=len(self.band_priorities))

    def current_view(self) -> RouterView:
        """The router's view now (scraped metrics as of the last scrape)."""
        v = self.view
        v.now = now = self.now
        v.saturation = self.saturation
        v.metrics_age_s[:] = now - self._scrape_t
        bands, enqueued = self.state.bands, self.state.requests.enqueued
        for b in range(len(self.band_priorities)):
            n = bands.len[self.c, b]
            v.band_lengths[b] = n
            v.band_oldest_wait_s[b] = now - enqueued[bands.head[self.c, b]] if n else 0.0
        return v

    # ================================================================ decisions taken in Python
    def _serve(self) -> None:
        """Answer the pause of a Python policy (admission, usage limits or routing)."""
        st = self._cl.status
        r = int(self._cl.pending) - self.r0
        if st == ST_ROUTE:
            self._replay_finishes()
            info = self.pending_info
            self._route_to(info, self.router.route(info, self.current_view()), self.router.name)
        elif st == ST_ADMIT:
            self._cl.decision = int(bool(self.admission.admit(self.request_info(r), self.current_view())))
            self._cl.has_decision = 1
        else:  # ST_CEILINGS
            s = self.saturation
            self.current_view()
            nb = len(self.band_priorities)
            self.state.ceil_ext[self.c, :nb] = self.flow.ceilings(s, nb)
            self._cl.stationary = float(bool(self.flow.stationary(s)))
            self._cl.has_decision = 1

    def _route_to(self, info: RequestInfo, choice, who: str) -> None:
        I, P = self.serving, int(self._cl.nprefill)
        if isinstance(choice, (bool, np.bool_)) or not isinstance(choice, (int, np.integer)) or not P <= choice < I:
            pool = f" (the decode pool: instances {P}..{I - 1} follow the prefill pool)" if P else ""
            raise PolicyError(f"routing policy {who!r} returned {choice!r}; expected an instance index in "
                              f"[{P}, {I - 1}]{pool}")
        i = int(choice)
        self._cl.status = ST_TIME
        if self.state.dispatch_to(self.c, self.r0 + info.id, i) and self._cl.log_finish:
            if not P:  # where it went: a crashed instance's pick went to one that is up (faults)
                i = int(self.table.instance[info.id])
            self.router.on_dispatch(info, i, self.current_view())

    def _replay_finishes(self) -> None:
        """Tell a Python router of the finishes since its last decision, in order."""
        n = int(self._cl.log_len)
        if n and self._router is not None:
            ids = self.state.log[self.r0:self.r0 + n] - self.r0
            inst = self.table.instance[ids]
            self._cl.log_len = 0
            for r, i in zip(ids.tolist(), inst.tolist()):
                self.router.on_finish(r, i)


@checked_keywords
class SimulatorBatch:
    """Several simulators advanced by one compiled call over shared arrays.

    Args:
        sims: simulators built with ``batch=False``; each is bound to one cluster of the
            batch and stays usable on its own (``sim.run()``, ``sim.advance``).
        slack: room per slot for reloading a slot with a larger workload (:meth:`replace`).
    """

    def __init__(self, sims: list[Simulator], slack: float = 1.0):
        self.sims = list(sims)
        ensure_compiled()
        try:
            self.state = EngineState([s.inputs for s in self.sims], slack=slack)
        except MemoryError as e:  # the state grows with instances x requests: say which, in one line
            sizes = ", ".join(f"{s.cluster.instances} instances x {len(s.workload):,} requests" for s in self.sims[:3])
            raise ConfigError(f"the simulation state does not fit in memory ({' '.join(str(e).split())}) for "
                              f"{sizes}{', ...' if len(self.sims) > 3 else ''}; give fewer instances, a lower "
                              "rate or a shorter window (duration_s)") from None
        for c, s in enumerate(self.sims):
            s._attach(self.state, c)

    @classmethod
    def of(cls, state: EngineState, sims: list[Simulator]) -> "SimulatorBatch":
        """The batch of simulators already bound to the slots of ``state`` (see :meth:`Simulator.fork`)."""
        batch = cls.__new__(cls)
        batch.sims, batch.state = list(sims), state
        return batch

    def replace(self, c: int, sim: Simulator) -> None:
        """Start ``sim`` (built with ``batch=False``) in slot ``c``, ending what ran there.
        A workload too large for the slot regrows the whole state (other clusters' runs
        are moved, not changed)."""
        if not self.state.has_room(c, sim.inputs):
            self.state = self.state.regrown(c, sim.inputs)
            for k, other in enumerate(self.sims):
                if k != c:
                    other._bind(self.state, k)
        self.state.load(c, sim.inputs)
        self.sims[c] = sim
        sim._attach(self.state, c)

    def run(self) -> "SimulatorBatch":
        """Simulate every cluster until it drains or reaches its horizon."""
        if any(s.external_router for s in self.sims):
            raise ConfigError("router='external' needs decisions via Simulator.route(); use advance()")
        start = _time.perf_counter()
        self.advance_clusters(self.state, dict(enumerate(self.sims)), list(range(len(self.sims))), np.inf)
        wall = _time.perf_counter() - start
        for s in self.sims:
            s.wall_seconds += wall / len(self.sims)
        return self

    @staticmethod
    def advance_clusters(state: EngineState, sims: dict, clusters: list[int], until) -> list[str]:
        """Advance ``clusters`` of ``state`` to ``until`` (a time or one per cluster), answering
        Python policies' pauses and applying fault schedules (a cluster stops at each fault
        action's time, :mod:`llmsched_gym.faults`); returns each cluster's status name."""
        if not any(sims[c].next_fault_s < np.inf for c in clusters):
            return SimulatorBatch._advance_plain(state, sims, clusters, until)
        end = dict(zip(clusters, np.broadcast_to(np.asarray(until, float), (len(clusters),)).tolist()))
        result, pending = {}, list(clusters)
        while pending:
            stops = np.array([min(end[c], sims[c].next_fault_s) for c in pending])
            statuses = SimulatorBatch._advance_plain(state, sims, pending, stops)
            again = []
            for c, st, stop in zip(pending, statuses, stops.tolist()):
                sim = sims[c]
                if st == "time" and sim.next_fault_s <= sim.now:
                    sim._apply_faults()
                    if stop < end[c]:
                        again.append(c)
                        continue
                result[c] = st
            pending = again
        return [result[c] for c in clusters]

    @staticmethod
    def _advance_plain(state: EngineState, sims: dict, clusters: list[int], until) -> list[str]:
        """:meth:`advance_clusters` without fault actions."""
        C = state.num_clusters
        active = np.zeros(C, bool)
        active[clusters] = True
        ends = np.full(C, np.inf)
        ends[clusters] = until
        status = state.clusters.status
        while True:
            state.advance(active, ends)
            st = status
            served = np.zeros(C, bool)
            for c in np.flatnonzero(active & (st >= ST_ROUTE)).tolist():
                sim = sims[c]
                if st[c] == ST_ROUTE:
                    if not sim._python_router:
                        sim._replay_finishes()
                        continue  # an external decision is owed: stay paused
                sim._serve()
                served[c] = True
            if not served.any():
                break
            active = served
        logged = np.asarray(clusters)[state.clusters.log_len[clusters] > 0]  # routers owed finish hooks
        for c in logged.tolist():
            sims[c]._replay_finishes()
        return [STATUS_NAMES[status[c]] for c in clusters]


@checked_keywords
def simulate_batch(specs: list[dict]) -> list[Simulator]:
    """Run several simulations as one batched computation; returns the finished simulators.

    Each spec holds :class:`Simulator` keywords (``workload``, ``cluster``, ``gateway``,
    ``seed``, ``horizon_s``). Results are bit-identical to running each alone.
    """
    sims = [Simulator(**spec, batch=False) for spec in specs]
    SimulatorBatch(sims).run()
    return sims


def _warm_up_simulator() -> Simulator:
    w = Workload([0.0, 0.01], [64, 64], [4, 4], priority=[0, -1], hash_ids=[1, 2, 1, 3],
                 hash_offsets=[0, 2, 4], hash_block_tokens=16)
    return Simulator(w, ClusterConfig(instances=2, kv_blocks=100),
                     GatewayConfig(router="jsq", flow_control="soft-reflective-ceiling"))


#: Seconds of a cold compile on one core, for the estimate shown: twice the 37 s of wall time
#: measured with two processes on a 2-core machine at load average 1 (docs/performance.md).
COMPILE_CPU_S = 74.0

_compile_checked = False  # whether this process has made sure the kernels are compiled


def compile_kernels() -> None:
    """Compile (or load from numba's disk cache) the engine's kernels now, by simulating
    two requests. Worker pools call it first, so that their processes find the kernels
    compiled (inherited or cached) instead of all compiling them at once; the first
    simulator of a process does too. On a cold cache it says so on stderr with an
    estimate, and with two or more cores a second process compiles part of the event
    loop meanwhile (:mod:`llmsched_gym.engine.warmup`)."""
    global _compile_checked
    _compile_checked = True
    cold = cache_is_cold()
    start = _time.perf_counter()
    if cold:
        procs = min(os.cpu_count() or 1, 2)
        print(f"llmsched-gym: compiling the simulator, once per install (about {COMPILE_CPU_S / procs:.0f} s "
              f"on {procs} core{'s' * (procs > 1)}; later runs load it from numba's cache) ...",
              end="", file=sys.stderr, flush=True)
    if cold and procs >= 2:
        child = subprocess.Popen([sys.executable, "-c", "from llmsched_gym.simulator import _compile_background; "
                                  "_compile_background()"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            sim = _warm_up_simulator()
            compile_subtrees(FOREGROUND, sim.state)
        finally:
            child.wait()
    else:
        sim = _warm_up_simulator()
    sim.run()
    if cold:
        print(f" done in {_time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


def ensure_compiled() -> None:
    """:func:`compile_kernels` once per process, before the first simulation."""
    if not _compile_checked:
        compile_kernels()


def _compile_background() -> None:
    """The second process of :func:`compile_kernels`."""
    global _compile_checked
    _compile_checked = True
    compile_subtrees(BACKGROUND, _warm_up_simulator().state)
