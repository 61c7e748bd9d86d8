"""The cluster simulator: gateway (admission, band queues, dispatch) + instances.

One discrete-event loop over five event sources, earliest first (ties in this order):
request becomes schedulable at an instance, instance iteration ends, metrics scrape,
arrival at the gateway, dispatch cycle. Instance state is held in numpy arrays; the
next iteration end of every instance is one array (``argmin`` picks the next).

The loop can pause when a routing decision is needed (``router="external"``), which is
how the Routing environment hands decisions to an agent.
"""

from __future__ import annotations

import heapq
import time as _time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .engine import EngineConfig, Instance
from .errors import ConfigError, PolicyError, check_nonnegative
from .policy import AdmissionPolicy, RoutingPolicy, UsageLimitPolicy, make_policy
from .requests import DROPPED, EXPIRED, REJECTED, RequestTable
from .view import RequestInfo, RouterView
from .workload import Workload

EXTERNAL = "external"  # router placeholder: routing decisions are taken via Simulator.route()
UNLIMITED_BLOCKS = 2**40


@dataclass
class ClusterConfig:
    """Hardware, model and engine of a homogeneous cluster.

    Args:
        instances: number of model instances.
        hardware, model, tp: presets (see ``llmsched_gym.hardware``) and tensor parallelism.
        latency_model: ``linear``, ``roofline``, ``blis-trained-physics`` or
            ``blis-roofline`` (BLIS's roofline formula; for parity runs only).
        latency_params: keyword overrides for the step-time model's coefficients.
        kv_blocks: KV capacity per instance in blocks; None derives it from memory
            (DESIGN 3.2); ``"unlimited"`` disables capacity limits and eviction.
        gpu_memory_utilization: fraction of GPU memory vLLM may use.
        engine: per-instance limits (``EngineConfig``).
        scrape_interval_s: how often the gateway's metrics refresh (0 = always fresh).
    """

    instances: int = 2
    hardware: str = "H100"
    model: str = "qwen3-14b"
    tp: int = 1
    latency_model: str = "linear"
    latency_params: dict = field(default_factory=dict)
    kv_blocks: int | str | None = None
    gpu_memory_utilization: float = 0.9
    engine: EngineConfig = field(default_factory=EngineConfig)
    scrape_interval_s: float = 0.05

    def __post_init__(self) -> None:
        check_nonnegative("cluster.instances", self.instances, strict=True)
        check_nonnegative("cluster.tp", self.tp, strict=True)
        check_nonnegative("cluster.scrape_interval_s", self.scrape_interval_s)
        if isinstance(self.kv_blocks, str) and self.kv_blocks != "unlimited":
            raise ConfigError(f"cluster.kv_blocks={self.kv_blocks!r} is invalid; use an integer > 0 or 'unlimited'")
        if isinstance(self.kv_blocks, (int, np.integer)):
            check_nonnegative("cluster.kv_blocks", self.kv_blocks, strict=True)
        if isinstance(self.engine, dict):
            self.engine = EngineConfig(**self.engine)

    def make_latency(self):
        from .latency import make_latency_model

        return make_latency_model(self.latency_model, hardware=self.hardware, model=self.model,
                                  tp=self.tp, **self.latency_params)

    def total_blocks(self) -> int:
        if self.kv_blocks == "unlimited":
            return UNLIMITED_BLOCKS
        if self.kv_blocks is not None:
            return int(self.kv_blocks)
        from .hardware import get_hardware, get_model, kv_capacity_blocks

        return kv_capacity_blocks(get_hardware(self.hardware), get_model(self.model), tp=self.tp,
                                  gpu_memory_utilization=self.gpu_memory_utilization,
                                  block_size=self.engine.block_size)


@dataclass
class GatewayConfig:
    """Admission, flow control and routing in front of the instances (DESIGN 4).

    Args:
        router: routing policy name/instance, or ``"external"`` (decided via ``route``).
        admission: admission policy (default ``always-admit``).
        flow_control: usage-limit policy for the band-queue dispatch loop; None
            dispatches every admitted request on arrival (no gateway queue).
        ttl_s: time a request may wait in a band queue before it expires.
        band_capacity: requests per band queue; arrivals to a full band are rejected.
        dispatch_interval_s: period of dispatch cycles while anything is queued.
    """

    router: object = "round-robin"
    admission: object = "always-admit"
    flow_control: object = None
    ttl_s: float = 60.0
    band_capacity: int = 5000
    dispatch_interval_s: float = 0.001

    def __post_init__(self) -> None:
        check_nonnegative("gateway.ttl_s", self.ttl_s, strict=True)
        check_nonnegative("gateway.band_capacity", self.band_capacity, strict=True)
        check_nonnegative("gateway.dispatch_interval_s", self.dispatch_interval_s, strict=True)


