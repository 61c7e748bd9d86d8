"""The batched engine state: C clusters' requests, instances and gateways in shared arrays.

:class:`EngineState` is an explicit structure (in the spirit of gymnax / Jumanji): a few
2-D numpy arrays, one row per field (:mod:`~llmsched_gym.engine.layout`) and one column
per request, instance or cluster, with per-cluster offsets. The compiled
:func:`~llmsched_gym.engine.kernel.advance` is a function of it. Cluster ``c`` owns
requests ``REQ0[c]:REQ1[c]`` and instances ``INST0[c]:INST1[c]``; each instance owns a
prefix-cache table with one entry per distinct unit key of its cluster's workload.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
from numba import njit
from numba.typed import List

from . import kernel
from .config import EVICTION_ORDERS, PREEMPTION_MODES
from .fields import ENTITIES, POLICY_ROWS, RECORDS, SELF, SPACES, ClusterSlot, Rows, constants, pointer_rows
from .layout import (
    CF_ASYNC_LAG,
    CF_DISP_INT,
    CF_EVICT_GRACE,
    CF_EXP_OUT,
    CF_FT_DELAY,
    CF_HORIZON,
    CF_NOW,
    CF_SAT_KV,
    CF_SAT_MAX_REQ,
    CF_SAT_MAX_TOK,
    CF_SAT_QUEUE,
    CF_SAT_STALE,
    CF_SCRAPE_INT,
    CF_TIMEOUT,
    CF_TTL,
    CF_XFER_LAT,
    CF_XFER_US,
    CI_BAND_CAP,
    CI_BS,
    CI_BUDGET,
    CI_EVICT_MAX,
    CI_FAULTS,
    CI_INST0,
    CI_INST1,
    CI_INTEGER_US,
    CI_LAT_KIND,
    CI_MAX_LEN,
    CI_MAX_SEQS,
    CI_NBANDS,
    CI_NCLASSES,
    CI_NPREFILL,
    CI_NSERVE,
    CI_PTR,
    CI_REQ0,
    CI_REQ1,
    CI_RETRY_MAX,
    CI_SAT_KIND,
    CI_SKIP,
    CI_STALE_POLICY,
    CI_WIN_CAP,
    IF_CPU_LOAD_US,
    II_ANON_FRONT,
    II_CLUSTER,
    II_CPU0,
    II_CPU_CAP,
    II_CPU_DIRECT,
    II_CPU_MASK,
    II_CPU_OWNER,
    II_CPU_VISIBLE,
    II_ENT0,
    II_ENT_DIRECT,
    II_ENT_MASK,
    II_EVICTION,
    II_IX0,
    II_RESTART,
    II_TOTAL,
    RF_ARRIVAL,
    RF_DELAY,
    RF_FINISH_DELAY,
    RI_BAND,
    RI_BK0,
    RI_BK1,
    RI_CLASS,
    RI_INPUT,
    RI_OUTPUT,
    RI_PRIORITY,
    RI_UNIT0,
    RI_UNIT1,
    ROUTER_PY,
    SAT_HYBRID,
    SAT_REQUESTS,
    SAT_TOKENS,
    SAT_UTILIZATION,
    SEGMENT_CHUNK,
    STALE_IGNORE,
    STALE_SATURATED,
    U_BLOCKS,
    U_END,
    U_KEY,
)
from .steptime import N_PARAMS, lower
from .units import prefix_classes, prefix_units, router_block_keys

LAYOUT = constants()
#: Per request record: its array, the rows of its ``content`` fields (what a request is),
#: the other rows and their defaults (what happens to it); see EngineState.replace_future.
_REQUEST_ROWS = tuple(
    (rec.array, [k for k, f in enumerate(rec.fields) if f.content], [k for k, f in enumerate(rec.fields) if not f.content],
     np.array([[f.default] for f in rec.fields if not f.content], rec.dtype))
    for rec in ENTITIES["requests"])

#: A prefix-cache table is indexed by key directly when that takes at most this many times
#: the slots of a hashed one (see _table_size): never more memory than hashing.
DIRECT_MAX_RATIO = 1


def _pow2_at_least(n: float) -> int:
    return 1 << max(int(np.ceil(n)) - 1, 0).bit_length()


def _table_size(x: ClusterInputs, units, cpu: bool = False) -> tuple[int, bool]:
    """(slots, direct) of an instance's prefix-cache table (``cpu``: of its CPU tier; no
    slots without one). Hashed: a power of two at least twice the most entries it can
    hold at once, so that probing stays short and memory follows what the instance can
    cache, not the workload: every entry holds its unit's blocks, so at most the
    workload's smallest units that together fit in its blocks. Direct (one slot per
    distinct key, indexed by the key) when that takes no more slots."""
    blocks = int(x.cpu_blocks if cpu else np.max(x.kv_blocks))
    if cpu and not blocks:
        return 0, False
    if cpu and x.cpu_shared:
        blocks = blocks * x.instances
    n_keys = units[4]
    most = _most_units(units[8], blocks)
    hashed = _pow2_at_least(2 * max(most, 4))
    return (max(n_keys, 1), True) if n_keys <= DIRECT_MAX_RATIO * hashed else (hashed, False)


def _cpu_tables(x: ClusterInputs) -> int:
    """CPU tier tables of a cluster: one per instance, or one shared."""
    return 1 if x.cpu_shared else x.instances


def _table_slots(x: ClusterInputs, units, slack: float, cpu: bool = False) -> int:
    """Slots per instance to reserve: a direct table grows with the keys (room for
    ``slack`` more), a hashed one is bounded by the capacity."""
    size, direct = _table_size(x, units, cpu)
    return int(np.ceil(size * slack)) if direct else size


def _keys_of(x: ClusterInputs) -> tuple:
    """:func:`workload_keys` of a cluster's inputs, computed once per inputs."""
    if x.units is None:
        x.units = workload_keys(x.workload, x.engine.block_size, x.router_block_keys)
    return x.units


