"""Autoscaling a cluster's fleet: cold starts, drains and GPU-seconds (docs/environments.md).

A cluster is allocated at its largest fleet (``cluster.instances``) and the engine
simulates every instance throughout, so every arrival still ends finished, rejected,
expired, dropped or in flight whatever the scaling. A :class:`Fleet` decides which of
them take new requests:

* the *serving* instances are a prefix ``0 .. S-1`` of the cluster's
  (:meth:`Simulator.set_serving`, the kernel's ``CI_NSERVE``): the compiled routers, the
  saturation detector and the Python policies' view cover those only;
* :meth:`Fleet.set_target` asks for ``n`` instances (1 .. ``cluster.instances``).
  Scale-up walks the indices from the current target to ``n - 1``: a stopped instance
  starts and is ready ``cold_start_s`` later; one still draining holds the model and
  is ready at once. Scale-down takes the highest indices out of service: a ready one
  *drains* (it takes no new request, finishes its running and queued ones, then stops)
  and a starting one is cancelled;
* instance ``j`` serves once it and every instance below it are ready (the LIFO order
  keeps the serving set a prefix): an instance taken back while one below it is still
  starting waits, loaded, until that one serves.

GPU-seconds are ``tp`` times the time each instance spends starting, ready or draining
with work: a draining instance stops at the end of its last request. The initial fleet
starts warm (serving at time 0).

Scaling policies (role ``scaling``, :class:`ScalingPolicy`) see a :class:`ScalingView`
once per scaling interval and return the instances they want; :func:`run_autoscaled`
drives a simulation with one (``benchmarks/studies/autoscaling.py``, ``compare --scaler``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .engine.api import IN_FLIGHT
from .engine.hardware import HARDWARE, MODELS, get_hardware, get_model
from .errors import ConfigError
from .gateway.policy import Policy, make_policy
from .simulator import Simulator, SimulatorBatch

# ====================================================================== cold start presets
#: Seconds to start the serving container on a node that has its image cached
#: (assumption: pulling a multi-GB image is left out, as an autoscaler's node pool
#: keeps images warm).
CONTAINER_START_S = 10.0
#: Seconds of engine initialization after the weights are in GPU memory (assumption:
#: vLLM's memory profiling, KV-cache allocation and CUDA-graph capture, of the order
#: vLLM logs for a 7-30B model).
ENGINE_INIT_S = 20.0
#: Weight read bandwidth per GPU, GB/s (assumption: safetensors read from a node-local
#: NVMe drive, shared by the node's GPUs; tensor-parallel shards load in parallel).
WEIGHT_LOAD_GBPS = 2.0


def cold_start_preset(model: str, hardware: str, tp: int = 1) -> float:
    """Model load time of one instance, seconds: ``CONTAINER_START_S`` + the model's
    weight bytes over ``tp x WEIGHT_LOAD_GBPS`` + ``ENGINE_INIT_S`` (Qwen3-14B on one GPU:
    29.5 GB of bf16 weights, 44.8 s). The hardware is checked against the presets; the
    assumptions behind the three constants are in their comments and docs/environments.md."""
    m = get_model(model)
    get_hardware(hardware)
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ConfigError(f"tp={tp!r} is invalid; it must be an integer >= 1")
    weights_gb = m.total_params * m.dtype_bytes / 1e9
    return CONTAINER_START_S + weights_gb / (tp * WEIGHT_LOAD_GBPS) + ENGINE_INIT_S


#: ``{(model, hardware): cold start s}`` at ``tp=1`` for every preset pair.
COLD_START_PRESETS = {(m, h): cold_start_preset(m, h) for m in MODELS for h in HARDWARE}


def resolve_cold_start(cluster, override: float | None = None) -> float:
    """The cold start of ``cluster``'s instances: ``override``, else ``cluster.cold_start_s``,
    else :func:`cold_start_preset` of its model, hardware and ``tp``."""
    value = override if override is not None else cluster.cold_start_s
    if value is None:
        return cold_start_preset(cluster.model, cluster.hardware, cluster.tp)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or \
            not np.isfinite(value) or value < 0:
        raise ConfigError(f"cold_start_s={value!r} is invalid; it must be a finite number of seconds >= 0")
    return float(value)


# ====================================================================== the fleet
def check_count(field: str, n, max_instances: int) -> int:
    """An instance count: an integer in ``[1, max_instances]``."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ConfigError(f"{field}={n!r} is invalid; it must be an integer number of instances")
    if not 1 <= n <= max_instances:
        raise ConfigError(f"{field}={int(n)} is invalid; it must be in [1, {max_instances}] "
                          f"(the cluster's instances are the largest fleet)")
    return int(n)