class Simulator:
    """One cluster serving one workload.

    Args:
        workload: the requests (see :class:`~llmsched_gym.workload.Workload`).
        cluster: a :class:`ClusterConfig`.
        gateway: a :class:`GatewayConfig`.
        seed: seeds the gateway's generator (policies' randomness).
        horizon_s: stop at this simulated time; requests still running are ``in_flight``.
    """

    def __init__(self, workload: Workload, cluster: ClusterConfig | None = None,
                 gateway: GatewayConfig | None = None, seed: int = 0, horizon_s: float | None = None):
        self.workload = workload
        self.cluster = cluster = cluster or ClusterConfig()
        self.gateway = gateway = gateway or GatewayConfig()
        self.horizon = np.inf if horizon_s is None else float(horizon_s)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.latency = cluster.make_latency()
        self.table = RequestTable(workload, cluster.engine.block_size)
        blocks = cluster.total_blocks()
        I = cluster.instances
        self.instances = [Instance(i, self.table, cluster.engine, blocks, self.latency,
                                   self._on_finish, self._on_prefill_done) for i in range(I)]
        self.next_t = np.full(I, np.inf)  # mirrors Instance.next_t for argmin
        self.kv_blocks = np.full(I, blocks, np.int64)

        self.external_router = gateway.router == EXTERNAL
        self.router: RoutingPolicy | None = None if self.external_router else make_policy(gateway.router, "routing")
        self.admission: AdmissionPolicy = make_policy(gateway.admission, "admission")
        self.flow: UsageLimitPolicy | None = (
            None if gateway.flow_control is None else make_policy(gateway.flow_control, "usage-limit"))
        for p in (self.router, self.admission, self.flow):
            if p is not None:
                p.reset(I, self.rng)

        # Bands: one FCFS queue per priority present in the workload, highest first.
        self.band_priorities = tuple(sorted({int(p) for p in np.unique(workload.priority)}, reverse=True)) or (0,)
        self.band_of = {p: b for b, p in enumerate(self.band_priorities)}
        self.bands: list[deque[int]] = [deque() for _ in self.band_priorities]
        self.enqueued_t = np.full(len(workload), np.nan)
        band_lookup = np.vectorize(self.band_of.__getitem__, otypes=[np.int64])
        self._band_index = band_lookup(workload.priority) if len(workload) else np.zeros(0, np.int64)

        # Scraped metrics and router-local counters (DESIGN 3.4).
        self.scraped_waiting = np.zeros(I, np.int64)
        self.scraped_running = np.zeros(I, np.int64)
        self.scraped_kv = np.zeros(I)
        self.scrape_t = np.zeros(I)
        self.saturation = 0.0
        self.in_flight = np.zeros(I, np.int64)
        self.queued_prefill = np.zeros(I, np.int64)
        self.prefill_estimate = np.zeros(len(workload), np.int64)
        self.expected_output = float(workload.output_tokens.mean()) if len(workload) else 0.0

        self.now = 0.0
        self._arrival_ptr = 0
        self._eligible: list[tuple[float, int, int]] = []  # (time, request, instance)
        self._next_scrape = 0.0
        self._next_cycle = np.inf
        self.pending_route: int | None = None  # request awaiting an external routing decision
        self.pending_info: RequestInfo | None = None
        self._active = 0  # requests admitted and not final
        self.wall_seconds = 0.0
        self.view = RouterView(
            now=0.0, num_instances=I, waiting=self.scraped_waiting, running=self.scraped_running,
            kv_util=self.scraped_kv, metrics_age_s=np.zeros(I), in_flight=self.in_flight,
            queued_prefill_tokens=self.queued_prefill, saturation=0.0,
            prefix_hit_tokens=self.prefix_hit_tokens, latency_model=self.latency,
            engine=cluster.engine, kv_blocks=self.kv_blocks, rng=self.rng,
            band_priorities=self.band_priorities, band_lengths=np.zeros(len(self.bands), np.int64),
            band_oldest_wait_s=np.zeros(len(self.bands)), arrivals_since=self.arrivals_since,
        )
        for p in (self.router, self.admission, self.flow):
            if p is not None:
                p.bind(self.view)
        self._scrape(0.0)

    # ================================================================ public API
    def run(self) -> "Simulator":
        """Simulate until every request is final or the horizon is reached."""
        if self.external_router:
            raise ConfigError("router='external' needs decisions via Simulator.route(); use advance()")
        self.advance()
        return self

    @property
    def done(self) -> bool:
        """No request left to arrive or in the system."""
        return self._arrival_ptr >= len(self.workload) and self._active == 0

    def advance(self, until: float = np.inf) -> str:
        """Run events up to time ``until`` (capped at the horizon).

        Returns ``"route"`` when an external routing decision is needed
        (``pending_route`` is set), ``"done"`` when the workload has drained,
        ``"horizon"`` at the horizon, else ``"time"``.
        """
        if self.pending_route is not None:
            return "route"
        start = _time.perf_counter()
        try:
            return self._loop(min(until, self.horizon))
        finally:
            self.wall_seconds += _time.perf_counter() - start

    def route(self, instance: int) -> None:
        """Answer the pending external routing decision with ``instance``."""
        r = self.pending_route
        if r is None:
            raise PolicyError("no routing decision is pending")
        self.pending_route = None
        self._dispatch_to(self.pending_info, instance, "external router")

    def wake_dispatch(self) -> None:
        """Run a dispatch cycle at ``now`` if anything is queued.

        For usage limits changed from outside between ``advance`` calls (the
        FlowControl environment): a blocked gateway otherwise sleeps until the next
        scrape when its policy is stationary.
        """
        if self.flow is not None and any(self.bands):
            self._next_cycle = min(self._next_cycle, self.now)

    def request_info(self, r: int) -> RequestInfo:
        w = self.workload
        return RequestInfo(
            id=r, arrival_s=float(w.arrival_s[r]), input_tokens=int(w.input_tokens[r]),
            output_tokens=int(w.output_tokens[r]), expected_output_tokens=self.expected_output,
            priority=int(w.priority[r]), hash_ids=w.hashes(r), hash_block_tokens=w.hash_block_tokens,
            prefix_group=int(w.prefix_group[r]), session_id=int(w.session_id[r]),
        )

    def prefix_hit_tokens(self, request: RequestInfo) -> np.ndarray:
        """Precise prefix hit of ``request`` on every instance (cached prompt tokens)."""
        units = self.table.units_of(request.id)
        if not units[0]:
            return np.zeros(len(self.instances), np.int64)
        return np.array([inst.cache.cached_tokens(*units) for inst in self.instances], np.int64)

    def arrivals_since(self, t: float) -> np.ndarray:
        """Arrivals at the gateway per band (band 0 highest) after time ``t`` until now."""
        ptr = self._arrival_ptr
        lo = int(np.searchsorted(self.workload.arrival_s[:ptr], t, side="right"))
        return np.bincount(self._band_index[lo:ptr], minlength=len(self.bands))

    def current_view(self) -> RouterView:
        """The router's view now (scraped metrics as of the last scrape)."""
        v = self.view
        v.now = self.now
        v.saturation = self.saturation
        v.metrics_age_s[:] = self.now - self.scrape_t
        for b, q in enumerate(self.bands):
            v.band_lengths[b] = len(q)
            v.band_oldest_wait_s[b] = self.now - self.enqueued_t[q[0]] if q else 0.0
        return v

    # ================================================================ event loop
    def _loop(self, until: float) -> str:
        arrivals = self.workload.arrival_s
        n_req = len(arrivals)
        next_t = self.next_t
        interval = self.cluster.scrape_interval_s
        while True:
            i = int(next_t.argmin())
            t_inst = next_t[i]
            t_elig = self._eligible[0][0] if self._eligible else np.inf
            t_arr = arrivals[self._arrival_ptr] if self._arrival_ptr < n_req else np.inf
            t = min(t_elig, t_inst, t_arr, self._next_cycle)
            if interval > 0 and self._next_scrape <= min(t, until):
                # State is constant between events (up to KV growth inside decode
                # segments, which kv_used_at accounts for), so of all the scrape ticks
                # before the next event only the last one needs to be taken.
                tick = self._next_scrape + interval * np.floor((min(t, until) - self._next_scrape) / interval)
                self._scrape(tick)
                self._next_scrape = tick + interval
            if t > until or t == np.inf:
                if self.done:
                    return "done"
                self.now = until if until < np.inf else self.now
                return "horizon" if until >= self.horizon else "time"
            self.now = t
            if t_elig == t:
                _, r, j = heapq.heappop(self._eligible)
                self.instances[j].enqueue(r, t)
                next_t[j] = self.instances[j].next_t
            elif t_inst == t:
                inst = self.instances[i]
                inst.complete()
                next_t[i] = inst.next_t
                if interval == 0:
                    self._scrape(t)
            elif t_arr == t:
                self._arrive(self._arrival_ptr, t)
                self._arrival_ptr += 1
            else:
                self._dispatch_cycle(t)
            if self.pending_route is not None:
                return "route"
            if self.done:
                return "done"

    # ================================================================ gateway
    def _scrape(self, t: float) -> None:
        for i, inst in enumerate(self.instances):
            self.scraped_waiting[i] = len(inst.waiting) + inst.pending
            self.scraped_running[i] = inst.num_running
            self.scraped_kv[i] = inst.kv_used_at(t) / inst.cache.total
        self.scrape_t[:] = t
        self.saturation = float(np.maximum(self.scraped_waiting / 5.0, self.scraped_kv / 0.8).mean())

    def _arrive(self, r: int, t: float) -> None:
        table = self.table
        info = self.request_info(r)
        if not self.admission.admit(info, self.current_view()):
            self._final(r, t, REJECTED)
            return
        self._active += 1
        if self.flow is None:
            self._dispatch(r, info)
            return
        b = self.band_of[int(table.priority[r])]
        if len(self.bands[b]) >= self.gateway.band_capacity:
            self._active -= 1
            self._final(r, t, REJECTED)
            return
        self.bands[b].append(r)
        self.enqueued_t[r] = t
        self._next_cycle = min(self._next_cycle, t)  # a cycle runs after every enqueue

    def _expire(self, t: float) -> None:
        ttl = self.gateway.ttl_s
        for q in self.bands:
            while q and self.enqueued_t[q[0]] + ttl <= t:
                r = q.popleft()
                self._active -= 1
                self._final(r, self.enqueued_t[r] + ttl, EXPIRED)

    def _dispatch_cycle(self, t: float) -> None:
        """One cycle of DESIGN 4's dispatch loop: at most one dispatch."""
        self._expire(t)
        s = self.saturation
        self.current_view()  # bound policies read it
        ceilings = self.flow.ceilings(s, len(self.bands))
        blocked = False
        for b, q in enumerate(self.bands):
            if s >= ceilings[b]:
                blocked = True
                break
            if q:
                r = q.popleft()
                self._dispatch(r, self.request_info(r))
                break
        if not any(self.bands):
            self._next_cycle = np.inf
        elif blocked and self.flow.stationary(s) and self.cluster.scrape_interval_s > 0:
            # Nothing changes until the saturation does, i.e. until the next scrape,
            # unless a queued request expires first.
            oldest = min(self.enqueued_t[q[0]] for q in self.bands if q) + self.gateway.ttl_s
            self._next_cycle = max(t + self.gateway.dispatch_interval_s, min(self._next_scrape, oldest))
        else:
            self._next_cycle = t + self.gateway.dispatch_interval_s

    def _dispatch(self, r: int, info: RequestInfo) -> None:
        if self.external_router:
            self.pending_route, self.pending_info = r, info
            return
        choice = self.router.route(info, self.current_view())
        self._dispatch_to(info, choice, self.router.name)

    def _dispatch_to(self, info: RequestInfo, choice, who: str) -> None:
        I = len(self.instances)
        if isinstance(choice, (bool, np.bool_)) or not isinstance(choice, (int, np.integer)) or not 0 <= choice < I:
            raise PolicyError(f"routing policy {who!r} returned {choice!r}; expected an instance index in [0, {I - 1}]")
        i = int(choice)
        t, r = self.now, info.id
        table = self.table
        inst = self.instances[i]
        table.dispatch_t[r] = t
        table.instance[r] = i
        if not inst.fits(r):
            self._active -= 1
            self._final(r, t, DROPPED)
            return
        est = int(table.input[r] - inst.cache.cached_tokens(*table.units_of(r)))
        self.prefill_estimate[r] = est
        self.queued_prefill[i] += est
        self.in_flight[i] += 1
        if self.router is not None:
            self.router.on_dispatch(info, i, self.current_view())
        inst.pending += 1
        delay = float(self.latency.arrival_delay_us(table.input[r : r + 1])[0]) * 1e-6
        heapq.heappush(self._eligible, (t + delay, r, i))

    def _on_finish(self, r: int, t: float, outcome: int) -> None:
        """Engine callback: request ``r`` left its instance at ``t``."""
        i = int(self.table.instance[r])
        self.in_flight[i] -= 1
        self.queued_prefill[i] -= self.prefill_estimate[r]
        self.prefill_estimate[r] = 0
        self._active -= 1
        self._final(r, t, outcome)
        if self.router is not None:
            self.router.on_finish(r, i)

    def _on_prefill_done(self, ids: np.ndarray) -> None:
        """Engine callback: these requests emitted their first token (prefill done)."""
        np.subtract.at(self.queued_prefill, self.table.instance[ids], self.prefill_estimate[ids])
        self.prefill_estimate[ids] = 0

    def _final(self, r: int, t: float, outcome: int) -> None:
        self.table.outcome[r] = outcome
        self.table.end_t[r] = t