def workload_keys(workload, block_size: int, router_keys: tuple | None) -> tuple:
    """Prefix units and router block keys of a workload (see :mod:`.units`), and how many
    of its distinct units have each size in blocks (how many can be cached at once,
    :func:`_most_units`): what :meth:`EngineState.load` reads of it besides its requests,
    as ``ClusterInputs.units``. A function of the workload, the engine's block size and
    the compiled llm-d router's ``(block_tokens, max_blocks)`` (None: no router index)."""
    bk = router_block_keys(workload, *router_keys)[:3] if router_keys else (
        np.zeros(len(workload) + 1, np.int64), np.zeros(0, np.int64), 0)
    units = prefix_units(workload, block_size)
    keys, blocks = units[1], units[2]
    values = np.flatnonzero(np.bincount(blocks)) if len(blocks) else np.zeros(0, np.int64)
    if len(values) == 1:  # every unit the same size (one block each on BLIS's traces)
        per_size = np.bincount(np.full(1, values[0]), minlength=values[0] + 1) * units[4]
    else:
        least = np.zeros(units[4], np.int64)
        for b in values[::-1]:  # a key's blocks, the fewest if they differ (a few sizes)
            least[keys[blocks == b]] = b
        per_size = np.bincount(np.maximum(least, 1))
    return units + bk + (per_size,)


def state_bytes(caps: list[tuple[int, ...]], num_bands: int, max_seqs: int) -> int:
    """Bytes of the arrays :meth:`EngineState._allocate` makes for slots of capacities ``caps``
    (:meth:`EngineState._capacity` order), from the field table."""
    totals = dict(zip(CAP_SPACES, np.sum(caps, axis=0, dtype=np.int64)), clu=len(caps))
    extents = _extents(num_bands, max_seqs)
    return int(sum(np.dtype(rec.dtype).itemsize * np.prod(rec.shape_for(totals, extents), dtype=np.int64)
                   for rec in RECORDS))


#: The index spaces of a slot's capacities, in :meth:`EngineState._capacity` order.
CAP_SPACES = ("req", "unit", "ent", "inst", "bkey", "ix", "cpu")


def _extents(num_bands: int, max_seqs: int) -> dict:
    """The fixed axes of the state's arrays."""
    return {"bands": num_bands, "seqs": max_seqs, "segment": SEGMENT_CHUNK, "params": N_PARAMS}