@dataclass
class ScalingView:
    """What a scaling policy sees at a scaling decision (per-instance arrays: the
    serving instances, as of the last metrics scrape)."""

    now: float
    interval_s: float
    max_instances: int
    cold_start_s: float
    target: int  #: instances asked for (serving + starting + ready, waiting for one below)
    serving: int
    starting: int
    draining: int
    kv_util: np.ndarray
    waiting: np.ndarray
    running: np.ndarray
    in_flight: np.ndarray
    gateway_queue: int  #: requests in the gateway's band queues
    arrivals: int  #: arrivals during the last interval
    max_num_seqs: int


class ScalingPolicy(Policy):
    """How many instances to run, decided once per scaling interval."""

    role = "scaling"

    def scale(self, view: ScalingView) -> int:
        """The instances wanted from now on (clipped to ``[1, view.max_instances]``)."""
        raise NotImplementedError


class Fleet:
    """Which instances of one simulation serve, start, drain or are stopped (module docstring).

    Args:
        sim: the simulation (its ``cluster.instances`` is the largest fleet).
        initial: instances serving at the start (warm).
        cold_start_s: seconds from starting an instance to its being ready.
    """

    def __init__(self, sim: Simulator, initial: int, cold_start_s: float):
        self.sim = sim
        self.max_instances = I = sim.cluster.instances
        self.cold_start_s = float(cold_start_s)
        self.tp = sim.cluster.tp
        self.target = check_count("initial_instances", initial, I)
        now = sim.now
        self.ready_at = np.full(I, np.inf)  # j < target: when it is ready
        self.ready_at[:self.target] = -np.inf
        self.on_since = np.full(I, np.nan)  # start of the current GPU-time period (NaN: stopped)
        self.on_since[:self.target] = now
        self.drain_since = np.full(I, np.nan)  # j >= target and on: draining since
        self.closed_s = 0.0  # instance-seconds of ended periods
        self.cold_starts = 0
        self._update_serving()

    def forked(self, sim: Simulator) -> "Fleet":
        """A copy of this fleet's books (pending starts, drains, GPU time) for ``sim``, a
        forked copy of its simulation (``Simulator.fork`` / ``bound_copies``: the serving
        set is in the copied engine state); each decides on its own from then on."""
        out = copy.copy(self)
        out.sim = sim
        out.ready_at, out.on_since, out.drain_since = self.ready_at.copy(), self.on_since.copy(), self.drain_since.copy()
        return out

    # ------------------------------------------------------------------ state
    @property
    def serving(self) -> int:
        return self.sim.serving

    def counts(self) -> dict[str, int]:
        """Instances per state: serving, starting, waiting (ready behind a starting one),
        draining, stopped; they add up to ``max_instances``."""
        self._settle()
        now = self.sim.now
        active = np.arange(self.max_instances) < self.target
        starting = int((active & (self.ready_at > now)).sum())
        serving = self.serving
        draining = int((~active & ~np.isnan(self.on_since)).sum())
        return {"serving": serving, "starting": starting, "waiting": self.target - serving - starting,
                "draining": draining, "stopped": self.max_instances - self.target - draining}

    def instance_seconds(self) -> float:
        """Instance-seconds so far (starting, ready or draining with work)."""
        self._settle()
        on = ~np.isnan(self.on_since)
        return self.closed_s + float((self.sim.now - self.on_since[on]).sum())

    def gpu_seconds(self) -> float:
        """GPU-seconds so far: ``tp`` x :meth:`instance_seconds`."""
        return self.tp * self.instance_seconds()

    def _settle(self) -> None:
        """Stop the draining instances that have no request left, at their last request's end."""
        sim = self.sim
        j = np.flatnonzero(~np.isnan(self.drain_since))
        if not len(j):
            return
        st = sim.state
        g0 = int(st.inst_off[sim.c])
        idle = j[st.instances.inflight[g0 + j] == 0]
        if not len(idle):
            return
        tb = sim.table
        n = sim.arrived
        ended = tb.outcome[:n] != IN_FLIGHT
        for k in idle.tolist():
            mine = ended & (tb.instance[:n] == k)
            last = float(tb.end_t[:n][mine].max()) if mine.any() else -np.inf
            stop = max(self.drain_since[k], last)
            self.closed_s += stop - self.on_since[k]
            self.on_since[k] = self.drain_since[k] = np.nan

    def _update_serving(self) -> None:
        now = self.sim.now
        ready = self.ready_at[:self.target] <= now
        s = int(np.argmin(ready)) if not ready.all() else self.target
        if s != self.sim.serving:
            self.sim.set_serving(s)

    def next_ready(self) -> float:
        """When the next starting instance is ready (inf: none is starting)."""
        r = self.ready_at[:self.target]
        r = r[r > self.sim.now]
        return float(r.min()) if len(r) else np.inf

    # ------------------------------------------------------------------ control
    def set_target(self, n: int) -> None:
        """Ask for ``n`` instances from now on (module docstring: scale-up and -down)."""
        n = check_count("instances", n, self.max_instances)
        self._settle()
        now = self.sim.now
        for j in range(n, self.target):  # scale down, highest first
            if self.ready_at[j] <= now:
                self.drain_since[j] = now
            else:  # cancel a start
                self.closed_s += now - self.on_since[j]
                self.on_since[j] = np.nan
            self.ready_at[j] = np.inf
        for j in range(self.target, n):  # scale up
            if np.isnan(self.on_since[j]):
                self.on_since[j] = now
                self.ready_at[j] = now + self.cold_start_s
                self.cold_starts += 1
            else:  # still draining: the model is loaded
                self.drain_since[j] = np.nan
                self.ready_at[j] = -np.inf
        self.target = n
        self._update_serving()

    def view(self, interval_s: float, arrivals: int) -> ScalingView:
        """The :class:`ScalingView` now."""
        c = self.counts()
        sim, st = self.sim, self.sim.state
        g0 = int(st.inst_off[sim.c])
        g1 = g0 + c["serving"]
        return ScalingView(
            now=sim.now, interval_s=interval_s, max_instances=self.max_instances, cold_start_s=self.cold_start_s,
            target=self.target, serving=c["serving"], starting=c["starting"], draining=c["draining"],
            kv_util=st.instances.scr_kv[g0:g1].copy(), waiting=st.instances.scr_waiting[g0:g1].copy(),
            running=st.instances.scr_running[g0:g1].copy(), in_flight=st.instances.inflight[g0:g1].copy(),
            gateway_queue=int(st.bands.len[sim.c].sum()), arrivals=int(arrivals),
            max_num_seqs=sim.cluster.engine.max_num_seqs)


