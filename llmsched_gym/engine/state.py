"""The batched engine state: C clusters' requests, instances and gateways in shared arrays.

:class:`EngineState` is an explicit structure (in the spirit of gymnax / Jumanji): a few
2-D numpy arrays, one row per field (:mod:`~llmsched_gym.engine.layout`) and one column
per request, instance or cluster, with per-cluster offsets. The compiled
:func:`~llmsched_gym.engine.kernel.advance` is a function of it. Cluster ``c`` owns
requests ``REQ0[c]:REQ1[c]`` and instances ``INST0[c]:INST1[c]``; each instance owns a
prefix-cache table with one entry per distinct unit key of its cluster's workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba.typed import List

from ..gateway.saturation import SaturationConfig
from . import kernel
from .config import EVICTION_ORDERS, PREEMPTION_MODES
from .layout import (
    BQ_HEAD,
    BQ_TAIL,
    CF_DISP_INT,
    CF_EVICT_GATE,
    CF_EVICT_GRACE,
    CF_EXP_OUT,
    CF_FT_DELAY,
    CF_HORIZON,
    CF_NEXT_CYCLE,
    CF_NOW,
    CF_SAT_KV,
    CF_SAT_MAX_REQ,
    CF_SAT_MAX_TOK,
    CF_SAT_QUEUE,
    CF_SAT_STALE,
    CF_SCRAPE_INT,
    CF_TTL,
    CF_XFER_LAT,
    CF_XFER_US,
    CI_BAND_CAP,
    CI_BS,
    CI_BUDGET,
    CI_EVICT_MAX,
    CI_INST0,
    CI_INST1,
    CI_INTEGER_US,
    CI_LAST_ROUTE,
    CI_LAT_KIND,
    CI_MAX_LEN,
    CI_MAX_SEQS,
    CI_NBANDS,
    CI_NCLASSES,
    CI_NPREFILL,
    CI_NSERVE,
    CI_PENDING,
    CI_REQ0,
    CI_REQ1,
    CI_SAT_KIND,
    CI_SKIP,
    EN_NEXT,
    EN_PREV,
    IF_CPU_LOAD_US,
    IF_NEXT_T,
    IF_ROUTE_W,
    II_ANON_FRONT,
    II_CLUSTER,
    II_CPU0,
    II_CPU_CAP,
    II_CPU_DIRECT,
    II_CPU_HEAD,
    II_CPU_MASK,
    II_CPU_OWNER,
    II_CPU_TAIL,
    II_CPU_VISIBLE,
    II_ENT0,
    II_ENT_DIRECT,
    II_ENT_MASK,
    II_EVICTION,
    II_IX0,
    II_IX_HEAD,
    II_IX_TAIL,
    II_LRU_HEAD,
    II_LRU_TAIL,
    II_RESTART,
    II_TOTAL,
    II_WQ_HEAD,
    II_WQ_TAIL,
    IX_NEXT,
    IX_PREV,
    N_CF,
    N_CI,
    N_EN,
    N_IF,
    N_II,
    N_IX,
    N_RF,
    N_RI,
    N_RUN,
    N_U,
    RF_ARRIVAL,
    RF_DELAY,
    RF_DISPATCH,
    RF_END,
    RF_ENQUEUED,
    RF_FINISH,
    RF_FINISH_DELAY,
    RF_FIRST,
    RF_TRANSFER,
    RI_BAND,
    RI_BK0,
    RI_BK1,
    RI_CLASS,
    RI_DECODE,
    RI_INPUT,
    RI_INSTANCE,
    RI_NEXT,
    RI_OUTPUT,
    RI_PRIORITY,
    RI_UNIT0,
    RI_UNIT1,
    RUN_ID,
    SAT_HYBRID,
    SAT_REQUESTS,
    SAT_TOKENS,
    SAT_UTILIZATION,
    SEGMENT_CHUNK,
    U_BLOCKS,
    U_END,
    U_KEY,
)
from .steptime import N_PARAMS, lower
from .units import prefix_classes, prefix_units, router_block_keys

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
    blocks = int(x.cpu_blocks if cpu else x.kv_blocks)
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
    """Prefix units and router block keys of a cluster's workload (see :mod:`.units`),
    and how many of its distinct units have each size in blocks (how many can be cached
    at once, :func:`_most_units`); computed once per inputs."""
    if x.units is None:
        bk = router_block_keys(x.workload, *x.router_block_keys)[:3] if x.router_block_keys else (
            np.zeros(len(x.workload) + 1, np.int64), np.zeros(0, np.int64), 0)
        units = prefix_units(x.workload, x.engine.block_size)
        keys, blocks = units[1], units[2]
        values = np.flatnonzero(np.bincount(blocks)) if len(blocks) else np.zeros(0, np.int64)
        if len(values) == 1:  # every unit the same size (one block each on BLIS's traces)
            per_size = np.bincount(np.full(1, values[0]), minlength=values[0] + 1) * units[4]
        else:
            least = np.zeros(units[4], np.int64)
            for b in values[::-1]:  # a key's blocks, the fewest if they differ (a few sizes)
                least[keys[blocks == b]] = b
            per_size = np.bincount(np.maximum(least, 1))
        x.units = units + bk + (per_size,)
    return x.units


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
    kv_blocks: int
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
    saturation: object = None  # llmsched_gym.gateway.saturation.SaturationConfig (None: the default)
    prefix_classes: tuple | None = None  # (prefix_blocks, block_tokens) of a compiled LMetric detector
    cpu_blocks: int = 0  # CPU KV tier per instance, in blocks (0: none)
    cpu_load_us_per_token: float = 0.0  # time to load one token's KV from it
    cpu_visible: bool = True  # the precise prefix view counts its units
    cpu_shared: bool = False  # one tier for the cluster (cpu_blocks per instance, pooled)
    prefill_instances: int = 0  # P/D disaggregation: the first ones are the prefill pool (0: off)
    kv_us_per_token: float = 0.0  # P/D KV transfer: microseconds per prompt token over the link
    kv_latency_s: float = 0.0  # and seconds per transfer
    eviction: object = None  # llmsched_gym.gateway.eviction.EvictionConfig (None: off)
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
        self._allocate(caps, max([x.num_bands for x in clusters] + [1]),
                       max([x.engine.max_num_seqs for x in clusters] + [1]))
        self.rngs = List()
        for x in clusters:
            self.rngs.append(x.rng)
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
        C = len(caps)
        off = lambda k: np.concatenate([[0], np.cumsum([cap[k] for cap in caps])]).astype(np.int64)  # noqa: E731
        self.req_off, self.unit_off, self.ent_off, self.inst_off = off(0), off(1), off(2), off(3)
        self.bk_off, self.ix_off, self.cpu_off = off(4), off(5), off(6)
        self.bkey = np.zeros(int(self.bk_off[-1]), np.int64)
        N, NI = int(self.req_off[-1]), int(self.inst_off[-1])
        self.ix = np.zeros((N_IX, int(self.ix_off[-1])), np.int64)
        self.num_bands, self.max_seqs = B, S = num_bands, max_seqs
        self.req_i = np.zeros((N_RI, N), np.int64)
        self.req_f = np.zeros((N_RF, N))
        self.unit_i = np.zeros((N_U, int(self.unit_off[-1])), np.int64)
        self.inst_i = np.zeros((N_II, NI), np.int64)
        self.inst_f = np.zeros((N_IF, NI))
        # Entry-major (one entry, one cache line): every GPU table, then every CPU tier table.
        self.ent = np.zeros((int(self.ent_off[-1] + self.cpu_off[-1]), N_EN), np.int64)
        self.run = np.zeros((NI, N_RUN, S), np.int64)
        self.seg = np.zeros((NI, SEGMENT_CHUNK))
        self.clu_i = np.zeros((N_CI, C), np.int64)
        self.clu_f = np.zeros((N_CF, C))
        self.bq = np.zeros((3, C, B), np.int64)
        self.ceil_ext = np.ones((C, B))
        self.aprob = np.zeros((C, B))
        self.lat_p = np.zeros((C, N_PARAMS))
        self.heap_t = np.zeros(N)
        self.heap_r = np.zeros(N, np.int64)
        self.log = np.zeros(N, np.int64)
        self.win_t = np.zeros(N)  # LMetric's detector: arrival times and classes in its window,
        self.win_c = np.zeros(N, np.int64)  # a ring over the cluster's request slots,
        self.ccount = np.zeros(N, np.int64)  # and arrivals per class in the window

    def regrown(self, c: int, x: ClusterInputs) -> "EngineState":
        """A copy of this state in which slot ``c`` has room for ``x``; every other slot's
        contents are moved unchanged (indices rebased), slot ``c`` is left to :meth:`load`."""
        units = _keys_of(x)
        C = self.num_clusters
        offs = (self.req_off, self.unit_off, self.ent_off, self.inst_off, self.bk_off, self.ix_off, self.cpu_off)
        old = [tuple(int(o[k + 1] - o[k]) for o in offs) for k in range(C)]
        caps = list(old)
        caps[c] = tuple(max(a, b) for a, b in zip(old[c], self._capacity(x, units)))
        new = EngineState.__new__(EngineState)
        new.slack = self.slack
        new._allocate(caps, max(self.num_bands, x.num_bands), max(self.max_seqs, x.engine.max_num_seqs))
        new.rngs = self.rngs
        B, S = self.num_bands, self.max_seqs
        new.clu_f[:] = self.clu_f
        new.ceil_ext[:, :B], new.aprob[:, :B], new.lat_p[:] = self.ceil_ext, self.aprob, self.lat_p
        shift = lambda a, d: np.where(a >= 0, a + d, a)  # noqa: E731  (-1 means "none")
        for k in range(C):
            r0, r0n = self.req_off[k], new.req_off[k]
            u0, u0n = self.unit_off[k], new.unit_off[k]
            e0, e0n = self.ent_off[k], new.ent_off[k]
            i0, i1 = self.inst_off[k], self.inst_off[k + 1]
            dr, du, de = r0n - r0, u0n - u0, e0n - e0
            nr, nu, ne = old[k][0], old[k][1], old[k][2]
            new.req_i[:, r0n:r0n + nr] = self.req_i[:, r0:r0 + nr]
            for f in (RI_UNIT0, RI_UNIT1):
                new.req_i[f, r0n:r0n + nr] += du
            new.req_i[RI_NEXT, r0n:r0n + nr] = shift(self.req_i[RI_NEXT, r0:r0 + nr], dr)
            new.req_f[:, r0n:r0n + nr] = self.req_f[:, r0:r0 + nr]
            new.heap_t[r0n:r0n + nr] = self.heap_t[r0:r0 + nr]
            new.heap_r[r0n:r0n + nr] = self.heap_r[r0:r0 + nr] + dr
            new.log[r0n:r0n + nr] = self.log[r0:r0 + nr] + dr
            new.win_t[r0n:r0n + nr] = self.win_t[r0:r0 + nr]
            new.win_c[r0n:r0n + nr] = self.win_c[r0:r0 + nr]
            new.ccount[r0n:r0n + nr] = self.ccount[r0:r0 + nr]
            new.unit_i[:, u0n:u0n + nu] = self.unit_i[:, u0:u0 + nu]
            new.ent[e0n:e0n + ne] = self.ent[e0:e0 + ne]
            for f in (EN_PREV, EN_NEXT):
                new.ent[e0n:e0n + ne, f] = shift(self.ent[e0:e0 + ne, f], de)
            new.inst_i[:, i0:i1] = self.inst_i[:, i0:i1]  # instance slots do not move
            for f in (II_WQ_HEAD, II_WQ_TAIL):
                new.inst_i[f, i0:i1] = shift(self.inst_i[f, i0:i1], dr)
            for f in (II_LRU_HEAD, II_LRU_TAIL):
                new.inst_i[f, i0:i1] = shift(self.inst_i[f, i0:i1], de)
            new.inst_i[II_ENT0, i0:i1] += de
            b0, b0n, x0, x0n = self.bk_off[k], new.bk_off[k], self.ix_off[k], new.ix_off[k]
            nb, nx, dbk, dix = old[k][4], old[k][5], b0n - b0, x0n - x0
            for f in (RI_BK0, RI_BK1):
                new.req_i[f, r0n:r0n + nr] += dbk
            new.bkey[b0n:b0n + nb] = self.bkey[b0:b0 + nb]
            new.ix[:, x0n:x0n + nx] = self.ix[:, x0:x0 + nx]
            for f in (IX_PREV, IX_NEXT):
                new.ix[f, x0n:x0n + nx] = shift(self.ix[f, x0:x0 + nx], dix)
            new.inst_i[II_IX0, i0:i1] += dix
            p0, p0n, nc = self.cpu_base(k), new.cpu_base(k), old[k][6]
            dp = p0n - p0
            new.ent[p0n:p0n + nc] = self.ent[p0:p0 + nc]
            for f in (EN_PREV, EN_NEXT):
                new.ent[p0n:p0n + nc, f] = shift(self.ent[p0:p0 + nc, f], dp)
            new.inst_i[II_CPU0, i0:i1] += dp
            for f in (II_CPU_HEAD, II_CPU_TAIL):
                new.inst_i[f, i0:i1] = shift(self.inst_i[f, i0:i1], dp)
            for f in (II_IX_HEAD, II_IX_TAIL):
                new.inst_i[f, i0:i1] = shift(self.inst_i[f, i0:i1], dix)
            new.run[i0:i1, :, :S] = self.run[i0:i1]
            new.run[i0:i1, RUN_ID] += dr
            new.clu_i[:, k] = self.clu_i[:, k]
            for f in (CI_REQ0, CI_REQ1, CI_PENDING):
                new.clu_i[f, k] += dr
            new.clu_i[CI_LAST_ROUTE, k] = shift(self.clu_i[CI_LAST_ROUTE, k], dr)
            new.bq[:, k, :B] = self.bq[:, k]
            for f in (BQ_HEAD, BQ_TAIL):
                new.bq[f, k, :B] = shift(self.bq[f, k], dr)
        new.inst_f[:], new.seg[:] = self.inst_f, self.seg
        return new

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

    def load(self, c: int, x: ClusterInputs, units=None, fresh: bool = False) -> None:
        """(Re)initialize slot ``c`` with cluster ``x``: every array range of the slot is reset
        (``fresh``: the slot was just allocated, all zeros, and its large ranges are left
        untouched: writing zeros would fault in every page of a table the run may never use)."""
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
        if not fresh:
            ri[:, r0:int(self.req_off[c + 1])] = 0
        ri[RI_INPUT, r0:r1] = w.input_tokens
        ri[RI_OUTPUT, r0:r1] = w.output_tokens
        ri[RI_PRIORITY, r0:r1] = w.priority
        ri[RI_BAND, r0:r1] = x.band_index
        ri[RI_UNIT0, r0:r1] = uoff[:-1] + u0
        ri[RI_UNIT1, r0:r1] = uoff[1:] + u0
        ri[RI_INSTANCE, r0:r1] = -1
        ri[RI_NEXT, r0:r1] = -1
        ri[RI_DECODE, r0:r1] = -1
        if not fresh:
            rf[:, r0:int(self.req_off[c + 1])] = 0.0
        ri[RI_CLASS, r0:r1] = -1
        if x.prefix_classes:
            ri[RI_CLASS, r0:r1], n_classes = prefix_classes(w, *x.prefix_classes)
        else:
            n_classes = 0
        if not fresh:
            self.ccount[r0:int(self.req_off[c + 1])] = 0
        rf[RF_ARRIVAL, r0:r1] = w.arrival_s
        for f in (RF_DISPATCH, RF_FIRST, RF_FINISH, RF_END, RF_ENQUEUED, RF_TRANSFER):
            rf[f, r0:r1] = np.nan
        # Per-request overheads, elementwise as the step-time model prices them.
        rf[RF_DELAY, r0:r1] = x.latency.arrival_delay_us(w.input_tokens) * 1e-6
        rf[RF_FINISH_DELAY, r0:r1] = x.latency.finish_delay_us(w.output_tokens) * 1e-6
        self.unit_i[U_KEY, u0:u0 + len(keys)] = keys
        self.unit_i[U_BLOCKS, u0:u0 + len(keys)] = blocks
        self.unit_i[U_END, u0:u0 + len(keys)] = ends
        e0, e1 = int(self.ent_off[c]), int(self.ent_off[c + 1])
        if not fresh:
            self.ent[e0:e1] = 0  # every table slot empty
        table, direct = self._slot_table(c, x, units), _table_size(x, units)[1]

        b0, x0, x1 = int(self.bk_off[c]), int(self.ix_off[c]), int(self.ix_off[c + 1])
        ri[RI_BK0, r0:r1] = bk_off[:-1] + b0
        ri[RI_BK1, r0:r1] = bk_off[1:] + b0
        self.bkey[b0:b0 + len(bkeys)] = bkeys
        self.ix[:, x0:x1] = 0
        self.ix[IX_PREV, x0:x1] = self.ix[IX_NEXT, x0:x1] = -1

        ii = self.inst_i
        ii[:, i0:i1] = 0
        ii[II_IX0, i0:i1] = x0 + n_bkeys * np.arange(x.instances)
        ii[II_ANON_FRONT, i0:i1] = x.kv_blocks  # every block starts free and never cached
        ii[II_EVICTION, i0:i1] = EVICTION_ORDERS.index(x.engine.eviction)
        ii[II_RESTART, i0:i1] = PREEMPTION_MODES.index(x.engine.preemption)
        ii[II_IX_HEAD, i0:i1] = ii[II_IX_TAIL, i0:i1] = -1
        ii[II_CLUSTER, i0:i1] = c
        ii[II_TOTAL, i0:i1] = x.kv_blocks
        ii[II_WQ_HEAD, i0:i1] = ii[II_WQ_TAIL, i0:i1] = -1
        ii[II_LRU_HEAD, i0:i1] = ii[II_LRU_TAIL, i0:i1] = -1
        ii[II_ENT0, i0:i1] = e0 + table * np.arange(x.instances)
        ii[II_ENT_MASK, i0:i1] = table - 1  # hashed tables only
        ii[II_ENT_DIRECT, i0:i1] = int(direct)
        p0, p1 = self.cpu_base(c), self.cpu_base(c + 1)
        if not fresh:
            self.ent[p0:p1] = 0
        cpu_table, cpu_direct = self._slot_table(c, x, units, cpu=True), _table_size(x, units, cpu=True)[1]
        shared = bool(x.cpu_shared)
        ii[II_CPU0, i0:i1] = p0 + (0 if shared else cpu_table) * np.arange(x.instances)
        ii[II_CPU_MASK, i0:i1] = cpu_table - 1
        ii[II_CPU_DIRECT, i0:i1] = int(cpu_direct)
        ii[II_CPU_CAP, i0:i1] = (x.cpu_blocks * (x.instances if shared else 1)) if cpu_table else 0
        ii[II_CPU_OWNER, i0:i1] = i0 if shared else np.arange(i0, i1)
        ii[II_CPU_VISIBLE, i0:i1] = int(bool(x.cpu_blocks and cpu_table and x.cpu_visible))
        ii[II_CPU_HEAD, i0:i1] = ii[II_CPU_TAIL, i0:i1] = -1
        self.inst_f[:, i0:i1] = 0.0
        self.inst_f[IF_NEXT_T, i0:i1] = np.inf
        self.inst_f[IF_CPU_LOAD_US, i0:i1] = x.cpu_load_us_per_token
        self.inst_f[IF_ROUTE_W, i0:i1] = 1.0  # ROUTER_LMETRIC_WEIGHTED: LMetric until set
        if not fresh:
            self.run[i0:i1] = 0

        ci, cf = self.clu_i, self.clu_f
        ci[:, c] = 0
        cf[:, c] = 0.0
        ci[CI_REQ0, c], ci[CI_REQ1, c], ci[CI_INST0, c], ci[CI_INST1, c] = r0, r1, i0, i1
        ci[CI_NSERVE, c] = i1 - i0
        ci[CI_NPREFILL, c] = x.prefill_instances
        cf[CF_XFER_US, c], cf[CF_XFER_LAT, c] = x.kv_us_per_token, x.kv_latency_s
        ci[CI_NBANDS, c] = x.num_bands
        ci[CI_NCLASSES, c] = n_classes
        ci[CI_LAST_ROUTE, c] = -1
        e = x.engine
        ci[CI_MAX_SEQS, c], ci[CI_BUDGET, c], ci[CI_BS, c] = e.max_num_seqs, e.max_num_batched_tokens, e.block_size
        ci[CI_MAX_LEN, c] = -1 if e.max_model_len is None else e.max_model_len
        ci[CI_SKIP, c] = int(e.event_skipping)
        ci[CI_BAND_CAP, c] = x.band_capacity
        kind, params = lower(x.latency)
        ci[CI_LAT_KIND, c], ci[CI_INTEGER_US, c] = kind, int(x.latency.integer_us)
        self.lat_p[c] = params
        cf[CF_HORIZON, c] = x.horizon_s
        cf[CF_NEXT_CYCLE, c] = np.inf
        cf[CF_SCRAPE_INT, c], cf[CF_TTL, c], cf[CF_DISP_INT, c] = x.scrape_interval_s, x.ttl_s, x.dispatch_interval_s
        cf[CF_FT_DELAY, c] = x.latency.first_token_delay_us * 1e-6
        cf[CF_EXP_OUT, c] = x.expected_output
        sat = x.saturation or SaturationConfig()
        ci[CI_SAT_KIND, c] = (SAT_UTILIZATION if sat.kind == "utilization" else
                              {"requests": SAT_REQUESTS, "tokens": SAT_TOKENS, "hybrid": SAT_HYBRID}[sat.concurrency_mode])
        cf[CF_SAT_QUEUE, c], cf[CF_SAT_KV, c] = float(sat.queue_depth_threshold), float(sat.kv_cache_util_threshold)
        cf[CF_SAT_STALE, c] = sat.metrics_staleness_threshold_s
        cf[CF_SAT_MAX_REQ, c], cf[CF_SAT_MAX_TOK, c] = sat.max_concurrency, sat.max_token_concurrency
        ev = x.eviction
        ci[CI_EVICT_MAX, c] = 0 if ev is None else ev.max_revocations_per_decision
        cf[CF_EVICT_GRACE, c] = 0.0 if ev is None else ev.confirmation_grace_s
        cf[CF_EVICT_GATE, c] = -np.inf
        self.bq[:, c] = 0
        self.bq[BQ_HEAD, c] = self.bq[BQ_TAIL, c] = -1
        self.ceil_ext[c] = 1.0
        self.aprob[c] = 0.0
        self.rngs[c] = x.rng
        x.units = None  # the slot holds what it needs (~10 MB on a 16-instance chatbot); recomputed if asked

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
                                       self.clu_i, self.clu_f, self.heap_t, self.heap_r, self.bkey, self.ix, c, r, i)

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