def memory_bytes() -> float:
    """Memory available to this process now (Linux: MemAvailable; elsewhere: unknown, inf)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


def _index(rec, start: int, n: int, extents: dict) -> tuple:
    """The basic index of ``n`` slots from ``start`` of record ``rec`` (fixed axes up to ``extents``)."""
    return tuple(slice(start, start + n) if axis == "slot" else slice(None) if axis == "field" else
                 slice(0, extents[axis]) for axis in rec.shape)


def _copy_table(rec, a: np.ndarray, s0: int, b: np.ndarray, d0: int, n: int, shifts, live, stale) -> None:
    """Copy the entries of a slot's prefix-cache tables, ``a[s0:s0 + n]``, to ``b[d0:d0 + n]``
    (pointer fields shifted by ``shifts``' deltas), every other destination slot left empty.

    A table is mostly empty, and the kernel writes every field of a slot it fills, so only
    occupied slots move: ``live`` lists the row ranges (relative) that can hold the source's
    entries (direct tables: the keys met so far), None for anywhere; ``stale`` the same for
    what the destination held before (False: it was just allocated, empty)."""
    key = LAYOUT[rec.occupied_by]
    if stale:
        for start, length in stale:
            b[d0 + start:d0 + start + length, key] = 0
    ranges = np.array([(0, n)] if live is None or stale is None else live, np.int64).reshape(-1, 2)
    fields = np.array([row for row, d in shifts if d], np.int64)
    deltas = np.array([d for row, d in shifts if d], np.int64)
    _copy_rows(a, s0, b, d0, ranges, key, fields, deltas)


@njit(cache=True)
def _copy_rows(a, s0, b, d0, ranges, key, fields, deltas):
    """Within ``ranges`` (start, length), each occupied row of ``a`` (from ``s0``) to ``b``
    (from ``d0``) with ``fields`` shifted by ``deltas`` where >= 0; a row empty in ``a`` is
    marked empty in ``b``. One pass: what a fork of a large, sparse table costs."""
    for k in range(ranges.shape[0]):
        for i in range(ranges[k, 0], ranges[k, 0] + ranges[k, 1]):
            src, dst = s0 + i, d0 + i
            if a[src, key] != 0:
                for f in range(a.shape[1]):
                    b[dst, f] = a[src, f]
                for j in range(len(fields)):
                    if b[dst, fields[j]] >= 0:
                        b[dst, fields[j]] += deltas[j]
            elif b[dst, key] != 0:
                b[dst, key] = 0


def _most_units(per_size: np.ndarray, blocks: int) -> int:
    """The most distinct units that fit in ``blocks`` at once (the smallest first), from
    the number of distinct units of each size in blocks."""
    most, left = 0, blocks
    for size in range(1, len(per_size)):
        k = min(int(per_size[size]), left // size)
        most, left = most + k, left - k * size
        if k < per_size[size]:
            break
    return most


@dataclass
class ClusterInputs:
    """What one cluster of a batch is built from (prepared by the simulator)."""

    workload: object  # llmsched_gym.workloads.workload.Workload
    band_index: np.ndarray  # band of each request (0 = highest priority)
    num_bands: int
    instances: int
    kv_blocks: int | np.ndarray  # per instance (one value: every instance)
    engine: object  # EngineConfig
    latency: object  # StepTimeModel
    scrape_interval_s: float
    ttl_s: float
    band_capacity: int
    dispatch_interval_s: float
    horizon_s: float
    expected_output: float
    rng: np.random.Generator
    router_block_keys: tuple | None = None  # (block_tokens, max_blocks) of a compiled llm-d router
    saturation: object = None  # llmsched_gym.gateway.saturation.SaturationConfig (the simulator always sets it)
    prefix_classes: tuple | None = None  # (prefix_blocks, block_tokens) of a compiled LMetric detector
    cpu_blocks: int = 0  # CPU KV tier per instance, in blocks (0: none)
    cpu_load_us_per_token: float = 0.0  # time to load one token's KV from it
    cpu_visible: bool = True  # the precise prefix view counts its units
    cpu_shared: bool = False  # one tier for the cluster (cpu_blocks per instance, pooled)
    prefill_instances: int = 0  # P/D disaggregation: the first ones are the prefill pool (0: off)
    kv_us_per_token: float = 0.0  # P/D KV transfer: microseconds per prompt token over the link
    kv_latency_s: float = 0.0  # and seconds per transfer
    eviction: object = None  # llmsched_gym.gateway.eviction.EvictionConfig (None: off)
    instance_latency: tuple | None = None  # one StepTimeModel per instance, of one kind (None: `latency` for all)
    client_timeout_s: float = np.inf  # clients abort a request this long after its arrival
    faults: bool = False  # a fault schedule may crash instances or stop scrapes (metric ages per instance)
    retry_max: int = 0  # times the gateway re-sends a request lost to a crash
    kv_recompute: bool = False  # P/D: a KV transfer the link lost is recomputed on the decode instance (else fails)
    units: tuple | None = field(default=None, repr=False)  # _keys_of's result, once computed


class EngineState:
    """The arrays of a batch of clusters (see the module docstring).

    Args:
        clusters: the clusters to load, one slot each.
        slack: slot capacity as a multiple of each cluster's size (1: exact). A slot with
            room to spare can be reloaded in place with another workload (:meth:`load`),
            which is how vector environments start a cluster's next episode.
    """

    def __init__(self, clusters: list[ClusterInputs], slack: float = 1.0):
        self.slack = float(slack)
        units = [_keys_of(x) for x in clusters]
        caps = [self._capacity(x, u) for x, u in zip(clusters, units)]
        bands, seqs = max([x.num_bands for x in clusters] + [1]), max([x.engine.max_num_seqs for x in clusters] + [1])
        need, have = state_bytes(caps, bands, seqs), memory_bytes()
        if need > have:  # numpy would map it lazily, and the run be killed when it touches the pages
            raise MemoryError(f"the engine state needs {need / 2**30:.1f} GiB, more than the "
                              f"{have / 2**30:.1f} GiB of memory available")
        self._allocate(caps, bands, seqs)
        self.rngs = List()
        for x in clusters:
            self.rngs.append(x.rng)
        self.sources = [None] * len(clusters)  # the inputs each slot was loaded with (see _copy_slot)
        self.used = [None] * len(clusters)  # per slot: what its loads have used of each space (see _reset)
        for c, (x, u) in enumerate(zip(clusters, units)):
            self.load(c, x, u, fresh=True)

    def _capacity(self, x: ClusterInputs, units) -> tuple[int, ...]:
        """(requests, units, entries, instances, block keys, index entries, CPU tier entries)
        of a slot for ``x``."""
        sl = self.slack
        return (int(np.ceil(len(x.workload) * sl)), int(np.ceil(len(units[1]) * sl)),
                x.instances * _table_slots(x, units, sl), x.instances,
                int(np.ceil(len(units[6]) * sl)), x.instances * int(np.ceil(units[7] * sl)),
                _cpu_tables(x) * _table_slots(x, units, sl, cpu=True))

    def _allocate(self, caps: list[tuple[int, ...]], num_bands: int, max_seqs: int) -> None:
        """Zeroed arrays for slots of capacities ``caps`` (:meth:`_capacity` order), shaped by
        the field table (:mod:`.fields`)."""
        C = len(caps)
        off = lambda k: np.concatenate([[0], np.cumsum([cap[k] for cap in caps])]).astype(np.int64)  # noqa: E731
        self.req_off, self.unit_off, self.ent_off, self.inst_off = off(0), off(1), off(2), off(3)
        self.bk_off, self.ix_off, self.cpu_off = off(4), off(5), off(6)
        self.num_bands, self.max_seqs = num_bands, max_seqs
        slots = dict(zip(CAP_SPACES, np.sum(caps, axis=0, dtype=np.int64)), clu=C)
        extents = _extents(num_bands, max_seqs)
        for rec in RECORDS:
            if np.dtype(rec.dtype).itemsize < 8:  # a narrow record's values and pointers must fit it
                limit = np.iinfo(rec.dtype).max
                n = sum(slots[s] for s in rec.spaces)  # pointers index the whole array
                if n > limit:
                    raise MemoryError(f"{n:,} {rec.array} entries in one engine state (at most {limit:,})")
            arr = np.zeros(rec.shape_for(slots, extents), rec.dtype)  # zeros: pages a slot never touches stay unmapped
            if rec.default:
                arr[...] = rec.default
            setattr(self, rec.array, arr)

    def _caps(self, c: int) -> tuple[int, ...]:
        """Slot ``c``'s capacities, in :meth:`_capacity` order."""
        offs = (self.req_off, self.unit_off, self.ent_off, self.inst_off, self.bk_off, self.ix_off, self.cpu_off)
        return tuple(int(o[c + 1] - o[c]) for o in offs)

    def _ranges(self, c: int) -> dict[str, tuple[int, int]]:
        """``{space: (first index, length)}`` of slot ``c`` in every index space."""
        req, unit, ent, inst, bkey, ix, cpu = self._caps(c)
        return {"req": (int(self.req_off[c]), req), "unit": (int(self.unit_off[c]), unit),
                "ent": (int(self.ent_off[c]), ent), "cpu": (self.cpu_base(c), cpu),
                "inst": (int(self.inst_off[c]), inst), "bkey": (int(self.bk_off[c]), bkey),
                "ix": (int(self.ix_off[c]), ix), "clu": (c, 1)}

    def _table_rows(self, c: int, space: str) -> list[tuple[int, int]] | None:
        """Row ranges of slot ``c``'s ``ent`` (GPU) or ``cpu`` tables, relative to the slot's
        region, that can hold entries now; None if a table is hashed (anywhere). A direct
        table holds key ``k`` in row ``k``, and keys are numbered in order of first use in the
        workload, so only the keys of requests that have arrived can be there."""
        i0, i1 = int(self.inst_off[c]), int(self.inst_off[c + 1])
        ii = self.inst_i
        first, direct, mask = ((LAYOUT["II_ENT0"], LAYOUT["II_ENT_DIRECT"], LAYOUT["II_ENT_MASK"]) if space == "ent"
                               else (LAYOUT["II_CPU0"], LAYOUT["II_CPU_DIRECT"], LAYOUT["II_CPU_MASK"]))
        if not ii[direct, i0:i1].all():
            return None
        region = self._ranges(c)[space][0]
        ptr = int(self.clu_i[CI_PTR, c])
        r0 = int(self.req_off[c])
        # the arrived requests' units (the most, not the last's: a planner's sampled future repeats earlier ones)
        u0 = int(self.req_i[LAYOUT["RI_UNIT0"], r0]) if ptr else 0
        u1 = int(self.req_i[LAYOUT["RI_UNIT1"], r0:r0 + ptr].max()) if ptr else 0
        keys = int(self.unit_i[LAYOUT["U_KEY"], u0:u1].max()) + 1 if u1 > u0 else 0
        starts = {int(ii[first, g]) - region: int(ii[mask, g]) + 1 for g in range(i0, i1)}  # a shared tier: one
        return [(start, min(keys, size)) for start, size in starts.items()]

    def _copy_slot(self, src: "EngineState", k: int, c: int, fresh: bool = False) -> None:
        """Copy slot ``k`` of ``src`` (this state or another) into slot ``c`` of this one, every
        pointer re-based to the new place (:mod:`.fields`); slot ``c`` must be at least as large
        (``fresh``: it was just allocated, all zeros)."""
        old, new = src._ranges(k), self._ranges(c)
        short = [s for s in SPACES if new[s][1] < old[s][1]]
        if short or self.num_bands < src.num_bands or self.max_seqs < src.max_seqs:
            raise ValueError(f"cluster slot {c} is smaller than slot {k} of the source state ({short or 'bands'})")
        delta = {s: new[s][0] - old[s][0] for s in SPACES}
        same_workload = not fresh and self.sources[c] is not None and self.sources[c] is src.sources[k]
        extents = _extents(src.num_bands, src.max_seqs)
        stale = {s: False if fresh else self._table_rows(c, s) for s in ("ent", "cpu")}  # before inst_i moves
        self.sources[c] = src.sources[k]
        self.used[c] = None  # copied whole
        for rec in RECORDS:
            if rec.static and same_workload:  # what load() wrote is there already
                continue
            a, b = getattr(src, rec.array), getattr(self, rec.array)
            pointers = pointer_rows(rec)
            for space in rec.spaces:
                (s0, n), d0 = old[space], new[space][0]
                if not n:
                    continue
                if rec.occupied_by:
                    _copy_table(rec, a, s0, b, d0, n, [(row, delta[space if t == SELF else t]) for row, t in pointers],
                                src._table_rows(k, space), stale[space])
                    continue
                region = b[_index(rec, d0, n, extents)]
                region[...] = a[_index(rec, s0, n, extents)]
                for row, target in pointers:
                    d = delta[space if target == SELF else target]
                    if d:
                        v = rec.field(region, row)
                        v[...] = np.where(v >= 0, v + d, v)  # negative: "none"

    def regrown(self, c: int, x: ClusterInputs) -> "EngineState":
        """A copy of this state in which slot ``c`` has room for ``x``; every other slot's
        contents are moved unchanged (indices rebased), slot ``c`` is left to :meth:`load`."""
        units = _keys_of(x)
        C = self.num_clusters
        caps = [self._caps(k) for k in range(C)]
        caps[c] = tuple(max(a, b) for a, b in zip(caps[c], self._capacity(x, units)))
        new = EngineState.__new__(EngineState)
        new.slack = self.slack
        new._allocate(caps, max(self.num_bands, x.num_bands), max(self.max_seqs, x.engine.max_num_seqs))
        new.rngs = self.rngs
        new.sources = [None] * C
        new.used = [None] * C
        for k in range(C):
            new._copy_slot(self, k, k, fresh=True)
        return new

    def forked(self, c: int, k: int, room: int = 0) -> "EngineState":
        """A new state of ``k`` slots, each an exact copy of cluster ``c`` as it stands now
        (its own copy of the cluster's random generator): advanced with the same decisions,
        every copy reproduces the original request for request. ``room``: request slots to
        spare in each copy, for arrivals a planner adds (:meth:`replace_future`)."""
        new = EngineState.__new__(EngineState)
        new.slack = self.slack
        caps = self._caps(c)
        new._allocate([(caps[0] + int(room),) + caps[1:]] * k, self.num_bands, self.max_seqs)
        new.rngs = List()
        new.sources = [None] * k
        new.used = [None] * k
        for j in range(k):
            new.rngs.append(copy.deepcopy(self.rngs[c]))
            new._copy_slot(self, c, j, fresh=True)
        return new

    def fork(self, c: int, slots, source: "EngineState | None" = None) -> None:
        """Copy cluster ``c`` of ``source`` (default: this state) into each of ``slots`` of this
        state (each at least as large, see :meth:`forked`), replacing what ran there; each copy
        gets its own copy of the cluster's random generator. A planner reuses one state of
        copies this way, decision after decision."""
        source = self if source is None else source
        for j in slots:
            if source is self and j == c:
                raise ValueError(f"cannot fork cluster slot {c} into itself")
            self._copy_slot(source, c, j)
            self.rngs[j] = copy.deepcopy(source.rngs[c])

    def replace_future(self, c: int, arrival_s: np.ndarray, like: np.ndarray) -> int:
        """Replace the requests of slot ``c`` that have not arrived yet: the ``j``-th arrives
        at ``arrival_s[j]`` as a copy of the arrived request ``like[j]`` (cluster-local): its
        lengths, priority, band and prefix units (the fields marked ``content`` in
        :mod:`.fields`); no other request arrives. A planner's sampled future
        (``baselines/lookahead.py``, ``mode=mpc``), in a slot with room for it
        (:meth:`forked`). Returns how many were placed: at most the slot's free request rows."""
        ci = self.clu_i
        r0, ptr = int(ci[CI_REQ0, c]), int(ci[CI_PTR, c])
        arrival_s, like = np.asarray(arrival_s, np.float64), np.asarray(like, np.int64)
        if len(arrival_s) != len(like):
            raise ValueError(f"{len(arrival_s)} arrival times for {len(like)} requests to copy")
        if len(like) and (like.min() < 0 or like.max() >= ptr):
            raise ValueError(f"only arrived requests (0..{ptr - 1}) can be copied into the future")
        now = float(self.clu_f[CF_NOW, c])
        if len(arrival_s) and (arrival_s[0] < now or np.any(np.diff(arrival_s) < 0)):
            raise ValueError(f"future arrival times must be ascending and not before now ({now:g} s)")
        m = min(len(like), int(self.req_off[c + 1]) - r0 - ptr)
        dst, src = np.arange(r0 + ptr, r0 + ptr + m), r0 + like[:m]
        for array, content, other, defaults in _REQUEST_ROWS:
            arr = getattr(self, array)
            arr[np.ix_(content, dst)] = arr[np.ix_(content, src)]
            arr[np.ix_(other, dst)] = defaults  # a row past the workload may hold an earlier copy's past
        self.req_f[RF_ARRIVAL, dst] = arrival_s[:m]
        ci[CI_REQ1, c] = r0 + ptr + m
        return m

    def has_room(self, c: int, x: ClusterInputs) -> bool:
        """Whether cluster inputs ``x`` fit slot ``c`` (see :meth:`load`)."""
        return self._fit(c, x, _keys_of(x)) is None

    def _fit(self, c, x, units) -> str | None:
        if len(x.workload) > self.req_off[c + 1] - self.req_off[c]:
            return "requests"
        if len(units[1]) > self.unit_off[c + 1] - self.unit_off[c]:
            return "prefix units"
        if x.instances != self.inst_off[c + 1] - self.inst_off[c]:
            return "instances"
        if _table_size(x, units)[0] > self._slot_table(c, x, units):
            return "prefix-cache tables"
        if x.num_bands > self.num_bands or x.engine.max_num_seqs > self.max_seqs:
            return "bands or max_num_seqs"
        if len(units[6]) > self.bk_off[c + 1] - self.bk_off[c]:
            return "router block keys"
        if x.instances * units[7] > self.ix_off[c + 1] - self.ix_off[c]:
            return "router index entries"
        if _table_size(x, units, cpu=True)[0] > self._slot_table(c, x, units, cpu=True):
            return "CPU tier tables"
        return None

    def cpu_base(self, c: int) -> int:
        """First ``ent`` row of slot ``c``'s CPU tier tables (after every GPU table)."""
        return int(self.ent_off[-1] + self.cpu_off[c])

    def _slot_table(self, c: int, x: ClusterInputs, units, cpu: bool = False) -> int:
        """Slots of each instance's prefix-cache (or CPU tier) table for ``x`` in slot ``c``
        (all of its share if direct, the largest power of two in it if hashed)."""
        off = self.cpu_off if cpu else self.ent_off
        per = int(off[c + 1] - off[c]) // max(_cpu_tables(x) if cpu else x.instances, 1)
        if _table_size(x, units, cpu)[1] or not per:
            return per
        return 1 << (per.bit_length() - 1)

    def _reset(self, c: int, fresh: bool) -> None:
        """Every range of slot ``c`` to its fields' defaults (:mod:`.fields`). ``fresh``: the
        slot was just allocated, all zeros, so only non-zero defaults are written: writing
        zeros would fault in every page of a table the run may never use. Otherwise only
        what the slot's earlier loads used (``self.used``: the kernel writes a space's
        entries below its cluster's end only) is reset: the rest still holds the defaults,
        and the slack of a slot sized for larger workloads stays unmapped."""
        extents = _extents(self.num_bands, self.max_seqs)
        ranges = self._ranges(c)
        used = None if fresh else self.used[c]
        for rec, space in ((r, s) for r in RECORDS for s in r.spaces):
            start, n = ranges[space]
            if used is not None and space in used:
                n = min(n, used[space])
            region = getattr(self, rec.array)[_index(rec, start, n, extents)]
            if not fresh:
                region[...] = 0
            if not rec.fields:
                if rec.default:
                    region[...] = rec.default
                continue
            for k, f in enumerate(rec.fields):
                if f.default:
                    rec.field(region, k)[...] = f.default

    def load(self, c: int, x: ClusterInputs, units=None, fresh: bool = False) -> None:
        """(Re)initialize slot ``c`` with cluster ``x``: every array range of the slot is reset
        to its fields' defaults (:meth:`_reset`), then loaded with ``x``."""
        units = _keys_of(x) if units is None else units
        uoff, keys, blocks, ends, _, bk_off, bkeys, n_bkeys, _ = units
        short = self._fit(c, x, units)
        if short is not None:
            raise ValueError(f"cluster slot {c} has too little room for this workload's {short}")
        w = x.workload
        n = len(w)
        r0, i0, i1 = int(self.req_off[c]), int(self.inst_off[c]), int(self.inst_off[c + 1])
        r1 = r0 + n
        u0 = int(self.unit_off[c])
        ri, rf = self.req_i, self.req_f
        self._reset(c, fresh)
        ri[RI_INPUT, r0:r1] = w.input_tokens
        ri[RI_OUTPUT, r0:r1] = w.output_tokens
        ri[RI_PRIORITY, r0:r1] = w.priority
        ri[RI_BAND, r0:r1] = x.band_index
        ri[RI_UNIT0, r0:r1] = uoff[:-1] + u0
        ri[RI_UNIT1, r0:r1] = uoff[1:] + u0
        if x.prefix_classes:
            ri[RI_CLASS, r0:r1], n_classes = prefix_classes(w, *x.prefix_classes)
        else:
            n_classes = 0
        rf[RF_ARRIVAL, r0:r1] = w.arrival_s
        # Per-request overheads, elementwise as the step-time model prices them.
        rf[RF_DELAY, r0:r1] = x.latency.arrival_delay_us(w.input_tokens) * 1e-6
        rf[RF_FINISH_DELAY, r0:r1] = x.latency.finish_delay_us(w.output_tokens) * 1e-6
        self.unit_i[U_KEY, u0:u0 + len(keys)] = keys
        self.unit_i[U_BLOCKS, u0:u0 + len(keys)] = blocks
        self.unit_i[U_END, u0:u0 + len(keys)] = ends
        e0 = int(self.ent_off[c])
        table, direct = self._slot_table(c, x, units), _table_size(x, units)[1]

        b0, x0 = int(self.bk_off[c]), int(self.ix_off[c])
        ri[RI_BK0, r0:r1] = bk_off[:-1] + b0
        ri[RI_BK1, r0:r1] = bk_off[1:] + b0
        self.bkey[b0:b0 + len(bkeys)] = bkeys

        ii = self.inst_i
        ii[II_IX0, i0:i1] = x0 + n_bkeys * np.arange(x.instances)
        ii[II_ANON_FRONT, i0:i1] = x.kv_blocks  # every block starts free and never cached
        ii[II_EVICTION, i0:i1] = EVICTION_ORDERS.index(x.engine.eviction)
        ii[II_RESTART, i0:i1] = PREEMPTION_MODES.index(x.engine.preemption)
        ii[II_CLUSTER, i0:i1] = c
        ii[II_TOTAL, i0:i1] = x.kv_blocks
        ii[II_ENT0, i0:i1] = e0 + table * np.arange(x.instances)
        ii[II_ENT_MASK, i0:i1] = table - 1  # hashed tables only
        ii[II_ENT_DIRECT, i0:i1] = int(direct)
        p0 = self.cpu_base(c)
        cpu_table, cpu_direct = self._slot_table(c, x, units, cpu=True), _table_size(x, units, cpu=True)[1]
        shared = bool(x.cpu_shared)
        ii[II_CPU0, i0:i1] = p0 + (0 if shared else cpu_table) * np.arange(x.instances)
        ii[II_CPU_MASK, i0:i1] = cpu_table - 1
        ii[II_CPU_DIRECT, i0:i1] = int(cpu_direct)
        ii[II_CPU_CAP, i0:i1] = (x.cpu_blocks * (x.instances if shared else 1)) if cpu_table else 0
        ii[II_CPU_OWNER, i0:i1] = i0 if shared else np.arange(i0, i1)
        ii[II_CPU_VISIBLE, i0:i1] = int(bool(x.cpu_blocks and cpu_table and x.cpu_visible))
        self.inst_f[IF_CPU_LOAD_US, i0:i1] = x.cpu_load_us_per_token

        ci, cf = self.clu_i, self.clu_f
        ci[CI_REQ0, c], ci[CI_REQ1, c], ci[CI_INST0, c], ci[CI_INST1, c] = r0, r1, i0, i1
        ci[CI_NSERVE, c] = i1 - i0
        ci[CI_WIN_CAP, c] = n
        ci[CI_NPREFILL, c] = x.prefill_instances
        cf[CF_XFER_US, c], cf[CF_XFER_LAT, c] = x.kv_us_per_token, x.kv_latency_s
        ci[CI_NBANDS, c] = x.num_bands
        ci[CI_NCLASSES, c] = n_classes
        e = x.engine
        ci[CI_MAX_SEQS, c], ci[CI_BUDGET, c], ci[CI_BS, c] = e.max_num_seqs, e.max_num_batched_tokens, e.block_size
        ci[CI_MAX_LEN, c] = -1 if e.max_model_len is None else e.max_model_len
        ci[CI_SKIP, c] = int(e.event_skipping)
        ci[CI_BAND_CAP, c] = x.band_capacity
        kind, params = lower(x.latency)
        ci[CI_LAT_KIND, c], ci[CI_INTEGER_US, c] = kind, int(x.latency.integer_us)
        self.lat_p[i0:i1] = params
        for g, model in enumerate(x.instance_latency or (), start=i0):  # a mixed fleet: each its own
            kind_g, self.lat_p[g] = lower(model)
            if kind_g != kind:
                raise ValueError(f"instance {g - i0}'s step-time model is of another kind than the cluster's")
        cf[CF_HORIZON, c] = x.horizon_s
        cf[CF_SCRAPE_INT, c], cf[CF_TTL, c], cf[CF_DISP_INT, c] = x.scrape_interval_s, x.ttl_s, x.dispatch_interval_s
        cf[CF_FT_DELAY, c] = x.latency.first_token_delay_us * 1e-6
        cf[CF_ASYNC_LAG, c] = 1.0 if x.engine.async_scheduling else 0.0
        cf[CF_EXP_OUT, c] = x.expected_output
        sat = x.saturation
        ci[CI_SAT_KIND, c] = (SAT_UTILIZATION if sat.kind == "utilization" else
                              {"requests": SAT_REQUESTS, "tokens": SAT_TOKENS, "hybrid": SAT_HYBRID}[sat.concurrency_mode])
        cf[CF_SAT_QUEUE, c], cf[CF_SAT_KV, c] = float(sat.queue_depth_threshold), float(sat.kv_cache_util_threshold)
        cf[CF_SAT_STALE, c] = sat.metrics_staleness_threshold_s
        ci[CI_STALE_POLICY, c] = STALE_IGNORE if sat.staleness_policy == "ignore" else STALE_SATURATED
        ci[CI_FAULTS, c], ci[CI_RETRY_MAX, c] = int(x.faults), x.retry_max
        ci[LAYOUT["CI_KV_RECOMPUTE"], c] = int(x.kv_recompute)
        cf[CF_SAT_MAX_REQ, c], cf[CF_SAT_MAX_TOK, c] = sat.max_concurrency, sat.max_token_concurrency
        ev = x.eviction
        ci[CI_EVICT_MAX, c] = 0 if ev is None else ev.max_revocations_per_decision
        cf[CF_EVICT_GRACE, c] = 0.0 if ev is None else ev.confirmation_grace_s
        cf[CF_TIMEOUT, c] = x.client_timeout_s
        self.rngs[c] = x.rng
        self.sources[c] = x
        # _reset left the whole slot at its defaults; the kernel writes below these ends only
        self.used[c] = {"req": n, "unit": len(keys), "bkey": len(bkeys), "ix": x.instances * n_bkeys}
        x.units = None  # the slot holds what it needs (~10 MB on a 16-instance chatbot); recomputed if asked

    @property
    def requests(self) -> Rows:
        """Named request fields over every slot: ``state.requests.arrival[r]`` (views)."""
        return self._named("requests")

    @property
    def instances(self) -> Rows:
        """Named instance fields over every slot: ``state.instances.total[g]`` (views)."""
        return self._named("instances")

    @property
    def clusters(self) -> Rows:
        """Named cluster fields over every slot: ``state.clusters.now[c]`` (views)."""
        return self._named("clusters")

    @property
    def bands(self) -> Rows:
        """Named band-queue fields: ``state.bands.len[c, b]`` (views)."""
        return self._named("bands")

    def cluster(self, c: int) -> ClusterSlot:
        """Cluster ``c``'s fields as attributes (``state.cluster(c).now``), read and written in place."""
        return ClusterSlot(self, c)

    def set_policy(self, c: int, role: str, code: int | None = None, params=()) -> None:
        """Cluster ``c``'s compiled ``role`` policy (``router``, ``flow``, ``admission``, ``pd``):
        its kernel code (None: keep it) and parameters, written to the role's parameter rows.
        A compiled router also becomes the one whose books dispatches keep (``CI_BOOKS``);
        handing routing to Python (``ROUTER_PY``) keeps the books of the router before it, so
        that copies handed back to it find its prefix index and token counts current."""
        if role not in POLICY_ROWS:
            raise ValueError(f"policy role {role!r} is not compiled; roles: {', '.join(POLICY_ROWS)}")
        code_row, param_rows = POLICY_ROWS[role]
        params = tuple(params)
        if len(params) > len(param_rows):
            raise ValueError(f"a compiled {role} takes at most {len(param_rows)} parameters, got {len(params)}")
        if code is not None:
            self.clu_i[LAYOUT[code_row], c] = int(code)
            if role == "router" and code != ROUTER_PY:  # routing taken over keeps the last books
                self.clu_i[LAYOUT["CI_BOOKS"], c] = int(code)
        for row, v in zip(param_rows, params):
            self.clu_f[LAYOUT[row], c] = float(v)

    def wake_dispatch(self, c: int) -> None:
        """A dispatch cycle in cluster ``c`` now if anything is queued: after its usage limits
        were changed from outside, a blocked gateway would otherwise sleep until the next scrape."""
        if self.bands.len[c].any():
            cf = self.clu_f
            cf[LAYOUT["CF_NEXT_CYCLE"], c] = min(cf[LAYOUT["CF_NEXT_CYCLE"], c], cf[LAYOUT["CF_NOW"], c])

    def crash(self, c: int, i: int) -> int:
        """Local instance ``i`` of cluster ``c`` crashes now (a fault; see the kernel's ``crash``):
        what it held is re-sent or lost, its KV and prefix cache are gone, and it is no endpoint
        until :meth:`restart`. Returns the requests it lost."""
        return int(kernel.crash(self.req_i, self.req_f, self.inst_i, self.inst_f, self.ent, self.run, self.seg,
                                self.clu_i, self.clu_f, self.bq, self.heap_t, self.heap_r, self.log, c, i,
                                float(self.clu_f[CF_NOW, c])))

    def restart(self, c: int, i: int) -> None:
        """Crashed local instance ``i`` of cluster ``c`` serves again from now, empty."""
        kernel.restart(self.inst_i, self.inst_f, self.clu_i, c, i, float(self.clu_f[CF_NOW, c]))
        self.wake_dispatch(c)

    def block_scrapes(self, c: int, i: int, on: bool) -> None:
        """A scrape outage of local instance ``i`` of cluster ``c`` starts (``on``) or ends now:
        its metrics stop refreshing (outages may overlap)."""
        g = int(self.inst_off[c]) + i
        self.inst_i[LAYOUT["II_NOSCRAPE"], g] += 1 if on else -1
        self.wake_dispatch(c)

    def set_slowdown(self, c: int, i: int, factor: float) -> None:
        """Local instance ``i`` of cluster ``c`` prices its iterations ``factor`` times their step
        time from its next iteration (a straggler; 1.0: normal). A decode segment planned at the
        old speed ends at its first iteration end from now."""
        g = int(self.inst_off[c]) + i
        self.inst_f[LAYOUT["IF_SLOW"], g] = factor
        kernel._cut_segment(self.inst_i, self.inst_f, self.seg, g, float(self.clu_f[CF_NOW, c]))

    def set_link_slowdown(self, c: int, factor: float) -> None:
        """P/D KV transfers of cluster ``c`` sent from now take ``factor`` times their time (a
        slow link; 1.0: normal)."""
        self.clu_f[LAYOUT["CF_XFER_SLOW"], c] = factor

    def link_outage(self, c: int, on: bool) -> None:
        """An outage of cluster ``c``'s P/D KV link starts (``on``) or ends now: a transfer
        in flight at any time during it, or sent during it, is lost (outages may overlap)."""
        self.clu_i[LAYOUT["CI_LINK_DOWN"], c] += 1 if on else -1
        if not on:
            self.clu_f[LAYOUT["CF_LINK_UP_AT"], c] = self.clu_f[CF_NOW, c]

    def set_route_weights(self, clusters, weights: np.ndarray) -> None:
        """Factors on each instance's LMetric score (``ROUTER_LMETRIC_WEIGHTED``, Gateway-v0's
        routing action): ``weights[k, i]`` for instance ``i`` of cluster ``clusters[k]``."""
        g = self.clu_i[LAYOUT["CI_INST0"], np.asarray(clusters)][:, None] + np.arange(weights.shape[1])
        self.inst_f[LAYOUT["IF_ROUTE_W"], g] = weights

    def _named(self, entity: str) -> Rows:
        named = self.__dict__.setdefault("_rows", {})
        if entity not in named:
            named[entity] = Rows(self, ENTITIES[entity])
        return named[entity]

    @property
    def num_clusters(self) -> int:
        return self.clu_i.shape[1]

    def arrays(self) -> tuple:
        """The kernel's arguments, in :func:`~llmsched_gym.engine.kernel.advance` order."""
        return (self.req_i, self.req_f, self.unit_i, self.inst_i, self.inst_f, self.ent, self.run, self.seg,
                self.clu_i, self.clu_f, self.bq, self.ceil_ext, self.aprob, self.lat_p, self.heap_t, self.heap_r,
                self.log, self.bkey, self.ix, self.win_t, self.win_c, self.ccount, self.rngs)

    def advance(self, active: np.ndarray, until: np.ndarray) -> None:
        """Advance the clusters marked in ``active`` to ``until`` or their next pause."""
        kernel.advance(*self.arrays(), active, until)

    def scrape(self, c: int, t: float) -> None:
        kernel.scrape(self.run, self.inst_i, self.inst_f, self.seg, self.clu_i, self.clu_f, c, t)

    def saturation_now(self, c: int) -> float:
        """Cluster ``c``'s saturation detector now (see the kernel's ``saturation_now``)."""
        return float(kernel.saturation_now(self.inst_i, self.inst_f, self.clu_i, self.clu_f, c))

    def dispatch_to(self, c: int, r: int, i: int) -> bool:
        """Send global request ``r`` of cluster ``c`` to its local instance ``i`` (on a P/D
        cluster: its decode instance); False if dropped."""
        return kernel.dispatch_decided(self.req_i, self.req_f, self.unit_i, self.inst_i, self.inst_f, self.ent,
                                       self.clu_i, self.clu_f, self.heap_t, self.heap_r, self.bkey, self.ix,
                                       self.win_t, self.win_c, self.ccount, self.lat_p, c, r, i)

    def suggest(self, c: int, r: int, rng: np.random.Generator | None = None) -> int:
        """The local instance cluster ``c``'s books router (``CI_BOOKS``: its compiled router, or
        the one routing was taken over from) would choose for global request ``r`` now (on a
        P/D cluster: the decode instance), changing no state.

        Args:
            c: the cluster slot.
            r: a global request index (the pending one: ``state.clusters.pending[c]``).
            rng: the generator a randomized router draws from (its tie-breaks, its samples);
                None: a copy of the cluster's, so the cluster's own draws are untouched.
        """
        if self.clu_i[LAYOUT["CI_BOOKS"], c] == ROUTER_PY:
            raise ValueError(f"cluster slot {c} has no compiled router to ask (its books router is ROUTER_PY)")
        rng = copy.deepcopy(self.rngs[c]) if rng is None else rng
        return int(kernel.suggest(self.req_i, self.req_f, self.inst_i, self.inst_f, self.unit_i, self.ent, self.clu_i,
                                  self.clu_f, self.bkey, self.ix, self.win_t, self.win_c, self.ccount, self.lat_p, rng,
                                  c, r))

    def cached_tokens(self, c: int, r: int) -> np.ndarray:
        """Cached prompt tokens of global request ``r`` on each instance of cluster ``c``."""
        return kernel.cached_tokens_all(self.req_i, self.unit_i, self.inst_i, self.ent,
                                        self.inst_off[c], self.inst_off[c + 1], r)

    def fits(self, c: int, r: int) -> np.ndarray:
        """Whether global request ``r`` can ever run on each instance of cluster ``c``."""
        return kernel.fits_all(self.req_i, self.inst_i, self.clu_i, c, r)

    def kv_used(self, c: int) -> np.ndarray:
        """Referenced KV blocks per instance of cluster ``c`` now."""
        i0, i1 = self.inst_off[c], self.inst_off[c + 1]
        return np.array([kernel.kv_used_at(self.run, self.inst_i, self.seg, g, int(self.clu_i[CI_BS, c]),
                                           float(self.clu_f[CF_NOW, c])) for g in range(i0, i1)], np.int64)