def advance_fleets(batch_state, sims: dict, fleets: dict, until: dict) -> dict:
    """Advance the clusters ``fleets`` (cluster index -> :class:`Fleet`) of one batched
    state to their ``until`` times, stopping at every cold start's end to let the started
    instance serve; returns each cluster's status name (``time``, ``horizon``, ``done``)."""
    status = {}
    pending = sorted(fleets)
    while pending:
        ends = np.array([min(until[c], fleets[c].next_ready()) for c in pending])
        got = SimulatorBatch.advance_clusters(batch_state, sims, pending, ends)
        nxt = []
        for c, s, end in zip(pending, got, ends.tolist()):
            fleets[c]._update_serving()
            if s == "time" and end < until[c]:
                nxt.append(c)
            else:
                status[c] = s
        pending = nxt
    return status


def run_autoscaled(sim: Simulator, scaler, interval_s: float = 15.0, initial: int | None = None,
                   cold_start_s: float | None = None, override=None) -> tuple[Simulator, Fleet]:
    """Run ``sim`` to its end (drain or horizon) under a scaling policy (a spec such as
    ``"hpa-kv:target=0.7"`` or a :class:`ScalingPolicy`) deciding every ``interval_s``
    seconds, from ``initial`` warm instances (None: the fleet the policy asks for at time
    0, seeing one idle instance, starts warm); returns the simulator and its fleet.
    ``override(fleet, policy, n)``, if given, is told each decision ``n`` of the policy
    and returns the instances to ask for instead (a planner's, ``baselines/lookahead.py``)."""
    if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not np.isfinite(interval_s) \
            or interval_s <= 0:
        raise ConfigError(f"interval_s={interval_s!r} is invalid; it must be > 0 seconds")
    policy = make_policy(scaler, "scaling")
    policy.reset(sim.cluster.instances, sim.rng)
    cold = resolve_cold_start(sim.cluster, cold_start_s)
    fleet = Fleet(sim, 1 if initial is None else initial, cold)
    t, prev, status = sim.now, 0, "time"
    while status == "time":
        view = fleet.view(interval_s, sim.arrived - prev)
        prev = sim.arrived
        n = int(np.clip(policy.scale(view), 1, fleet.max_instances))
        if initial is None and t == 0.0 and n != fleet.target:
            fleet = Fleet(sim, n, cold)
        if override is not None:
            n = override(fleet, policy, n)
        fleet.set_target(n)
        t += interval_s
        status = advance_fleets(sim.state, {sim.c: sim}, {sim.c: fleet}, {sim.c: t})[sim.c]
    if status == "route":
        raise ConfigError("run_autoscaled needs a router that decides by itself (not 'external')")
    return sim, fleet
