"""The compiled event loop: C clusters (gateway + vLLM-v1-like instances) in shared arrays.

One call of :func:`advance` moves every cluster forward until it reaches a decision the
kernel cannot take itself (a routing, admission or usage-limit decision of a Python
policy, or an external agent's), the requested time, the horizon, or drain. Everything
else runs here, with no Python per request or per iteration:

* instances: vLLM v1 batch formation (running requests first, then waiting ones in
  queue order within the token budget and ``max_num_seqs``), chunked prefill, block
  allocation, a prefix cache over chained unit keys with LRU eviction of unreferenced
  units, recompute-mode preemption of the most recently admitted request, and decode
  *segments*: a decode-only batch nothing can join runs many iterations in one event, up
  to the first completion or KV shortfall, cut short when a request becomes schedulable;
* gateway: arrivals, admission, per-band FCFS queues with TTL expiry and the 1 ms
  dispatch cycle under a usage-limit policy, routing, lazy metrics scrapes and the
  saturation detector.

The state layout is in :mod:`llmsched_gym.engine.layout`; docs/architecture.md explains
the event order (ties: schedulable-at-instance, iteration end, arrival, dispatch cycle).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .borrow import borrowed
from .layout import (
    ADMIT_ALWAYS,
    ADMIT_LEGACY,
    ADMIT_PROBABILISTIC,
    ADMIT_PY,
    BQ_HEAD,
    BQ_LEN,
    BQ_TAIL,
    CF_A0,
    CF_A1,
    CF_A2,
    CF_A3,
    CF_ASYNC_LAG,
    CF_DISP_INT,
    CF_EVICT_GATE,
    CF_EVICT_GRACE,
    CF_EXP_OUT,
    CF_F0,
    CF_F1,
    CF_FT_DELAY,
    CF_HORIZON,
    CF_LINK_UP_AT,
    CF_NEXT_CYCLE,
    CF_NEXT_SCRAPE,
    CF_NOW,
    CF_PD0,
    CF_PD1,
    CF_R0,
    CF_R1,
    CF_R2,
    CF_R3,
    CF_SAT_KV,
    CF_SAT_MAX_REQ,
    CF_SAT_MAX_TOK,
    CF_SAT_QUEUE,
    CF_SAT_STALE,
    CF_SATURATION,
    CF_SCRAPE_INT,
    CF_STATIONARY,
    CF_TIMEOUT,
    CF_TTL,
    CF_XFER_LAT,
    CF_XFER_SLOW,
    CF_XFER_US,
    CI_ACTIVE,
    CI_ADMIT,
    CI_BAND_CAP,
    CI_BOOKS,
    CI_BS,
    CI_BUDGET,
    CI_DECISION,
    CI_EVICT_MAX,
    CI_FAULTS,
    CI_FLOW,
    CI_HAS_DECISION,
    CI_HEAP_LEN,
    CI_INST0,
    CI_INST1,
    CI_INTEGER_US,
    CI_KV_RECOMPUTE,
    CI_LAST_ROUTE,
    CI_LAT_KIND,
    CI_LINK_DOWN,
    CI_LOG_FINISH,
    CI_LOG_LEN,
    CI_MAX_LEN,
    CI_MAX_SEQS,
    CI_NBANDS,
    CI_NCLASSES,
    CI_NDOWN,
    CI_NPREFILL,
    CI_NSERVE,
    CI_PD,
    CI_PENDING,
    CI_PTR,
    CI_REQ0,
    CI_REQ1,
    CI_RETRY_MAX,
    CI_ROUTER,
    CI_RR_NEXT,
    CI_SAT_KIND,
    CI_SKIP,
    CI_STALE_POLICY,
    CI_STATUS,
    CI_TICK,
    CI_TO_PTR,
    CI_WIN_CAP,
    CI_WIN_HEAD,
    CI_WIN_LEN,
    CRASHED,
    DROPPED,
    EN_ANON_AFTER,
    EN_BLOCKS,
    EN_KEY,
    EN_NEXT,
    EN_PREV,
    EN_REF,
    EVICT_VLLM,
    EVICTED,
    EXPIRED,
    FINISHED,
    FLOW_HOLDBACK,
    FLOW_NONE,
    FLOW_PY,
    FLOW_SOFT_REFLECTIVE,
    FLOW_STATIC,
    IF_CPU_LOAD_US,
    IF_LT_TOKENS,
    IF_NEXT_T,
    IF_ROUTE_W,
    IF_SCR_KV,
    IF_SCRAPE_T,
    IF_SLOW,
    IF_STEP_S,
    II_ANON_FRONT,
    II_CLUSTER,
    II_CPU0,
    II_CPU_CAP,
    II_CPU_DIRECT,
    II_CPU_HEAD,
    II_CPU_MASK,
    II_CPU_OWNER,
    II_CPU_TAIL,
    II_CPU_USED,
    II_CPU_VISIBLE,
    II_DOWN,
    II_ENT0,
    II_ENT_DIRECT,
    II_ENT_MASK,
    II_EVICTABLE,
    II_EVICTION,
    II_INFLIGHT,
    II_ITERS,
    II_IX0,
    II_IX_COUNT,
    II_IX_HEAD,
    II_IX_TAIL,
    II_LRU_HEAD,
    II_LRU_TAIL,
    II_NOSCRAPE,
    II_NRUN,
    II_PENDING,
    II_QPREFILL,
    II_RESTART,
    II_SCR_RUNNING,
    II_SCR_WAITING,
    II_SEG_LEN,
    II_SEG_USED0,
    II_TOTAL,
    II_USED,
    II_WQ_HEAD,
    II_WQ_LEN,
    II_WQ_TAIL,
    IN_FLIGHT,
    IX_NEXT,
    IX_PRESENT,
    IX_PREV,
    N_EN,
    N_RUN,
    PD_ARRIVED,
    PD_DECIDE_ALWAYS,
    PD_DECIDE_LLMD,
    PD_DECODE,
    PD_PREFILL,
    PD_TRANSFER,
    REJECTED,
    RF_ARRIVAL,
    RF_DELAY,
    RF_DISPATCH,
    RF_END,
    RF_ENQUEUED,
    RF_FINISH,
    RF_FINISH_DELAY,
    RF_FIRST,
    RF_SENT,
    RF_TRANSFER,
    RI_BAND,
    RI_BK0,
    RI_BK1,
    RI_CLASS,
    RI_CPU_HIT,
    RI_DECODE,
    RI_GENERATED,
    RI_HELD,
    RI_INPUT,
    RI_INSTANCE,
    RI_NEXT,
    RI_OUTCOME,
    RI_OUTPUT,
    RI_PD,
    RI_PD_PRIVATE,
    RI_PREEMPTIONS,
    RI_PREFILL_EST,
    RI_PREFIX_HIT,
    RI_PRIORITY,
    RI_RETRIES,
    RI_SCHEDULED,
    RI_UNIT0,
    RI_UNIT1,
    ROUTER_AIBRIX,
    ROUTER_BAILIAN,
    ROUTER_BAILIAN_SAMPLING,
    ROUTER_DYNAMO,
    ROUTER_JSQ,
    ROUTER_LEAST_TOKENS,
    ROUTER_LLMD,
    ROUTER_LMETRIC,
    ROUTER_LMETRIC_WEIGHTED,
    ROUTER_POLYSERVE,
    ROUTER_PREBLE,
    ROUTER_PREDICTED_LATENCY,
    ROUTER_PY,
    ROUTER_RANDOM,
    ROUTER_ROUND_ROBIN,
    ROUTER_SGLANG,
    ROUTER_VLLM_DP,
    RUN_COMP,
    RUN_DECODE,
    RUN_DONE,
    RUN_GEN,
    RUN_ID,
    RUN_INP,
    RUN_OUT,
    RUN_PREFILL,
    RUN_SHARED,
    RUN_TAKE,
    SAT_REQUESTS,
    SAT_TOKENS,
    SAT_UTILIZATION,
    SEGMENT_CHUNK,
    ST_ADMIT,
    ST_CEILINGS,
    ST_DONE,
    ST_HORIZON,
    ST_ROUTE,
    ST_TIME,
    STALE_IGNORE,
    TIMED_OUT,
    U_BLOCKS,
    U_END,
    U_KEY,
)
from .steptime import prefill_terms, step_us


# ===================================================================== small helpers
@njit(cache=True, inline="always")
def _cdiv(a, b):
    return -((-a) // b)


@njit(cache=True, inline="always")
def _blocks(tokens, bs):
    """KV blocks holding ``tokens >= 0`` tokens. vLLM's default 16-token block takes a
    shift: this runs for every running request on every iteration, and a 64-bit division
    by a runtime value costs tens of cycles."""
    if bs == 16:
        return (tokens + 15) >> 4
    return (tokens + bs - 1) // bs


@njit(cache=True)
def _block_sum(a, lo, n):
    """numpy's unrolled sum of at most 128 elements."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True)
def pairwise_sum(a, lo, n):
    """numpy's pairwise summation of ``a[lo:lo+n]`` (the order ``np.sum`` adds in), with
    an explicit stack (numba's cache cannot hold recursive functions)."""
    if n <= 128:
        return _block_sum(a, lo, n)
    f_lo = np.empty(64, np.int64)
    f_n = np.empty(64, np.int64)
    f_phase = np.zeros(64, np.int64)
    vals = np.empty(64)
    sp, nv = 0, 0
    f_lo[0], f_n[0] = lo, n
    while sp >= 0:
        m = f_n[sp]
        if m <= 128:
            vals[nv] = _block_sum(a, f_lo[sp], m)
            nv += 1
            sp -= 1
            continue
        half = m // 2
        half -= half % 8
        if f_phase[sp] == 0:
            f_phase[sp] = 1
            f_lo[sp + 1], f_n[sp + 1], f_phase[sp + 1] = f_lo[sp], half, 0
            sp += 1
        elif f_phase[sp] == 1:
            f_phase[sp] = 2
            f_lo[sp + 1], f_n[sp + 1], f_phase[sp + 1] = f_lo[sp] + half, m - half, 0
            sp += 1
        else:
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
            sp -= 1
    return vals[0]


@njit(cache=True)
def _argmin_random(scores, rng):
    """Index of the minimum; exact ties drawn uniformly with ``rng`` (``rng.choice(ties)``)."""
    best = scores[0]
    for i in range(1, len(scores)):
        if scores[i] < best:
            best = scores[i]
    ties = 0
    first = -1
    for i in range(len(scores)):
        if scores[i] == best:
            if first < 0:
                first = i
            ties += 1
    if ties == 1:
        return first
    k = rng.integers(0, ties)
    for i in range(len(scores)):
        if scores[i] == best:
            if k == 0:
                return i
            k -= 1
    return first


# ===================================================================== prefix cache
@njit(cache=True)
def _home(key, mask):
    """Home slot of a unit key in a table of ``mask + 1`` slots (Fibonacci hashing)."""
    x = key * -7046029254386353131  # 0x9E3779B97F4A7C15 as int64; wraps
    return (x ^ (x >> 29)) & mask


@njit(cache=True)
def _find_in(ent, e0, mask, direct, key):
    """Slot of unit ``key`` in the table at ``e0`` (``mask + 1`` slots), -1 if absent."""
    if direct:
        return e0 + key if ent[e0 + key, EN_KEY] == key + 1 else -1
    h = _home(key, mask)
    while True:
        k = ent[e0 + h, EN_KEY]
        if k == key + 1:
            return e0 + h
        if k == 0:
            return -1
        h = (h + 1) & mask


@njit(cache=True)
def _find(ent, inst_i, g, key):
    """Slot of unit ``key`` in instance ``g``'s table, -1 if it is not cached there."""
    return _find_in(ent, inst_i[II_ENT0, g], inst_i[II_ENT_MASK, g], inst_i[II_ENT_DIRECT, g], key)


@njit(cache=True)
def _insert_in(ent, e0, mask, direct, key):
    """A fresh entry for unit ``key`` (not in the table at ``e0``)."""
    h = key if direct else _home(key, mask)
    for _ in range(mask + 1):
        e = e0 + h
        if ent[e, EN_KEY] == 0:
            ent[e, EN_KEY] = key + 1
            ent[e, EN_REF], ent[e, EN_BLOCKS], ent[e, EN_ANON_AFTER] = 0, 0, 0
            ent[e, EN_PREV], ent[e, EN_NEXT] = -1, -1
            return e
        h = (h + 1) & mask
    raise RuntimeError("prefix-cache table full")


@njit(cache=True)
def _insert(ent, inst_i, g, key):
    """A fresh entry for unit ``key`` (not in the table) on instance ``g``."""
    return _insert_in(ent, inst_i[II_ENT0, g], inst_i[II_ENT_MASK, g], inst_i[II_ENT_DIRECT, g], key)


@njit(cache=True)
def _delete_in(ent, inst_i, g, e, e0, mask, direct, head_f, tail_f):
    """Remove entry ``e`` (out of its queue) from the table at ``e0``. Later entries of
    its probe run shift back into the gap; those in the queue whose ends are
    ``inst_i[head_f / tail_f, g]`` keep their links pointed at them (so lookups never
    meet a tombstone)."""
    gap = e - e0
    ent[e, EN_KEY] = 0
    if direct:  # every entry sits in its own slot
        return
    j = gap
    while True:
        j = (j + 1) & mask
        k = ent[e0 + j, EN_KEY]
        if k == 0:
            return
        h = _home(k - 1, mask)
        # The entry at j may fill the gap unless its home lies cyclically in (gap, j].
        if (gap < j and gap < h <= j) or (gap > j and (h > gap or h <= j)):
            continue
        src, dst = e0 + j, e0 + gap
        for f in range(N_EN):
            ent[dst, f] = ent[src, f]
        ent[src, EN_KEY] = 0
        if ent[dst, EN_REF] == 0:  # in the queue: relink its neighbours
            p, n = ent[dst, EN_PREV], ent[dst, EN_NEXT]
            if p >= 0:
                ent[p, EN_NEXT] = dst
            else:
                inst_i[head_f, g] = dst
            if n >= 0:
                ent[n, EN_PREV] = dst
            else:
                inst_i[tail_f, g] = dst
        gap = j


@njit(cache=True)
def _delete(ent, inst_i, g, e):
    """Remove entry ``e`` (evicted, out of the free queue) from instance ``g``'s table."""
    _delete_in(ent, inst_i, g, e, inst_i[II_ENT0, g], inst_i[II_ENT_MASK, g], inst_i[II_ENT_DIRECT, g],
               II_LRU_HEAD, II_LRU_TAIL)


@njit(cache=True)
def _queue_remove(ent, inst_i, g, e, head_f, tail_f):
    p, n = ent[e, EN_PREV], ent[e, EN_NEXT]
    if p >= 0:
        ent[p, EN_NEXT] = n
    else:
        inst_i[head_f, g] = n
    if n >= 0:
        ent[n, EN_PREV] = p
    else:
        inst_i[tail_f, g] = p
    ent[e, EN_PREV] = -1
    ent[e, EN_NEXT] = -1


@njit(cache=True)
def _queue_append(ent, inst_i, g, e, head_f, tail_f):
    tail = inst_i[tail_f, g]
    ent[e, EN_PREV] = tail
    ent[e, EN_NEXT] = -1
    if tail >= 0:
        ent[tail, EN_NEXT] = e
    else:
        inst_i[head_f, g] = e
    inst_i[tail_f, g] = e


@njit(cache=True)
def _lru_remove(ent, inst_i, g, e):
    """Take unreferenced unit ``e`` out of the free queue (a prefix hit, or its eviction);
    in vLLM order the anonymous free blocks released after it keep their place."""
    p = ent[e, EN_PREV]
    after = ent[e, EN_ANON_AFTER]
    if p >= 0:
        ent[p, EN_ANON_AFTER] += after
    else:
        inst_i[II_ANON_FRONT, g] += after
    _queue_remove(ent, inst_i, g, e, II_LRU_HEAD, II_LRU_TAIL)
    ent[e, EN_ANON_AFTER] = 0


@njit(cache=True)
def _lru_append(ent, inst_i, g, e):
    _queue_append(ent, inst_i, g, e, II_LRU_HEAD, II_LRU_TAIL)
    ent[e, EN_ANON_AFTER] = 0


# ===================================================================== CPU KV tier
@njit(cache=True)
def _cpu_find(ent, inst_i, g, key):
    """Slot of unit ``key`` in instance ``g``'s CPU tier, -1 if it is not stored there."""
    return _find_in(ent, inst_i[II_CPU0, g], inst_i[II_CPU_MASK, g], inst_i[II_CPU_DIRECT, g], key)


@njit(cache=True)
def _cpu_drop(ent, inst_i, g, e):
    """Drop entry ``e`` from the CPU tier whose fields ``g`` (its owner) holds."""
    _queue_remove(ent, inst_i, g, e, II_CPU_HEAD, II_CPU_TAIL)
    inst_i[II_CPU_USED, g] -= ent[e, EN_BLOCKS]
    _delete_in(ent, inst_i, g, e, inst_i[II_CPU0, g], inst_i[II_CPU_MASK, g], inst_i[II_CPU_DIRECT, g],
               II_CPU_HEAD, II_CPU_TAIL)


@njit(cache=True)
def _cpu_put(ent, inst_i, g, key, nb):
    """Unit ``key`` (``nb`` blocks), just evicted from ``g``'s GPU cache, is stored in its
    CPU tier as the most recently used: an LRU victim cache (LMCache's local CPU backend,
    a Mooncake store), which drops its least recently used units to make room. A tier
    shared by the cluster's instances keeps its queue and use in its owner's fields."""
    g = inst_i[II_CPU_OWNER, g]
    cap = inst_i[II_CPU_CAP, g]
    if nb > cap:
        return
    e = _cpu_find(ent, inst_i, g, key)
    if e >= 0:
        _cpu_drop(ent, inst_i, g, e)
    while inst_i[II_CPU_USED, g] + nb > cap:
        _cpu_drop(ent, inst_i, g, inst_i[II_CPU_HEAD, g])
    e = _insert_in(ent, inst_i[II_CPU0, g], inst_i[II_CPU_MASK, g], inst_i[II_CPU_DIRECT, g], key)
    ent[e, EN_BLOCKS] = nb
    _queue_append(ent, inst_i, g, e, II_CPU_HEAD, II_CPU_TAIL)
    inst_i[II_CPU_USED, g] += nb


@njit(cache=True)
def _allocate(inst_i, ent, g, n):
    """Take ``n`` free blocks (see ``EngineConfig.eviction`` for which)."""
    if n <= 0:
        return
    total, used = inst_i[II_TOTAL, g], inst_i[II_USED, g]
    if n > total - used:
        raise RuntimeError("KV allocation exceeds the allocatable blocks")
    if inst_i[II_EVICTION, g] == EVICT_VLLM:
        # One free queue in release order: [anon] unit [anon] unit ... ; the front goes first,
        # and a unit reached there is evicted (its blocks and the anonymous ones after it
        # join the front).
        while inst_i[II_ANON_FRONT, g] < n:
            e = inst_i[II_LRU_HEAD, g]
            nb = ent[e, EN_BLOCKS]
            _lru_remove(ent, inst_i, g, e)
            inst_i[II_ANON_FRONT, g] += nb
            if inst_i[II_CPU_CAP, g]:
                _cpu_put(ent, inst_i, g, ent[e, EN_KEY] - 1, nb)
            _delete(ent, inst_i, g, e)  # no longer cached on the GPU
            inst_i[II_EVICTABLE, g] -= nb
        inst_i[II_ANON_FRONT, g] -= n
    else:
        # Never-cached free blocks first; cached units, least recently released first.
        free = total - used - inst_i[II_EVICTABLE, g]
        while free < n:
            e = inst_i[II_LRU_HEAD, g]
            nb = ent[e, EN_BLOCKS]
            _lru_remove(ent, inst_i, g, e)
            if inst_i[II_CPU_CAP, g]:
                _cpu_put(ent, inst_i, g, ent[e, EN_KEY] - 1, nb)
            _delete(ent, inst_i, g, e)  # no longer cached on the GPU
            inst_i[II_EVICTABLE, g] -= nb
            free += nb
    inst_i[II_USED, g] = used + n


@njit(cache=True)
def _release(req_i, unit_i, inst_i, ent, g, r, private):
    """Drop request ``r``'s private blocks and unit references, tail first (as vLLM frees
    a request's blocks in reverse, so that a prompt's end is evicted before its start)."""
    inst_i[II_USED, g] -= private
    tail = inst_i[II_LRU_TAIL, g]
    if tail >= 0:
        ent[tail, EN_ANON_AFTER] += private
    else:
        inst_i[II_ANON_FRONT, g] += private
    u0 = req_i[RI_UNIT0, r]
    for u in range(u0 + req_i[RI_HELD, r] - 1, u0 - 1, -1):
        e = _find(ent, inst_i, g, unit_i[U_KEY, u])
        ent[e, EN_REF] -= 1
        if ent[e, EN_REF] == 0:
            _lru_append(ent, inst_i, g, e)
            nb = ent[e, EN_BLOCKS]
            inst_i[II_EVICTABLE, g] += nb
            inst_i[II_USED, g] -= nb
    req_i[RI_HELD, r] = 0


@njit(cache=True)
def _matched_units(req_i, unit_i, inst_i, ent, g, r):
    """Leading units of ``r`` cached on instance ``g``."""
    u0, u1 = req_i[RI_UNIT0, r], req_i[RI_UNIT1, r]
    n = 0
    while u0 + n < u1:
        e = _find(ent, inst_i, g, unit_i[U_KEY, u0 + n])
        if e < 0 or ent[e, EN_BLOCKS] != unit_i[U_BLOCKS, u0 + n]:
            break
        n += 1
    return n


@njit(cache=True)
def cached_tokens(req_i, unit_i, inst_i, ent, g, r):
    """Prompt tokens of request ``r`` cached on instance ``g`` (precise prefix index): on
    its GPU, continued in its CPU tier where that tier publishes its blocks."""
    n = _matched_units(req_i, unit_i, inst_i, ent, g, r)
    if inst_i[II_CPU_VISIBLE, g]:
        u0, u1 = req_i[RI_UNIT0, r], req_i[RI_UNIT1, r]
        while u0 + n < u1:
            e = _cpu_find(ent, inst_i, g, unit_i[U_KEY, u0 + n])
            if e < 0 or ent[e, EN_BLOCKS] != unit_i[U_BLOCKS, u0 + n]:
                break
            n += 1
    return unit_i[U_END, req_i[RI_UNIT0, r] + n - 1] if n else 0


@njit(cache=True)
def _prefix_hit(req_i, unit_i, inst_i, ent, g, r):
    """(hit tokens, GPU units, idle blocks, CPU units, CPU blocks) of ``r`` on ``g``: its
    leading units cached on the GPU, short of any that reaches the prompt's end (vLLM
    recomputes the last token of a fully cached prompt; unit ends only grow), and their
    blocks no running request holds; then the units that continue the prefix in the CPU
    tier (not on the GPU), to be loaded. ``hit`` covers both."""
    u0, u1 = req_i[RI_UNIT0, r], req_i[RI_UNIT1, r]
    target = req_i[RI_INPUT, r] + req_i[RI_GENERATED, r]
    n = idle = 0
    while u0 + n < u1 and unit_i[U_END, u0 + n] < target:
        e = _find(ent, inst_i, g, unit_i[U_KEY, u0 + n])
        if e < 0 or ent[e, EN_BLOCKS] != unit_i[U_BLOCKS, u0 + n]:
            break
        if ent[e, EN_REF] == 0:
            idle += ent[e, EN_BLOCKS]
        n += 1
    m = cpu_blocks = 0
    if inst_i[II_CPU_CAP, g]:
        while u0 + n + m < u1 and unit_i[U_END, u0 + n + m] < target:
            u = u0 + n + m
            e = _cpu_find(ent, inst_i, g, unit_i[U_KEY, u])
            if e < 0 or ent[e, EN_BLOCKS] != unit_i[U_BLOCKS, u] or _find(ent, inst_i, g, unit_i[U_KEY, u]) >= 0:
                break
            cpu_blocks += ent[e, EN_BLOCKS]
            m += 1
    return (unit_i[U_END, u0 + n + m - 1] if n + m else 0), n, idle, m, cpu_blocks


# ===================================================================== instances
@njit(cache=True)
def _wq_append(req_i, inst_i, g, r):
    req_i[RI_NEXT, r] = -1
    tail = inst_i[II_WQ_TAIL, g]
    if tail >= 0:
        req_i[RI_NEXT, tail] = r
    else:
        inst_i[II_WQ_HEAD, g] = r
    inst_i[II_WQ_TAIL, g] = r
    inst_i[II_WQ_LEN, g] += 1


@njit(cache=True)
def _wq_appendleft(req_i, inst_i, g, r):
    req_i[RI_NEXT, r] = inst_i[II_WQ_HEAD, g]
    inst_i[II_WQ_HEAD, g] = r
    if inst_i[II_WQ_TAIL, g] < 0:
        inst_i[II_WQ_TAIL, g] = r
    inst_i[II_WQ_LEN, g] += 1


@njit(cache=True)
def _wq_popleft(req_i, inst_i, g):
    r = inst_i[II_WQ_HEAD, g]
    inst_i[II_WQ_HEAD, g] = req_i[RI_NEXT, r]
    if inst_i[II_WQ_HEAD, g] < 0:
        inst_i[II_WQ_TAIL, g] = -1
    inst_i[II_WQ_LEN, g] -= 1
    return r


@njit(cache=True)
def _blocks_after(run, inst_i, g, bs, j):
    """New blocks the running batch needs to decode ``j`` more tokens each."""
    R = run[g]
    s = 0
    for k in range(inst_i[II_NRUN, g]):
        comp = R[RUN_COMP, k]
        s += _blocks(comp + j, bs) - _blocks(comp, bs)
    return s


@njit(cache=True)
def kv_used_at(run, inst_i, seg, g, bs, t):
    """Referenced KV blocks of ``g`` at ``t`` (inside a segment: after the iterations done by t)."""
    m = inst_i[II_SEG_LEN, g]
    if m == 0:
        return inst_i[II_USED, g]
    done = np.searchsorted(seg[g, :m], t, side="right")
    return inst_i[II_SEG_USED0, g] + _blocks_after(run, inst_i, g, bs, done)


@njit(cache=True)
def fits(req_i, inst_i, clu_i, c, g, r):
    """Whether request ``r`` can ever run on instance ``g`` (else it is dropped)."""
    total = req_i[RI_INPUT, r] + req_i[RI_OUTPUT, r]
    max_len = clu_i[CI_MAX_LEN, c]
    if max_len >= 0 and total > max_len:
        return False
    return _cdiv(total, clu_i[CI_BS, c]) <= inst_i[II_TOTAL, g]


@njit(cache=True)
def _preempt_last(req_i, req_f, unit_i, inst_i, ent, run, g, bs):
    """Preemption of the most recently admitted running request (recompute or restart)."""
    R = run[g]
    j = inst_i[II_NRUN, g] - 1
    r = R[RUN_ID, j]
    _release(req_i, unit_i, inst_i, ent, g, r, (R[RUN_COMP, j] + bs - 1) // bs - R[RUN_SHARED, j])
    if inst_i[II_RESTART, g]:  # BLIS: the output is discarded and regenerated
        req_i[RI_GENERATED, r] = 0
        req_f[RF_FIRST, r] = np.nan
    else:
        req_i[RI_GENERATED, r] = R[RUN_GEN, j]
    req_i[RI_PREEMPTIONS, r] += 1
    inst_i[II_NRUN, g] = j
    _wq_appendleft(req_i, inst_i, g, r)


@njit(cache=True)
def _can_admit(req_i, unit_i, inst_i, ent, g, budget, bs, max_seqs):
    """Whether the head of the waiting queue could join a batch now."""
    if inst_i[II_WQ_LEN, g] == 0 or budget <= 0 or inst_i[II_NRUN, g] >= max_seqs:
        return False
    r = inst_i[II_WQ_HEAD, g]
    if req_i[RI_PD, r] == PD_ARRIVED:  # its prompt's KV arrived: blocks of its own for the prompt
        return _cdiv(req_i[RI_INPUT, r], bs) <= inst_i[II_TOTAL, g] - inst_i[II_USED, g]
    hit, _, idle, _, cpu_blocks = _prefix_hit(req_i, unit_i, inst_i, ent, g, r)
    take = min(req_i[RI_INPUT, r] + req_i[RI_GENERATED, r] - hit, budget)
    return _cdiv(hit + take, bs) - hit // bs + cpu_blocks <= inst_i[II_TOTAL, g] - inst_i[II_USED, g] - idle


@njit(cache=True)
def _admit_waiting(req_i, unit_i, inst_i, ent, run, g, budget, bs, max_seqs):
    """Move waiting requests into the batch, in queue order, while they fit; returns the
    prompt tokens they load from the CPU tier."""
    R = run[g]
    loaded = 0
    while inst_i[II_WQ_LEN, g] > 0 and inst_i[II_NRUN, g] < max_seqs and budget > 0:
        r = inst_i[II_WQ_HEAD, g]
        if req_i[RI_PD, r] == PD_ARRIVED:
            if not _admit_transferred(req_i, inst_i, ent, R, g, r, bs):
                break
            budget -= 1
            continue
        hit, n_units, idle, n_cpu, cpu_blocks = _prefix_hit(req_i, unit_i, inst_i, ent, g, r)
        inp, gen = req_i[RI_INPUT, r], req_i[RI_GENERATED, r]
        take = min(inp + gen - hit, budget)
        new = _cdiv(hit + take, bs) - hit // bs
        if new + cpu_blocks > inst_i[II_TOTAL, g] - inst_i[II_USED, g] - idle:
            break
        u0 = req_i[RI_UNIT0, r]
        for u in range(u0, u0 + n_units):  # acquire the cached units
            e = _find(ent, inst_i, g, unit_i[U_KEY, u])
            if ent[e, EN_REF] == 0:
                _lru_remove(ent, inst_i, g, e)
                nb = ent[e, EN_BLOCKS]
                inst_i[II_EVICTABLE, g] -= nb
                inst_i[II_USED, g] += nb
            ent[e, EN_REF] += 1
        cpu_tokens = 0
        if n_cpu:  # load the CPU tier's units: GPU blocks that cache them, held by r
            for u in range(u0 + n_units, u0 + n_units + n_cpu):
                e = _insert(ent, inst_i, g, unit_i[U_KEY, u])
                ent[e, EN_REF] = 1
                ent[e, EN_BLOCKS] = unit_i[U_BLOCKS, u]
                stored = _cpu_find(ent, inst_i, g, unit_i[U_KEY, u])  # most recently used now
                owner = inst_i[II_CPU_OWNER, g]
                _queue_remove(ent, inst_i, owner, stored, II_CPU_HEAD, II_CPU_TAIL)
                _queue_append(ent, inst_i, owner, stored, II_CPU_HEAD, II_CPU_TAIL)
            cpu_tokens = hit - (unit_i[U_END, u0 + n_units - 1] if n_units else 0)
            loaded += cpu_tokens
        _allocate(inst_i, ent, g, new + cpu_blocks)
        req_i[RI_HELD, r] = n_units + n_cpu
        if not req_i[RI_SCHEDULED, r]:
            req_i[RI_SCHEDULED, r] = 1
            req_i[RI_PREFIX_HIT, r] = hit
            req_i[RI_CPU_HIT, r] = cpu_tokens
        _wq_popleft(req_i, inst_i, g)
        j = inst_i[II_NRUN, g]
        R[RUN_ID, j], R[RUN_INP, j], R[RUN_OUT, j] = r, inp, req_i[RI_OUTPUT, r]
        R[RUN_COMP, j], R[RUN_GEN, j], R[RUN_SHARED, j] = hit, gen, hit // bs
        R[RUN_TAKE, j], R[RUN_DECODE, j] = take, 0
        inst_i[II_NRUN, g] = j + 1
        budget -= take
    return loaded


@njit(cache=True)
def _admit_transferred(req_i, inst_i, ent, R, g, r, bs):
    """Admit ``r``, at the head of decode instance ``g``'s queue with its prompt's KV just
    transferred, if its blocks fit: the prompt counts as computed (no recompute, as a KV
    connector's loaded tokens) in blocks of its own, except its last token, which this
    iteration computes to sample the first output token (vLLM recomputes the last token
    of a fully loaded prompt). Its full prompt units then join ``g``'s prefix cache, as
    any prefill's do (vLLM caches the blocks a connector loaded)."""
    inp = req_i[RI_INPUT, r]
    new = _cdiv(inp, bs)
    if new > inst_i[II_TOTAL, g] - inst_i[II_USED, g]:
        return False
    _allocate(inst_i, ent, g, new)
    req_i[RI_HELD, r] = 0
    req_i[RI_PD, r] = PD_DECODE
    _wq_popleft(req_i, inst_i, g)
    j = inst_i[II_NRUN, g]
    R[RUN_ID, j], R[RUN_INP, j], R[RUN_OUT, j] = r, inp, req_i[RI_OUTPUT, r]
    R[RUN_COMP, j], R[RUN_GEN, j], R[RUN_SHARED, j] = inp - 1, 0, 0
    R[RUN_TAKE, j], R[RUN_DECODE, j] = 1, 0
    inst_i[II_NRUN, g] = j + 1
    return True


@njit(cache=True)
def _affordable_iterations(run, inst_i, g, bs, k):
    """Most decode iterations (<= k) whose new KV blocks fit in the allocatable pool."""
    avail = inst_i[II_TOTAL, g] - inst_i[II_USED, g]
    if _blocks_after(run, inst_i, g, bs, k) <= avail:
        return k
    lo, hi = 1, k
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _blocks_after(run, inst_i, g, bs, mid) <= avail:
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True)
def _batch_sums(R, n, kind, bs):
    """One pass over the first ``n`` running requests with their planned ``RUN_TAKE``:
    (new blocks, tokens taken, prefilling count, prefill tokens, attention-pair sum,
    past-token sum, decoding count, decode context sum); sets RUN_PREFILL."""
    n_new, taken, n_pf, n_dec, ctx = 0, 0, 0, 0, 0
    sum_t, pairs, past = 0.0, 0.0, 0.0
    for j in range(n):
        take, comp = R[RUN_TAKE, j], R[RUN_COMP, j]
        n_new += _blocks(comp + take, bs) - _blocks(comp, bs)
        taken += take
        is_prefill = take > 0 and R[RUN_DECODE, j] == 0
        R[RUN_PREFILL, j] = 1 if is_prefill else 0
        if is_prefill:
            n_pf += 1
            tf = float(take)
            sum_t += tf
            a, b = prefill_terms(kind, tf, float(R[RUN_INP, j] + R[RUN_GEN, j]), float(comp))
            pairs += a
            past += b
        elif take > 0:
            n_dec += 1
            ctx += comp
    return n_new, taken, n_pf, sum_t, pairs, past, n_dec, ctx


@njit(cache=True)
def _plan(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, lat_p, g, t):
    """Form the iteration of instance ``g`` starting at ``t`` (vLLM v1 order), set its end.

    The running batch is scanned once in the common case (every request's whole need fits
    the token budget): needs, the decode-only test, the segment bounds and the step
    model's sums come out of the same pass.
    """
    c = inst_i[II_CLUSTER, g]
    bs, budget, max_seqs = clu_i[CI_BS, c], clu_i[CI_BUDGET, c], clu_i[CI_MAX_SEQS, c]
    kind = clu_i[CI_LAT_KIND, c]
    R = run[g]
    n = inst_i[II_NRUN, g]
    total_need = 0
    min_gen = np.iinfo(np.int64).max
    left = np.iinfo(np.int64).max
    for j in range(n):
        gen = R[RUN_GEN, j]
        need = R[RUN_INP, j] + gen - R[RUN_COMP, j]
        total_need += need
        R[RUN_TAKE, j] = need
        # A decoding request needs exactly its next token (decided before admission).
        R[RUN_DECODE, j] = 1 if (need == 1 and gen >= 1) else 0
        min_gen = min(min_gen, gen)
        left = min(left, R[RUN_OUT, j] - gen)
    if total_need > budget:  # chunk: earlier requests first, within the budget
        before = 0
        for j in range(n):
            need = R[RUN_TAKE, j]
            R[RUN_TAKE, j] = min(need, max(budget - before, 0))
            before += need
    n_new, taken, n_pf, sum_t, pairs, past, n_dec, ctx = _batch_sums(R, n, kind, bs)
    preempted = False
    if n_new > inst_i[II_TOTAL, g] - inst_i[II_USED, g]:
        # Preempt the most recently admitted until the rest of the batch fits.
        while True:
            m = inst_i[II_NRUN, g]
            if m == 0:
                break
            cum = 0
            for j in range(m):
                comp = R[RUN_COMP, j]
                cum += _blocks(comp + R[RUN_TAKE, j], bs) - _blocks(comp, bs)
            if cum <= inst_i[II_TOTAL, g] - inst_i[II_USED, g]:
                break
            _preempt_last(req_i, req_f, unit_i, inst_i, ent, run, g, bs)
            preempted = True
        n = inst_i[II_NRUN, g]
        total_need = 0
        for j in range(n):
            total_need += R[RUN_INP, j] + R[RUN_GEN, j] - R[RUN_COMP, j]
        n_new, taken, n_pf, sum_t, pairs, past, n_dec, ctx = _batch_sums(R, n, kind, bs)

    # Decode-only batch (every need is 1) that nothing can join: plan a segment.
    if (clu_i[CI_SKIP, c] and n and not preempted and total_need == n and total_need <= budget
            and min_gen >= 1 and not _can_admit(req_i, unit_i, inst_i, ent, g, budget - n, bs, max_seqs)):
        k = min(left, SEGMENT_CHUNK)
        if k > 1:
            k = _affordable_iterations(run, inst_i, g, bs, k)
        if k > 1:
            integer_us = clu_i[CI_INTEGER_US, c]
            p = lat_p[g]  # the instance's own step-time model (a mixed fleet)
            slow = inst_f[IF_SLOW, g]  # a straggler's factor (1.0: exact, x * 1.0 == x)
            end = t
            for i in range(k):
                end = end + step_us(kind, p, integer_us, 0, 0.0, 0.0, 0.0, n,
                                    float(ctx) + float(n) * float(i)) * slow * 1e-6
                seg[g, i] = end
            inst_i[II_SEG_LEN, g] = k
            inst_i[II_SEG_USED0, g] = inst_i[II_USED, g]
            inst_f[IF_NEXT_T, g] = end
            inst_f[IF_STEP_S, g] = end - (seg[g, k - 2] if k > 1 else t)  # the segment's last iteration
            return

    _allocate(inst_i, ent, g, n_new)
    loaded = 0
    if not preempted or not n:
        loaded = _admit_waiting(req_i, unit_i, inst_i, ent, run, g, budget - taken, bs, max_seqs)
    m = inst_i[II_NRUN, g]
    if m == 0:
        inst_f[IF_NEXT_T, g] = np.inf
        return
    for j in range(n, m):  # newly admitted requests prefill their first chunk
        R[RUN_PREFILL, j] = 1
        tf = float(R[RUN_TAKE, j])
        n_pf += 1
        sum_t += tf
        a, b = prefill_terms(kind, tf, float(R[RUN_INP, j] + R[RUN_GEN, j]), float(R[RUN_COMP, j]))
        pairs += a
        past += b
    step = step_us(kind, lat_p[g], clu_i[CI_INTEGER_US, c], n_pf, sum_t, pairs, past, n_dec, float(ctx))
    step = step * inst_f[IF_SLOW, g]  # a straggler's factor on the compute (1.0: exact)
    if loaded:  # the CPU tier's KV loads over the host link before the step runs (synchronously)
        step += loaded * inst_f[IF_CPU_LOAD_US, g]
    inst_i[II_SEG_LEN, g] = 0
    inst_f[IF_NEXT_T, g] = t + step * 1e-6
    inst_f[IF_STEP_S, g] = step * 1e-6
    inst_i[II_ITERS, g] += 1


@njit(cache=True)
def _register_units(req_i, unit_i, inst_i, ent, R, g, j):
    """Cache the prompt units running request ``j`` has fully computed (full blocks only).
    A unit another request cached first stays private to this one, as in vLLM."""
    r = R[RUN_ID, j]
    u0, u1 = req_i[RI_UNIT0, r], req_i[RI_UNIT1, r]
    comp = R[RUN_COMP, j]
    for u in range(u0 + req_i[RI_HELD, r], u1):
        if unit_i[U_END, u] > comp or _find(ent, inst_i, g, unit_i[U_KEY, u]) >= 0:
            break
        e = _insert(ent, inst_i, g, unit_i[U_KEY, u])
        ent[e, EN_REF] = 1
        ent[e, EN_BLOCKS] = unit_i[U_BLOCKS, u]
        req_i[RI_HELD, r] += 1
        R[RUN_SHARED, j] += unit_i[U_BLOCKS, u]


@njit(cache=True)
def _final(req_i, req_f, r, t, outcome):
    req_i[RI_OUTCOME, r] = outcome
    req_f[RF_END, r] = t


@njit(cache=True)
def _complete(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, lat_p, log, heap_t, heap_r, g):
    """Apply the iteration or segment of ``g`` ending now, then plan the next."""
    c = inst_i[II_CLUSTER, g]
    bs = clu_i[CI_BS, c]
    t = inst_f[IF_NEXT_T, g]
    R = run[g]
    n = inst_i[II_NRUN, g]
    any_done = False
    evicting = clu_i[CI_EVICT_MAX, c] > 0 or clu_f[CF_TIMEOUT, c] < np.inf  # aborts happen (>= EVICTED)
    m = inst_i[II_SEG_LEN, g]
    if m > 0:
        inst_i[II_ITERS, g] += m
        inst_i[II_SEG_LEN, g] = 0
        grown = 0
        for j in range(n):
            comp = R[RUN_COMP, j]
            grown += _blocks(comp + m, bs) - _blocks(comp, bs)
            R[RUN_COMP, j] = comp + m
            R[RUN_GEN, j] += m
            done = R[RUN_GEN, j] >= R[RUN_OUT, j] or (evicting and req_i[RI_OUTCOME, R[RUN_ID, j]] >= EVICTED)
            R[RUN_DONE, j] = 1 if done else 0
            any_done |= done
        _allocate(inst_i, ent, g, grown)
    # vLLM's async scheduling plans iteration N+1 while N runs: a request arriving meanwhile
    # joins N+2, so each of its outputs is reported one iteration later (0: synchronous).
    lag = clu_f[CF_ASYNC_LAG, c] * inst_f[IF_STEP_S, g]
    if m <= 0:
        ftd = clu_f[CF_FT_DELAY, c]
        for j in range(n):
            R[RUN_COMP, j] += R[RUN_TAKE, j]
            emit = R[RUN_COMP, j] == R[RUN_INP, j] + R[RUN_GEN, j]
            done = False
            if emit:
                R[RUN_GEN, j] += 1
                if R[RUN_GEN, j] == 1:  # prefill done: first token
                    r = R[RUN_ID, j]
                    inst_i[II_QPREFILL, g] -= req_i[RI_PREFILL_EST, r]
                    req_i[RI_PREFILL_EST, r] = 0
                    if req_i[RI_PD, r] == PD_PREFILL:  # P/D: its KV goes to the decode instance; this
                        done = True  # token is not sent (the prefill request has max_tokens=1)
                    elif req_i[RI_OUTCOME, r] < EVICTED:  # an evicted / timed-out one's client is gone
                        req_f[RF_FIRST, r] = t + ftd + lag
                done = done or R[RUN_GEN, j] >= R[RUN_OUT, j]
            done = done or (evicting and req_i[RI_OUTCOME, R[RUN_ID, j]] >= EVICTED)
            R[RUN_DONE, j] = 1 if done else 0
            any_done |= R[RUN_DONE, j] == 1
            if R[RUN_PREFILL, j]:
                _register_units(req_i, unit_i, inst_i, ent, R, g, j)
    if any_done:
        keep = 0
        for j in range(n):
            if not R[RUN_DONE, j]:
                if keep != j:
                    for f in range(N_RUN):
                        R[f, keep] = R[f, j]
                keep += 1
                continue
            r = R[RUN_ID, j]
            if evicting and req_i[RI_OUTCOME, r] >= EVICTED:  # vLLM frees an aborted request between steps
                _release(req_i, unit_i, inst_i, ent, g, r, (R[RUN_COMP, j] + bs - 1) // bs - R[RUN_SHARED, j])
                clu_i[CI_ACTIVE, c] -= 1
                continue
            if req_i[RI_PD, r] == PD_PREFILL:
                _send_kv(req_i, req_f, inst_i, clu_i, clu_f, heap_t, heap_r, c, g, r,
                         (R[RUN_COMP, j] + bs - 1) // bs - R[RUN_SHARED, j], t)
                continue
            _release(req_i, unit_i, inst_i, ent, g, r, (R[RUN_COMP, j] + bs - 1) // bs - R[RUN_SHARED, j])
            req_i[RI_GENERATED, r] = R[RUN_GEN, j]
            fin = t + req_f[RF_FINISH_DELAY, r] + lag
            deadline = req_f[RF_ARRIVAL, r] + clu_f[CF_TIMEOUT, c]
            # The gateway learns of the finish.
            inst_i[II_INFLIGHT, g] -= 1
            inst_i[II_QPREFILL, g] -= req_i[RI_PREFILL_EST, r]
            req_i[RI_PREFILL_EST, r] = 0
            clu_i[CI_ACTIVE, c] -= 1
            if fin > deadline:  # the last token would reach a client that gave up at its deadline
                _final(req_i, req_f, r, deadline, TIMED_OUT)
                if req_f[RF_FIRST, r] > deadline:
                    req_f[RF_FIRST, r] = np.nan
            else:
                req_f[RF_FINISH, r] = fin
                _final(req_i, req_f, r, fin, FINISHED)
            if clu_i[CI_BOOKS, c] == ROUTER_LEAST_TOKENS or clu_i[CI_BOOKS, c] == ROUTER_BAILIAN_SAMPLING:
                inst_f[IF_LT_TOKENS, g] -= req_f[RF_SENT, r]
            if clu_i[CI_LOG_FINISH, c]:
                log[clu_i[CI_REQ0, c] + clu_i[CI_LOG_LEN, c]] = r
                clu_i[CI_LOG_LEN, c] += 1
        inst_i[II_NRUN, g] = keep
    _plan(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, lat_p, g, t)


@njit(cache=True)
def _enqueue(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, lat_p, g, r, t):
    """Request ``r`` becomes schedulable on ``g`` at ``t``."""
    inst_i[II_PENDING, g] -= 1
    if req_i[RI_OUTCOME, r] >= EVICTED:  # revoked / timed out on its way: never scheduled
        clu_i[CI_ACTIVE, inst_i[II_CLUSTER, g]] -= 1
        return
    _wq_append(req_i, inst_i, g, r)
    if inst_f[IF_NEXT_T, g] == np.inf:
        _plan(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, lat_p, g, t)
        return
    _cut_segment(inst_i, inst_f, seg, g, t)


@njit(cache=True)
def _cut_segment(inst_i, inst_f, seg, g, t):
    """End ``g``'s decode segment (if any) at its first iteration end >= ``t``, where the
    scheduler next looks at its queues."""
    m = inst_i[II_SEG_LEN, g]
    if m:
        k = np.searchsorted(seg[g, :m], t, side="left")
        if k + 1 < m:
            inst_i[II_SEG_LEN, g] = k + 1
            inst_f[IF_NEXT_T, g] = seg[g, k]


# ===================================================================== P/D disaggregation
@njit(cache=True)
def _send_kv(req_i, req_f, inst_i, clu_i, clu_f, heap_t, heap_r, c, g, r, private, t):
    """Disaggregated ``r`` finished its prefill on ``g`` at ``t``: its prompt's KV goes to
    its decode instance over the link (``prompt x kv_bytes_per_token / bandwidth +
    latency``), an event in the cluster's heap. Its blocks (``private`` of its own, and its
    prompt units) stay held on ``g`` until the transfer is done (vLLM's KV connector frees
    them when the decode side has read them)."""
    req_i[RI_PD_PRIVATE, r] = private
    req_i[RI_GENERATED, r] = 0  # the decode instance samples the first output token
    req_i[RI_PD, r] = PD_TRANSFER
    inst_i[II_INFLIGHT, g] -= 1  # the gateway counts it on its decode instance from now on
    xfer = (req_i[RI_INPUT, r] * clu_f[CF_XFER_US, c] * 1e-6 + clu_f[CF_XFER_LAT, c]) * clu_f[CF_XFER_SLOW, c]
    req_f[RF_TRANSFER, r] = xfer
    _heap_push(heap_t, heap_r, clu_i, c, t + xfer, r)


@njit(cache=True)
def _receive_kv(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, lat_p, log, c, r, t):
    """``r``'s KV transfer is done at ``t``: the prefill instance frees its blocks, and
    ``r`` joins its decode instance's queue (admitted by :func:`_admit_transferred`). A
    transfer the link lost (an outage while it was in flight, faults) is vLLM's KV load
    failure: the decode instance recomputes the prompt (``kv_load_failure_policy:
    recompute``), or the request fails (``fail``, vLLM's default): outcome CRASHED."""
    i0 = clu_i[CI_INST0, c]
    p = i0 + req_i[RI_INSTANCE, r]
    _release(req_i, unit_i, inst_i, ent, p, r, req_i[RI_PD_PRIVATE, r])
    req_i[RI_PD_PRIVATE, r] = 0
    # Freed blocks may let an idle prefill instance admit what waits (a prefill instance
    # never runs a decode segment: its requests leave at their first token).
    if inst_f[IF_NEXT_T, p] == np.inf and inst_i[II_WQ_LEN, p]:
        _plan(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, lat_p, p, t)
    d = i0 + req_i[RI_DECODE, r]
    req_i[RI_PD, r] = PD_ARRIVED
    # lost on the link: an outage now, or one that ended after it was sent
    if clu_i[CI_LINK_DOWN, c] or clu_f[CF_LINK_UP_AT, c] > t - req_f[RF_TRANSFER, r]:
        if not clu_i[CI_KV_RECOMPUTE, c]:
            inst_i[II_INFLIGHT, d] -= 1
            clu_i[CI_ACTIVE, c] -= 1
            _final(req_i, req_f, r, t, CRASHED)
            router = clu_i[CI_BOOKS, c]
            if router == ROUTER_LEAST_TOKENS or router == ROUTER_BAILIAN_SAMPLING:
                inst_f[IF_LT_TOKENS, d] -= req_f[RF_SENT, r]
            if clu_i[CI_LOG_FINISH, c]:
                log[clu_i[CI_REQ0, c] + clu_i[CI_LOG_LEN, c]] = r
                clu_i[CI_LOG_LEN, c] += 1
            return
        req_i[RI_PD, r] = PD_DECODE  # runs whole on the decode instance: its prefill recomputed there
    inst_i[II_PENDING, d] += 1  # counted off by _enqueue
    _enqueue(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, lat_p, d, r, t)


@njit(cache=True)
def _pool_mean(per, n, n_prefill):
    """Saturation of a P/D cluster from per-instance values: the larger of the prefill
    pool's mean and the decode pool's (llm-d: the most saturated pool gates flow control)."""
    return max(pairwise_sum(per, 0, n_prefill) / n_prefill,
               pairwise_sum(per, n_prefill, n - n_prefill) / (n - n_prefill))


@njit(cache=True)
def _disaggregate(req_i, inst_i, clu_i, clu_f, c, r, uncached):
    """The compiled P/D decision for ``r`` (``uncached``: its prompt tokens not cached on
    the decode instance the router chose; baselines/pd.py)."""
    kind = clu_i[CI_PD, c]
    if kind == PD_DECIDE_ALWAYS:
        return True
    if kind == PD_DECIDE_LLMD:  # llm-d's prefix-based decider: uncached >= threshold (0: always)
        return clu_f[CF_PD0, c] <= 0 or uncached >= clu_f[CF_PD0, c]
    # PD_DECIDE_DYNAMO: uncached > max_local_prefill_length and prefill queue < max_prefill_queue_size
    i0 = clu_i[CI_INST0, c]
    queue = 0
    for g in range(i0, i0 + clu_i[CI_NPREFILL, c]):
        queue += inst_i[II_WQ_LEN, g] + inst_i[II_PENDING, g]
    return uncached > clu_f[CF_PD0, c] and queue < clu_f[CF_PD1, c]


# ===================================================================== gateway
@njit(cache=True)
def scrape(run, inst_i, inst_f, seg, clu_i, clu_f, c, t):
    """Refresh cluster ``c``'s scraped metrics and the utilization saturation detector:
    ``mean_i max(waiting_i / 5, kv_util_i / 0.8)`` over the serving instances (all are scraped)."""
    i0, i1 = clu_i[CI_INST0, c], clu_i[CI_INST1, c]
    n = clu_i[CI_NSERVE, c]
    bs = clu_i[CI_BS, c]
    per = np.empty(n)
    for g in range(i0, i1):
        if inst_i[II_NOSCRAPE, g] or inst_i[II_DOWN, g]:  # its scrape fails (faults): the metrics age
            if g - i0 < n:
                per[g - i0] = max(inst_i[II_SCR_WAITING, g] / clu_f[CF_SAT_QUEUE, c],
                                  inst_f[IF_SCR_KV, g] / clu_f[CF_SAT_KV, c])
            continue
        w = inst_i[II_WQ_LEN, g] + inst_i[II_PENDING, g]
        inst_i[II_SCR_WAITING, g] = w
        inst_i[II_SCR_RUNNING, g] = inst_i[II_NRUN, g]
        kv = kv_used_at(run, inst_i, seg, g, bs, t) / inst_i[II_TOTAL, g]
        inst_f[IF_SCR_KV, g] = kv
        inst_f[IF_SCRAPE_T, g] = t
        if g - i0 < n:
            per[g - i0] = max(w / clu_f[CF_SAT_QUEUE, c], kv / clu_f[CF_SAT_KV, c])
    if clu_i[CI_NPREFILL, c]:
        clu_f[CF_SATURATION, c] = _pool_mean(per, n, clu_i[CI_NPREFILL, c])
    else:
        clu_f[CF_SATURATION, c] = pairwise_sum(per, 0, n) / n


@njit(cache=True)
def saturation_now(inst_i, inst_f, clu_i, clu_f, c):
    """The saturation detector's value at the cluster's current time.

    Utilization: the value of the last scrape, or 1.0 once those metrics are older than
    the staleness threshold (all instances are scraped together; with scrapes at every
    event metrics are always fresh). Concurrency: the gateway's in-flight requests or
    uncomputed prompt tokens over the instances' capacity.
    """
    kind = clu_i[CI_SAT_KIND, c]
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n = i1 - i0
    if kind == SAT_UTILIZATION:
        if clu_i[CI_FAULTS, c] or clu_i[CI_STALE_POLICY, c] == STALE_IGNORE:
            n_prefill = clu_i[CI_NPREFILL, c]
            if n_prefill:  # the most saturated pool
                return max(_utilization_of(inst_i, inst_f, clu_i, clu_f, c, i0, i0 + n_prefill),
                           _utilization_of(inst_i, inst_f, clu_i, clu_f, c, i0 + n_prefill, i1))
            return _utilization_of(inst_i, inst_f, clu_i, clu_f, c, i0, i1)
        if clu_f[CF_SCRAPE_INT, c] > 0 and clu_f[CF_NOW, c] - inst_f[IF_SCRAPE_T, i0] > clu_f[CF_SAT_STALE, c]:
            return 1.0
        return clu_f[CF_SATURATION, c]
    max_req, max_tok = clu_f[CF_SAT_MAX_REQ, c], clu_f[CF_SAT_MAX_TOK, c]
    n_prefill = clu_i[CI_NPREFILL, c]
    if clu_i[CI_NDOWN, c] and not n_prefill:  # a crashed instance is no endpoint: the capacity of the others
        per = np.empty(n)
        k = 0
        for g in range(i0, i1):
            if not inst_i[II_DOWN, g]:
                inflight, queued = inst_i[II_INFLIGHT, g] / max_req, inst_i[II_QPREFILL, g] / max_tok
                per[k] = inflight if kind == SAT_REQUESTS else queued if kind == SAT_TOKENS else max(inflight, queued)
                k += 1
        return pairwise_sum(per, 0, k) / k if k else 1.0
    if n_prefill:
        per = np.empty(n)
        for g in range(i0, i1):
            inflight, queued = inst_i[II_INFLIGHT, g] / max_req, inst_i[II_QPREFILL, g] / max_tok
            per[g - i0] = inflight if kind == SAT_REQUESTS else queued if kind == SAT_TOKENS else max(inflight, queued)
        return _pool_mean(per, n, n_prefill)
    if kind == SAT_REQUESTS:
        return inst_i[II_INFLIGHT, i0:i1].sum() / (n * max_req)
    if kind == SAT_TOKENS:
        return inst_i[II_QPREFILL, i0:i1].sum() / (n * max_tok)
    per = np.empty(n)
    for g in range(i0, i1):
        per[g - i0] = max(inst_i[II_INFLIGHT, g] / max_req, inst_i[II_QPREFILL, g] / max_tok)
    return pairwise_sum(per, 0, n) / n


@njit(cache=True)
def _stale(inst_i, inst_f, clu_i, clu_f, c, g):
    """Whether instance ``g``'s metrics are strictly older than the staleness threshold
    (a scrape interval of 0 refreshes them at every event, unless its scrapes fail)."""
    if clu_f[CF_SCRAPE_INT, c] <= 0 and not (inst_i[II_NOSCRAPE, g] or inst_i[II_DOWN, g]):
        return False
    return clu_f[CF_NOW, c] - inst_f[IF_SCRAPE_T, g] > clu_f[CF_SAT_STALE, c]


@njit(cache=True)
def _utilization_of(inst_i, inst_f, clu_i, clu_f, c, g0, g1):
    """llm-d's utilization detector over the endpoints among instances ``g0:g1`` (a crashed
    instance is none), metric age per instance: a stale endpoint scores 1.0
    (``stalenessPolicy: saturated``) or leaves the average (``ignore``; all stale: 0.0); no
    endpoint: 1.0. With every endpoint fresh this is the scrape's value, bit for bit."""
    per = np.empty(g1 - g0)
    k = endpoints = 0
    ignore = clu_i[CI_STALE_POLICY, c] == STALE_IGNORE
    for g in range(g0, g1):
        if inst_i[II_DOWN, g]:
            continue
        endpoints += 1
        if _stale(inst_i, inst_f, clu_i, clu_f, c, g):
            if not ignore:
                per[k] = 1.0
                k += 1
            continue
        per[k] = max(inst_i[II_SCR_WAITING, g] / clu_f[CF_SAT_QUEUE, c], inst_f[IF_SCR_KV, g] / clu_f[CF_SAT_KV, c])
        k += 1
    if endpoints == 0:
        return 1.0
    if k == 0:
        return 0.0
    return pairwise_sum(per, 0, k) / k


@njit(cache=True)
def _next_stale(inst_i, inst_f, clu_i, clu_f, c, t):
    """The first time after ``t`` at which an endpoint's metrics go stale (inf: none)."""
    i0 = clu_i[CI_INST0, c]
    out = np.inf
    for g in range(i0, i0 + clu_i[CI_NSERVE, c]):
        at = inst_f[IF_SCRAPE_T, g] + clu_f[CF_SAT_STALE, c]
        if at > t and not inst_i[II_DOWN, g]:
            out = min(out, at)
    return out


@njit(cache=True)
def _heap_less(heap_t, heap_r, a, b):
    return heap_t[a] < heap_t[b] or (heap_t[a] == heap_t[b] and heap_r[a] < heap_r[b])


@njit(cache=True)
def _heap_swap(heap_t, heap_r, a, b):
    heap_t[a], heap_t[b] = heap_t[b], heap_t[a]
    heap_r[a], heap_r[b] = heap_r[b], heap_r[a]


@njit(cache=True)
def _heap_push(heap_t, heap_r, clu_i, c, t, r):
    base = clu_i[CI_REQ0, c]
    k = clu_i[CI_HEAP_LEN, c]
    clu_i[CI_HEAP_LEN, c] = k + 1
    heap_t[base + k], heap_r[base + k] = t, r
    while k > 0:
        parent = (k - 1) // 2
        if not _heap_less(heap_t, heap_r, base + k, base + parent):
            break
        _heap_swap(heap_t, heap_r, base + k, base + parent)
        k = parent


@njit(cache=True)
def _heap_pop(heap_t, heap_r, clu_i, c):
    base = clu_i[CI_REQ0, c]
    n = clu_i[CI_HEAP_LEN, c] - 1
    r = heap_r[base]
    clu_i[CI_HEAP_LEN, c] = n
    if n > 0:
        heap_t[base], heap_r[base] = heap_t[base + n], heap_r[base + n]
        k = 0
        while True:
            a, b = 2 * k + 1, 2 * k + 2
            best = k
            if a < n and _heap_less(heap_t, heap_r, base + a, base + best):
                best = a
            if b < n and _heap_less(heap_t, heap_r, base + b, base + best):
                best = b
            if best == k:
                break
            _heap_swap(heap_t, heap_r, base + k, base + best)
            k = best
    return r


@njit(cache=True)
def _prefill_time_s(kind, p, integer_us, budget, tokens, prompt_len, n_decode, context):
    """baselines/routing/predict.prefill_time_s on one instance: ``tokens`` prefilled in
    chunks of the token budget left by ``n_decode`` running decodes over ``context``."""
    if tokens <= 0:
        return 0.0
    chunk = max(1, budget - n_decode)
    full, rest = tokens // chunk, tokens % chunk
    us = 0.0
    if full:
        a, b = prefill_terms(kind, float(chunk), float(prompt_len), max(float(prompt_len) - float(chunk), 0.0))
        us += full * step_us(kind, p, integer_us, 1, float(chunk), a, b, n_decode, float(context))
    if rest:
        a, b = prefill_terms(kind, float(rest), float(prompt_len), max(float(prompt_len) - float(rest), 0.0))
        us += step_us(kind, p, integer_us, 1, float(rest), a, b, n_decode, float(context))
    return us / 1e6


@njit(cache=True)
def _predicted_latency(req_i, inst_i, inst_f, unit_i, ent, clu_i, lat_p, c, r):
    """(TTFT, TPOT) predicted for request ``r`` on each instance with the cluster's
    step-time model, from the router's signals (baselines/routing/predict.ttft_s, tpot_s)."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    kind, integer_us = clu_i[CI_LAT_KIND, c], clu_i[CI_INTEGER_US, c]
    bs, budget, inp = clu_i[CI_BS, c], clu_i[CI_BUDGET, c], req_i[RI_INPUT, r]
    ttft, tpot = np.empty(i1 - i0), np.empty(i1 - i0)
    for i in range(i1 - i0):
        g = i0 + i
        p = lat_p[g]
        kv_tokens = inst_f[IF_SCR_KV, g] * inst_i[II_TOTAL, g] * bs  # the scraped decode context
        uncached = max(0, inp - cached_tokens(req_i, unit_i, inst_i, ent, g, r))
        ttft[i] = _prefill_time_s(kind, p, integer_us, budget, inst_i[II_QPREFILL, g] + uncached, inp,
                                  inst_i[II_SCR_RUNNING, g], int(kv_tokens))
        tpot[i] = step_us(kind, p, integer_us, 0, 0.0, 0.0, 0.0, inst_i[II_INFLIGHT, g] + 1,
                          float(int(kv_tokens + inp))) / 1e6
    return ttft, tpot


@njit(cache=True)
def _route_preble(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, lat_p, win_t, c, r):
    """Preble's E2 (baselines/routing/preble.py): rebalance to the least loaded, exploit
    the longest cached prefix above the hit threshold, else explore the lowest predicted
    prefill + decode-load cost. Its recent TPOT predictions (for the median estimate) are
    a ring in ``win_t`` over the cluster's request slots, one per routed request
    (:func:`_record_preble`)."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n = i1 - i0
    kind, integer_us = clu_i[CI_LAT_KIND, c], clu_i[CI_INTEGER_US, c]
    bs, budget, inp = clu_i[CI_BS, c], clu_i[CI_BUDGET, c], req_i[RI_INPUT, r]
    base, window = clu_i[CI_REQ0, c], int(clu_f[CF_R2, c])
    load = inst_i[II_INFLIGHT, i0:i1]
    if load.max() >= clu_f[CF_R3, c] * max(load.min(), 1):
        choice = np.argmin(load)
    else:
        stored = min(clu_i[CI_WIN_LEN, c], window)
        tpot = np.median(win_t[base:base + stored]) if stored else clu_f[CF_R1, c]
        hits = np.empty(n, np.int64)
        for i in range(n):
            hits[i] = cached_tokens(req_i, unit_i, inst_i, ent, i0 + i, r)
        best = hits.max()
        exploit = (best / inp if inp > 0 else 0.0) > clu_f[CF_R0, c]
        cost = np.empty(n)
        for i in range(n):
            g = i0 + i
            kv_tokens = inst_f[IF_SCR_KV, g] * inst_i[II_TOTAL, g] * bs
            decode = inst_i[II_INFLIGHT, g] * clu_f[CF_EXP_OUT, c] * tpot
            cost[i] = _prefill_time_s(kind, lat_p[g], integer_us, budget, max(0, inp - hits[i]), inp,
                                      inst_i[II_SCR_RUNNING, g], int(kv_tokens)) + decode
            if exploit and hits[i] != best:
                cost[i] = np.inf
        choice = np.argmin(cost)
    return choice


@njit(cache=True)
def _record_preble(req_i, inst_i, inst_f, clu_i, clu_f, lat_p, win_t, c, r, i):
    """Preble's TPOT window after request ``r`` went to local instance ``i``: the TPOT it
    predicts there, from the state before the dispatch."""
    g = clu_i[CI_INST0, c] + i
    base, window = clu_i[CI_REQ0, c], int(clu_f[CF_R2, c])
    context = inst_f[IF_SCR_KV, g] * inst_i[II_TOTAL, g] * clu_i[CI_BS, c] + req_i[RI_INPUT, r]
    win_t[base + clu_i[CI_WIN_LEN, c] % window] = step_us(clu_i[CI_LAT_KIND, c], lat_p[g], clu_i[CI_INTEGER_US, c],
                                                          0, 0.0, 0.0, 0.0, inst_i[II_INFLIGHT, g] + 1,
                                                          float(int(context))) / 1e6
    clu_i[CI_WIN_LEN, c] += 1


@njit(cache=True)
def _route(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p, rng, c,
           r, kind):
    """Compiled router ``kind``'s choice (local instance index) for request ``r``. It changes
    no state but ``rng``'s (its draws); what the router keeps at decision time is recorded
    by :func:`_record_route`, whoever chose."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n_inst = i1 - i0
    if kind == ROUTER_ROUND_ROBIN:
        return clu_i[CI_RR_NEXT, c] % n_inst
    if kind == ROUTER_RANDOM:
        return rng.integers(0, n_inst)
    if kind == ROUTER_JSQ:
        return _argmin_random(inst_i[II_SCR_RUNNING, i0:i1] + inst_i[II_SCR_WAITING, i0:i1], rng)
    if kind == ROUTER_VLLM_DP:
        return _argmin_random(clu_f[CF_R0, c] * inst_i[II_SCR_WAITING, i0:i1] + inst_i[II_SCR_RUNNING, i0:i1], rng)
    if kind == ROUTER_LEAST_TOKENS:  # lowest index among the minima
        return np.argmin(inst_f[IF_LT_TOKENS, i0:i1])
    if kind == ROUTER_LMETRIC or kind == ROUTER_LMETRIC_WEIGHTED:
        return _route_lmetric(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, win_t, win_c, ccount, c, r,
                              kind == ROUTER_LMETRIC_WEIGHTED)
    if kind == ROUTER_BAILIAN or kind == ROUTER_AIBRIX:
        return _route_cache_aware(req_i, inst_i, unit_i, ent, clu_i, clu_f, rng, c, r, kind)
    if kind == ROUTER_DYNAMO:
        return _route_dynamo(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, rng, c, r)
    if kind == ROUTER_SGLANG:
        return _route_sglang(req_i, inst_i, unit_i, ent, clu_i, clu_f, c, r)
    if kind == ROUTER_BAILIAN_SAMPLING:
        return _route_bailian_sampling(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, rng, c, r)
    if kind == ROUTER_PREBLE:
        return _route_preble(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, lat_p, win_t, c, r)
    if kind == ROUTER_PREDICTED_LATENCY or kind == ROUTER_POLYSERVE:
        ttft, tpot = _predicted_latency(req_i, inst_i, inst_f, unit_i, ent, clu_i, lat_p, c, r)
        if kind == ROUTER_PREDICTED_LATENCY:  # min predicted TTFT, lowest-index ties
            return np.argmin(ttft)
        # PolyServe: pack onto the largest predicted TPOT among instances meeting both SLOs
        best, pick = -np.inf, -1
        for i in range(n_inst):
            if ttft[i] <= clu_f[CF_R0, c] and tpot[i] <= clu_f[CF_R1, c] and tpot[i] > best:
                best, pick = tpot[i], i
        return pick if pick >= 0 else rng.integers(0, n_inst)
    # ROUTER_LLMD: weighted scorers (queue, KV utilization, approximate prefix), max wins
    q_min = q_max = float(inst_i[II_SCR_WAITING, i0])
    for g in range(i0 + 1, i1):
        q = float(inst_i[II_SCR_WAITING, g])
        q_min, q_max = min(q_min, q), max(q_max, q)
    span = q_max - q_min
    n_keys = req_i[RI_BK1, r] - req_i[RI_BK0, r]
    neg = np.empty(n_inst)
    for i in range(n_inst):
        g = i0 + i
        queue = 1.0 if span == 0 else (q_max - float(inst_i[II_SCR_WAITING, g])) / span
        kv = 1.0 - inst_f[IF_SCR_KV, g]
        prefix = _ix_leading(req_i, inst_i, bkey, ix, g, r) / n_keys if n_keys else 0.0
        total = (clu_f[CF_R0, c] * min(max(queue, 0.0), 1.0) + clu_f[CF_R1, c] * min(max(kv, 0.0), 1.0)
                 + clu_f[CF_R2, c] * min(max(prefix, 0.0), 1.0))
        neg[i] = -total
    return _argmin_random(neg, rng)


@njit(cache=True)
def _route_lmetric(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, win_t, win_c, ccount, c, r, weighted):
    """LMetric: min ``(queued prefill + uncached tokens) x (in flight + 1)``, lowest index on
    ties; with the hotspot detector, a request of a hotspot class avoids the instances
    that cache its prefix (baselines/routing/lmetric.py, hotspot.py). ``weighted``
    (ROUTER_LMETRIC_WEIGHTED, Gateway-v0): each score times its instance's ``IF_ROUTE_W``."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n = i1 - i0
    inp = req_i[RI_INPUT, r]
    hits = np.empty(n, np.int64)
    score = np.empty(n)
    for i in range(n):
        g = i0 + i
        hits[i] = cached_tokens(req_i, unit_i, inst_i, ent, g, r)
        score[i] = float(inst_i[II_QPREFILL, g] + max(0, inp - hits[i])) * (inst_i[II_INFLIGHT, g] + 1)
        if weighted:
            score[i] *= inst_f[IF_ROUTE_W, g]
    if clu_f[CF_R0, c] > 0 and _hotspot(req_i, clu_i, clu_f, win_t, win_c, ccount, c, r, hits):
        for i in range(n):
            if hits[i] > 0:
                score[i] = np.inf
    return np.argmin(score)


@njit(cache=True)
def _route_cache_aware(req_i, inst_i, unit_i, ent, clu_i, clu_f, rng, c, r, kind):
    """Bailian (``lam (1 - hit) + (1 - lam) norm(in flight)``, lowest index on ties) and
    AIBrix (least-request when imbalanced, else the best prefix share among instances
    loaded at most mean + std_factor x std); baselines/routing/bailian.py, aibrix.py."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n = i1 - i0
    inp = req_i[RI_INPUT, r]
    load = np.empty(n)
    for i in range(n):
        load[i] = float(inst_i[II_INFLIGHT, i0 + i])
    lo, hi = load.min(), load.max()
    if kind == ROUTER_AIBRIX and hi - lo > clu_f[CF_R0, c]:
        return _argmin_random(load, rng)
    share = np.zeros(n)
    if inp > 0:
        for i in range(n):
            share[i] = cached_tokens(req_i, unit_i, inst_i, ent, i0 + i, r) / inp
    if kind == ROUTER_BAILIAN:
        lam = clu_f[CF_R0, c]
        score = np.empty(n)
        for i in range(n):
            norm = 0.0 if hi - lo == 0 else (load[i] - lo) / (hi - lo)
            score[i] = lam * (1.0 - share[i]) + (1.0 - lam) * norm
        return np.argmin(score)
    # AIBrix: numpy's mean and (two-pass) standard deviation, in its summation order
    mean = pairwise_sum(load, 0, n) / n
    dev = np.empty(n)
    for i in range(n):
        dev[i] = (load[i] - mean) * (load[i] - mean)
    limit = mean + clu_f[CF_R1, c] * np.sqrt(pairwise_sum(dev, 0, n) / n)
    best = -1
    for i in range(n):
        if load[i] <= limit and share[i] > 0:
            if best < 0 or share[i] > share[best] or (share[i] == share[best] and load[i] < load[best]):
                best = i
    if best < 0:
        return _argmin_random(load, rng)
    return best


@njit(cache=True)
def _route_dynamo(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, rng, c, r):
    """Dynamo: ``cost = w x prefill_blocks + decode_blocks``; temperature 0: the argmin,
    random ties; temperature T > 0: drawn with probability ``softmax(-norm(cost) / T)`` as
    ``rng.choice(n, p=p / p.sum())`` does (baselines/routing/dynamo.py)."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n = i1 - i0
    bs = clu_i[CI_BS, c]
    inp = req_i[RI_INPUT, r]
    cost = np.empty(n)
    for i in range(n):
        g = i0 + i
        hit = cached_tokens(req_i, unit_i, inst_i, ent, g, r)
        prefill = (inst_i[II_QPREFILL, g] + inp - hit) / bs
        decode = inst_f[IF_SCR_KV, g] * inst_i[II_TOTAL, g] + (_cdiv(inp, bs) - hit // bs)
        cost[i] = clu_f[CF_R0, c] * prefill + decode
    temperature = clu_f[CF_R1, c]
    if temperature == 0:
        return _argmin_random(cost, rng)
    logits = -_range_normalize(cost, 0.0) / temperature
    p = np.exp(logits - logits.max())
    cdf = np.cumsum(p / pairwise_sum(p, 0, n))
    cdf = cdf / cdf[-1]
    return np.searchsorted(cdf, rng.random(), side="right")


@njit(cache=True)
def _route_sglang(req_i, inst_i, unit_i, ent, clu_i, clu_f, c, r):
    """SGLang cache-aware: least load when imbalanced, else the deepest precise match if its
    rate beats the threshold, else the smallest router-side cache tree; lowest-index ties
    (baselines/routing/sglang.py; the tree is the block-key index ``ix``)."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n = i1 - i0
    lo = hi = inst_i[II_INFLIGHT, i0]
    for g in range(i0 + 1, i1):
        lo, hi = min(lo, inst_i[II_INFLIGHT, g]), max(hi, inst_i[II_INFLIGHT, g])
    if hi - lo > clu_f[CF_R0, c] and hi > clu_f[CF_R1, c] * lo:
        return np.argmin(inst_i[II_INFLIGHT, i0:i1])
    inp = req_i[RI_INPUT, r]
    hits = np.empty(n, np.int64)
    best_rate = 0.0
    for i in range(n):
        hits[i] = cached_tokens(req_i, unit_i, inst_i, ent, i0 + i, r)
        best_rate = max(best_rate, hits[i] / inp if inp > 0 else 0.0)
    if best_rate > clu_f[CF_R2, c]:
        return np.argmax(hits)
    return np.argmin(inst_i[II_IX_COUNT, i0:i1])


@njit(cache=True)
def _range_normalize(x, equal):
    lo, hi = x.min(), x.max()
    if hi - lo == 0:
        return np.full(len(x), equal)
    return (x - lo) / (hi - lo)


@njit(cache=True)
def _route_bailian_sampling(req_i, inst_i, inst_f, unit_i, ent, clu_i, clu_f, rng, c, r):
    """Bailian weighted sampling: ``w = a norm(hit) + b (1 - norm(in flight)) + c (1 -
    norm(in-flight tokens))``, drawn as ``rng.choice(n, p=w / sum(w))`` does
    (baselines/routing/bailian.py)."""
    i0 = clu_i[CI_INST0, c]
    i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
    n = i1 - i0
    inp = req_i[RI_INPUT, r]
    hit = np.zeros(n)
    busy = np.empty(n)
    for i in range(n):
        g = i0 + i
        if inp > 0:
            hit[i] = cached_tokens(req_i, unit_i, inst_i, ent, g, r) / inp
        busy[i] = float(inst_i[II_INFLIGHT, g])
    w = (clu_f[CF_R0, c] * _range_normalize(hit, 1.0) + clu_f[CF_R1, c] * (1.0 - _range_normalize(busy, 0.0))
         + clu_f[CF_R2, c] * (1.0 - _range_normalize(inst_f[IF_LT_TOKENS, i0:i1].copy(), 0.0)))
    total = pairwise_sum(w, 0, n)
    if total <= 0:
        return rng.integers(0, n)
    cdf = np.cumsum(w / total)
    cdf = cdf / cdf[-1]
    return np.searchsorted(cdf, rng.random(), side="right")


@njit(cache=True)
def _window_expire(clu_i, clu_f, win_t, win_c, ccount, c):
    """The detector's window drops the arrivals older than its length (before a choice:
    no choice changes, the choice then needs no copy of the counts, see :func:`_hotspot`)."""
    base, cap = clu_i[CI_REQ0, c], clu_i[CI_WIN_CAP, c]
    start = clu_f[CF_NOW, c] - clu_f[CF_R1, c]
    while clu_i[CI_WIN_LEN, c] and win_t[base + clu_i[CI_WIN_HEAD, c]] < start:
        old = win_c[base + clu_i[CI_WIN_HEAD, c]]
        if old >= 0:
            ccount[base + old] -= 1
        clu_i[CI_WIN_HEAD, c] = (clu_i[CI_WIN_HEAD, c] + 1) % cap
        clu_i[CI_WIN_LEN, c] -= 1


@njit(cache=True)
def _hotspot(req_i, clu_i, clu_f, win_t, win_c, ccount, c, r, hits):
    """The detector's ``excluded``, changing no state: whether ``r``'s class is a hotspot now
    (its share ``x`` over the window before it exceeds the share of instances caching it,
    ``x (n - m) > m (1 - x)``, and it is a top class). Arrivals that aged out of the window
    since it was last updated are left out on a copy of the class counts."""
    base, cap, n_classes = clu_i[CI_REQ0, c], clu_i[CI_WIN_CAP, c], clu_i[CI_NCLASSES, c]
    start = clu_f[CF_NOW, c] - clu_f[CF_R1, c]
    head, length = clu_i[CI_WIN_HEAD, c], clu_i[CI_WIN_LEN, c]
    counts, off = ccount, base
    if length and win_t[base + head] < start:
        counts, off = ccount[base:base + n_classes].copy(), 0
        while length and win_t[base + head] < start:
            if win_c[base + head] >= 0:
                counts[win_c[base + head]] -= 1
            head = (head + 1) % cap
            length -= 1
    cls = req_i[RI_CLASS, r]
    if cls < 0 or length < clu_f[CF_R3, c]:
        return False
    x = counts[off + cls] / length
    n = len(hits)
    m = 0
    for i in range(n):
        if hits[i] > 0:
            m += 1
    if 0 < m < n and x * (n - m) > m * (1 - x):
        return counts[off + cls] >= _kth_largest_count(counts, off, n_classes, int(clu_f[CF_R2, c]))
    return False


@njit(cache=True)
def _window_append(req_i, clu_i, clu_f, win_t, win_c, ccount, c, r):
    """The detector's window after request ``r`` was routed (wherever it went): its arrival
    enters the window."""
    _window_expire(clu_i, clu_f, win_t, win_c, ccount, c)
    base, cap = clu_i[CI_REQ0, c], clu_i[CI_WIN_CAP, c]
    cls = req_i[RI_CLASS, r]
    if cls >= 0:
        ccount[base + cls] += 1
    length = clu_i[CI_WIN_LEN, c]
    tail = (clu_i[CI_WIN_HEAD, c] + length) % cap
    win_t[base + tail], win_c[base + tail] = clu_f[CF_NOW, c], cls
    clu_i[CI_WIN_LEN, c] = length + 1


@njit(cache=True)
def _record_route(req_i, inst_i, inst_f, clu_i, clu_f, lat_p, win_t, win_c, ccount, kind, c, r, i):
    """What router ``kind`` keeps at decision time, after request ``r`` was routed to local
    instance ``i`` (of the instances routing sees), as if it had chosen ``i`` itself:
    round-robin's pointer, LMetric's detector window, Preble's TPOT window. Called on every
    routing decision, the router's own or one taken outside (:func:`dispatch_decided`)."""
    if kind == ROUTER_ROUND_ROBIN:
        clu_i[CI_RR_NEXT, c] = i + 1
    elif kind == ROUTER_LMETRIC or kind == ROUTER_LMETRIC_WEIGHTED:
        if clu_f[CF_R0, c] > 0:
            _window_append(req_i, clu_i, clu_f, win_t, win_c, ccount, c, r)
    elif kind == ROUTER_PREBLE:
        _record_preble(req_i, inst_i, inst_f, clu_i, clu_f, lat_p, win_t, c, r, i)


@njit(cache=True)
def _kth_largest_count(ccount, base, n_classes, k):
    """``heapq.nlargest(k, counts)[-1]`` over the classes present in the window."""
    top = np.zeros(k, np.int64)  # descending; 0 = empty
    found = 0
    for j in range(n_classes):
        v = ccount[base + j]
        if v <= 0:
            continue
        found += 1
        pos = min(found, k) - 1
        if found > k and v <= top[k - 1]:
            continue
        while pos > 0 and top[pos - 1] < v:
            top[pos] = top[pos - 1]
            pos -= 1
        top[pos] = v
    return top[min(found, k) - 1] if found else 0


@njit(cache=True)
def _ix_leading(req_i, inst_i, bkey, ix, g, r):
    """Leading block keys of ``r`` in instance ``g``'s approximate prefix index."""
    e0 = inst_i[II_IX0, g]
    n = 0
    for p in range(req_i[RI_BK0, r], req_i[RI_BK1, r]):
        if not ix[IX_PRESENT, e0 + bkey[p]]:
            break
        n += 1
    return n


@njit(cache=True)
def _ix_unlink(inst_i, ix, g, e):
    p, n = ix[IX_PREV, e], ix[IX_NEXT, e]
    if p >= 0:
        ix[IX_NEXT, p] = n
    else:
        inst_i[II_IX_HEAD, g] = n
    if n >= 0:
        ix[IX_PREV, n] = p
    else:
        inst_i[II_IX_TAIL, g] = p


@njit(cache=True)
def _ix_insert(req_i, inst_i, clu_f, bkey, ix, c, g, r):
    """Record that ``r``'s blocks were sent to ``g``: touched tail first, so the leading
    blocks are the most recent (a prefix match needs them), then the least recently sent
    beyond the capacity are forgotten."""
    e0 = inst_i[II_IX0, g]
    for p in range(req_i[RI_BK1, r] - 1, req_i[RI_BK0, r] - 1, -1):
        e = e0 + bkey[p]
        if ix[IX_PRESENT, e]:
            _ix_unlink(inst_i, ix, g, e)
        else:
            ix[IX_PRESENT, e] = 1
            inst_i[II_IX_COUNT, g] += 1
        tail = inst_i[II_IX_TAIL, g]
        ix[IX_PREV, e], ix[IX_NEXT, e] = tail, -1
        if tail >= 0:
            ix[IX_NEXT, tail] = e
        else:
            inst_i[II_IX_HEAD, g] = e
        inst_i[II_IX_TAIL, g] = e
    cap = clu_f[CF_R3, c]
    while inst_i[II_IX_COUNT, g] > cap:
        e = inst_i[II_IX_HEAD, g]
        _ix_unlink(inst_i, ix, g, e)
        ix[IX_PRESENT, e] = 0
        inst_i[II_IX_COUNT, g] -= 1


@njit(cache=True)
def dispatch_to(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, i):
    """Send request ``r`` to local instance ``i`` now; returns False if it was dropped (or
    lost: every instance is down). A crashed instance is no endpoint: a pick of it goes to
    the serving instance with the fewest requests in flight (lowest index on ties)."""
    now = clu_f[CF_NOW, c]
    if clu_i[CI_NDOWN, c] and inst_i[II_DOWN, clu_i[CI_INST0, c] + i]:
        i = _up_instance(inst_i, clu_i, c)
        if i < 0:
            clu_i[CI_ACTIVE, c] -= 1
            req_f[RF_DISPATCH, r] = now
            _final(req_i, req_f, r, now, CRASHED)
            return False
    g = clu_i[CI_INST0, c] + i
    req_f[RF_DISPATCH, r] = now
    req_i[RI_INSTANCE, r] = i
    if not fits(req_i, inst_i, clu_i, c, g, r):
        clu_i[CI_ACTIVE, c] -= 1
        _final(req_i, req_f, r, now, DROPPED)
        return False
    est = req_i[RI_INPUT, r] - cached_tokens(req_i, unit_i, inst_i, ent, g, r)
    req_i[RI_PREFILL_EST, r] = est
    inst_i[II_QPREFILL, g] += est
    inst_i[II_INFLIGHT, g] += 1
    if clu_i[CI_BOOKS, c] == ROUTER_LEAST_TOKENS or clu_i[CI_BOOKS, c] == ROUTER_BAILIAN_SAMPLING:
        sent = req_i[RI_INPUT, r] + clu_f[CF_EXP_OUT, c]
        req_f[RF_SENT, r] = sent
        inst_f[IF_LT_TOKENS, g] += sent
    elif clu_i[CI_BOOKS, c] == ROUTER_LLMD or clu_i[CI_BOOKS, c] == ROUTER_SGLANG:
        _ix_insert(req_i, inst_i, clu_f, bkey, ix, c, g, r)
    inst_i[II_PENDING, g] += 1
    _heap_push(heap_t, heap_r, clu_i, c, now + req_f[RF_DELAY, r], r)
    return True


@njit(cache=True)
def _up_instance(inst_i, clu_i, c):
    """The serving instance that is up with the fewest requests in flight (-1: none)."""
    i0 = clu_i[CI_INST0, c]
    best, pick = np.iinfo(np.int64).max, -1
    for g in range(i0, i0 + clu_i[CI_NSERVE, c]):
        if not inst_i[II_DOWN, g] and inst_i[II_INFLIGHT, g] < best:
            best, pick = inst_i[II_INFLIGHT, g], g - i0
    return pick


@njit(cache=True)
def dispatch_decided(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c,
                     ccount, lat_p, c, r, i):
    """A routing decision made outside the kernel (a Python policy, an environment's
    agent): send request ``r`` to local instance ``i``, on a P/D cluster its decode
    instance (:func:`place_pd`); returns False if it was dropped. The books router
    (``CI_BOOKS``) records the decision as its own (:func:`_record_route`)."""
    n_prefill = clu_i[CI_NPREFILL, c]
    if n_prefill:
        i0, n = clu_i[CI_INST0, c], clu_i[CI_NSERVE, c]
        clu_i[CI_INST0, c], clu_i[CI_NSERVE, c] = i0 + n_prefill, n - n_prefill  # the router sees the decode pool
        _record_route(req_i, inst_i, inst_f, clu_i, clu_f, lat_p, win_t, win_c, ccount, clu_i[CI_BOOKS, c], c, r,
                      i - n_prefill)
        clu_i[CI_INST0, c], clu_i[CI_NSERVE, c] = i0, n
        place_pd(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, i)
        return req_i[RI_OUTCOME, r] != DROPPED
    _record_route(req_i, inst_i, inst_f, clu_i, clu_f, lat_p, win_t, win_c, ccount, clu_i[CI_BOOKS, c], c, r, i)
    return dispatch_to(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, i)


@njit(cache=True)
def _choose(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p, rng, c,
            r, kind):
    """Router ``kind``'s choice for request ``r`` and its record of it (the compiled path)."""
    if (kind == ROUTER_LMETRIC or kind == ROUTER_LMETRIC_WEIGHTED) and clu_f[CF_R0, c] > 0:
        _window_expire(clu_i, clu_f, win_t, win_c, ccount, c)
    i = _route(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p, rng, c,
               r, kind)
    _record_route(req_i, inst_i, inst_f, clu_i, clu_f, lat_p, win_t, win_c, ccount, kind, c, r, i)
    return i


@njit(cache=True)
def suggest(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p, rng, c,
            r):
    """The local instance the cluster's books router (``CI_BOOKS``) would choose for request
    ``r`` now (on a P/D cluster: its decode instance), changing no state but ``rng``'s."""
    i0, n, n_prefill = clu_i[CI_INST0, c], clu_i[CI_NSERVE, c], clu_i[CI_NPREFILL, c]
    clu_i[CI_INST0, c], clu_i[CI_NSERVE, c] = i0 + n_prefill, n - n_prefill  # P/D: the router sees the decode pool
    i = _route(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p, rng, c,
               r, clu_i[CI_BOOKS, c])
    clu_i[CI_INST0, c], clu_i[CI_NSERVE, c] = i0, n
    return n_prefill + i


@njit(cache=True)
def _dispatch(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c,
              ccount, lat_p, rng, c, r):
    if clu_i[CI_ROUTER, c] == ROUTER_PY:  # decided outside: pause after this event
        clu_i[CI_PENDING, c] = r
        clu_i[CI_LAST_ROUTE, c] = r
        clu_i[CI_STATUS, c] = ST_ROUTE
        return
    if clu_i[CI_NPREFILL, c]:
        _dispatch_pd(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c,
                     ccount, lat_p, rng, c, r)
        return
    i = _choose(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p, rng, c,
                r, clu_i[CI_ROUTER, c])
    dispatch_to(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, i)


@njit(cache=True)
def _dispatch_pd(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c,
                 ccount, lat_p, rng, c, r):
    """Dispatch on a P/D cluster, llm-d's pd-profile-handler order: the router picks the
    decode instance among the decode pool; the P/D decision looks at the prompt tokens
    not cached there; a disaggregated request goes to the prefill instance with the
    fewest queued prefill tokens (lowest index on ties), the others run whole on the
    decode instance. A request with one output token is never disaggregated."""
    i0, n, n_prefill = clu_i[CI_INST0, c], clu_i[CI_NSERVE, c], clu_i[CI_NPREFILL, c]
    clu_i[CI_INST0, c], clu_i[CI_NSERVE, c] = i0 + n_prefill, n - n_prefill  # the router sees the decode pool
    d = n_prefill + _choose(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount,
                            lat_p, rng, c, r, clu_i[CI_ROUTER, c])
    clu_i[CI_INST0, c], clu_i[CI_NSERVE, c] = i0, n
    place_pd(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, d)


@njit(cache=True)
def place_pd(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, d):
    """Request ``r`` of a P/D cluster whose decode instance is ``d`` (local index, in the
    decode pool; the router's choice, or an external one): the P/D decision, then the
    dispatch (see :func:`_dispatch_pd`)."""
    i0, n_prefill = clu_i[CI_INST0, c], clu_i[CI_NPREFILL, c]
    uncached = req_i[RI_INPUT, r] - cached_tokens(req_i, unit_i, inst_i, ent, i0 + d, r)
    if req_i[RI_OUTPUT, r] < 2 or not _disaggregate(req_i, inst_i, clu_i, clu_f, c, r, uncached):
        dispatch_to(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, d)
        return
    p = np.argmin(inst_i[II_QPREFILL, i0:i0 + n_prefill])
    if not dispatch_to(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, c, r, p):
        return
    req_i[RI_PD, r] = PD_PREFILL
    req_i[RI_DECODE, r] = d
    g = i0 + d
    inst_i[II_INFLIGHT, g] += 1  # in flight on both until its prefill ends
    router = clu_i[CI_BOOKS, c]
    if router == ROUTER_LEAST_TOKENS or router == ROUTER_BAILIAN_SAMPLING:  # the router's books: on d
        inst_f[IF_LT_TOKENS, i0 + p] -= req_f[RF_SENT, r]
        inst_f[IF_LT_TOKENS, g] += req_f[RF_SENT, r]
    elif router == ROUTER_LLMD or router == ROUTER_SGLANG:
        _ix_insert(req_i, inst_i, clu_f, bkey, ix, c, g, r)


@njit(cache=True)
def _admit(req_i, inst_i, inst_f, clu_i, clu_f, aprob, rng, c, r):
    kind = clu_i[CI_ADMIT, c]
    if kind == ADMIT_PY:
        clu_i[CI_HAS_DECISION, c] = 0
        return clu_i[CI_DECISION, c] == 1
    if kind == ADMIT_ALWAYS:
        return True
    s = saturation_now(inst_i, inst_f, clu_i, clu_f, c)
    if kind == ADMIT_LEGACY:
        return req_i[RI_PRIORITY, r] >= 0 or s < 1.0
    if kind == ADMIT_PROBABILISTIC:
        # llm-d's probabilistic admitter on its own roofline saturation of the scraped
        # metrics, mean(max(waiting / q, kv / kv_threshold)) (no staleness rule).
        if req_i[RI_PRIORITY, r] >= 0:
            return True
        i0 = clu_i[CI_INST0, c]
        i1 = i0 + clu_i[CI_NSERVE, c]  # the serving instances
        per = np.empty(i1 - i0)
        for g in range(i0, i1):
            per[g - i0] = max(inst_i[II_SCR_WAITING, g] / clu_f[CF_A2, c], inst_f[IF_SCR_KV, g] / clu_f[CF_A3, c])
        own = pairwise_sum(per, 0, i1 - i0) / (i1 - i0)
        p = min(clu_f[CF_A0, c] * max(own, 0.0) ** clu_f[CF_A1, c], 1.0)
        if p <= 0.0:
            return True
        if p >= 1.0:
            return False
        return rng.random() >= p
    # ADMIT_BAND_PROBS: reject band b with probability aprob[c, b]
    p = aprob[c, req_i[RI_BAND, r]]
    return not (p > 0.0 and rng.random() < p)


@njit(cache=True)
def _arrive(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, bq, aprob, heap_t, heap_r, bkey, ix, win_t,
            win_c, ccount, lat_p, rng, c, r, t):
    if not _admit(req_i, inst_i, inst_f, clu_i, clu_f, aprob, rng, c, r):
        _final(req_i, req_f, r, t, REJECTED)
        return
    clu_i[CI_ACTIVE, c] += 1
    if clu_i[CI_FLOW, c] == FLOW_NONE:
        _dispatch(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c,
                  ccount, lat_p, rng, c, r)
        return
    b = req_i[RI_BAND, r]
    if bq[BQ_LEN, c, b] >= clu_i[CI_BAND_CAP, c]:
        clu_i[CI_ACTIVE, c] -= 1
        _final(req_i, req_f, r, t, REJECTED)
        return
    _band_append(req_i, req_f, clu_f, bq, c, b, r, t)


@njit(cache=True)
def _band_append(req_i, req_f, clu_f, bq, c, b, r, t):
    """``r`` joins the tail of band ``b``'s queue at ``t``; a dispatch cycle runs then."""
    req_i[RI_NEXT, r] = -1
    tail = bq[BQ_TAIL, c, b]
    if tail >= 0:
        req_i[RI_NEXT, tail] = r
    else:
        bq[BQ_HEAD, c, b] = r
    bq[BQ_TAIL, c, b] = r
    bq[BQ_LEN, c, b] += 1
    req_f[RF_ENQUEUED, r] = t
    clu_f[CF_NEXT_CYCLE, c] = min(clu_f[CF_NEXT_CYCLE, c], t)  # a cycle runs after every enqueue


@njit(cache=True)
def _band_pop(req_i, bq, c, b):
    r = bq[BQ_HEAD, c, b]
    bq[BQ_HEAD, c, b] = req_i[RI_NEXT, r]
    if bq[BQ_HEAD, c, b] < 0:
        bq[BQ_TAIL, c, b] = -1
    bq[BQ_LEN, c, b] -= 1
    return r


@njit(cache=True)
def expire(req_i, req_f, clu_i, clu_f, bq, c, t):
    """Drop queued requests whose TTL ran out by ``t`` (final at enqueue + TTL)."""
    ttl = clu_f[CF_TTL, c]
    for b in range(clu_i[CI_NBANDS, c]):
        while bq[BQ_LEN, c, b] and req_f[RF_ENQUEUED, bq[BQ_HEAD, c, b]] + ttl <= t:
            r = _band_pop(req_i, bq, c, b)
            clu_i[CI_ACTIVE, c] -= 1
            _final(req_i, req_f, r, req_f[RF_ENQUEUED, r] + ttl, EXPIRED)


@njit(cache=True)
def _soft_reflective_period(s, scale):
    """Cycles per open cycle of a gated band (``scale`` = the policy's ``period_scale``)."""
    return max(1, np.floor(scale * s / (1.0 - s) + 0.5 + 1e-9))


@njit(cache=True)
def _ceiling(clu_i, clu_f, ceil_ext, c, b, nb, s, open_now):
    kind = clu_i[CI_FLOW, c]
    if kind == FLOW_STATIC:
        return clu_f[CF_F0, c]
    if kind == FLOW_HOLDBACK:
        if nb == 1:
            return clu_f[CF_F0, c]
        return clu_f[CF_F0, c] - b * (clu_f[CF_F0, c] - clu_f[CF_F1, c]) / (nb - 1)
    if kind == FLOW_SOFT_REFLECTIVE:  # CF_F0: ramp, CF_F1: period scale
        if b == 0 or not s >= 1.0 - clu_f[CF_F0, c] * b * s / (nb - 1):
            return 1.0
        return 0.0 if s >= 1.0 else (1.0 if open_now else 0.0)
    return ceil_ext[c, b]  # FLOW_FIXED or FLOW_PY


# ===================================================================== demand-driven eviction
@njit(cache=True)
def _before_in_victim_order(req_i, req_f, r, best):
    """Whether ``r`` is evicted before ``best``: lower priority first, then the most
    recently dispatched (llm-d's eviction-priority-then-time-ordering)."""
    if best < 0:
        return True
    p, q = req_i[RI_PRIORITY, r], req_i[RI_PRIORITY, best]
    if p != q:
        return p < q
    d, e = req_f[RF_DISPATCH, r], req_f[RF_DISPATCH, best]
    return d > e or (d == e and r > best)


@njit(cache=True)
def _victim(req_i, req_f, inst_i, run, clu_i, heap_r, c):
    """Cluster ``c``'s next eviction victim among its dispatched, unfinished requests
    (running, waiting at an instance, or on their way to one): sheddable ones only
    (priority < 0, llm-d's eviction-sheddable-filter). Returns (victim or -1, requests in
    flight, evictable requests)."""
    best, in_flight, evictable = -1, 0, 0
    for g in range(clu_i[CI_INST0, c], clu_i[CI_INST1, c]):
        for j in range(inst_i[II_NRUN, g]):
            best, in_flight, evictable = _tally(req_i, req_f, run[g, RUN_ID, j], best, in_flight, evictable)
        q = inst_i[II_WQ_HEAD, g]
        while q >= 0:
            best, in_flight, evictable = _tally(req_i, req_f, q, best, in_flight, evictable)
            q = req_i[RI_NEXT, q]
    base = clu_i[CI_REQ0, c]
    for k in range(clu_i[CI_HEAP_LEN, c]):  # dispatched, not yet at their instance
        best, in_flight, evictable = _tally(req_i, req_f, heap_r[base + k], best, in_flight, evictable)
    return best, in_flight, evictable


@njit(cache=True)
def _tally(req_i, req_f, r, best, in_flight, evictable):
    """:func:`_victim`'s totals with request ``r`` counted (if still in flight)."""
    if req_i[RI_OUTCOME, r] != IN_FLIGHT:
        return best, in_flight, evictable
    if req_i[RI_PRIORITY, r] < 0:
        evictable += 1
        if _before_in_victim_order(req_i, req_f, r, best):
            best = r
    return best, in_flight + 1, evictable


@njit(cache=True)
def _evict(req_i, req_f, inst_i, inst_f, run, seg, clu_i, clu_f, log, c, r, t):
    """The gateway revokes in-flight ``r`` at ``t`` (outcome EVICTED): :func:`_abort`."""
    _abort(req_i, req_f, inst_i, inst_f, run, seg, clu_i, clu_f, log, c, r, t, EVICTED)


@njit(cache=True)
def _abort(req_i, req_f, inst_i, inst_f, run, seg, clu_i, clu_f, log, c, r, t, outcome):
    """In-flight ``r``'s stream ends at ``t`` with ``outcome`` (EVICTED: the gateway revoked
    it; TIMED_OUT: its client gave up) and the gateway stops counting it; the instance drops
    it where it is (vLLM aborts a running request between steps, a waiting one at once; one
    still on its way is dropped when it arrives, :func:`_enqueue`)."""
    g = clu_i[CI_INST0, c] + req_i[RI_INSTANCE, r]
    _final(req_i, req_f, r, t, outcome)
    if outcome == TIMED_OUT and req_f[RF_FIRST, r] > t:  # its first token had not reached the client
        req_f[RF_FIRST, r] = np.nan
    inst_i[II_INFLIGHT, g] -= 1
    inst_i[II_QPREFILL, g] -= req_i[RI_PREFILL_EST, r]
    req_i[RI_PREFILL_EST, r] = 0
    if clu_i[CI_BOOKS, c] == ROUTER_LEAST_TOKENS or clu_i[CI_BOOKS, c] == ROUTER_BAILIAN_SAMPLING:
        inst_f[IF_LT_TOKENS, g] -= req_f[RF_SENT, r]
    if clu_i[CI_LOG_FINISH, c]:  # a Python router hears of it as of a finish
        log[clu_i[CI_REQ0, c] + clu_i[CI_LOG_LEN, c]] = r
        clu_i[CI_LOG_LEN, c] += 1
    R = run[g]
    for j in range(inst_i[II_NRUN, g]):
        if R[RUN_ID, j] == r:  # leaves at the end of the step in progress (_complete)
            m = inst_i[II_SEG_LEN, g]  # a decode segment's iterations ended by t count
            req_i[RI_GENERATED, r] = R[RUN_GEN, j] + (np.searchsorted(seg[g, :m], t, side="right") if m else 0)
            _cut_segment(inst_i, inst_f, seg, g, t)
            return
    prev, q = -1, inst_i[II_WQ_HEAD, g]
    while q >= 0:
        if q == r:  # waiting: holds no blocks (preemption released them)
            nxt = req_i[RI_NEXT, r]
            if prev >= 0:
                req_i[RI_NEXT, prev] = nxt
            else:
                inst_i[II_WQ_HEAD, g] = nxt
            if inst_i[II_WQ_TAIL, g] == r:
                inst_i[II_WQ_TAIL, g] = prev
            inst_i[II_WQ_LEN, g] -= 1
            clu_i[CI_ACTIVE, c] -= 1
            return
        prev, q = q, req_i[RI_NEXT, q]


# ===================================================================== faults
@njit(cache=True)
def crash(req_i, req_f, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, heap_t, heap_r, log, c, i, t):
    """Local instance ``i`` of cluster ``c`` crashes at ``t`` (a fault; the cluster paused at
    ``t``). Its running and waiting requests and those on their way to it are lost to it; its
    KV blocks and prefix cache are gone (its CPU tier, a store outside the engine process, is
    kept). The gateway stops counting them there and re-sends each (prefill redone, output
    regenerated, TTFT from the new first token: :data:`RI_RETRIES` + 1) through its band queue
    while it has retries left (``CI_RETRY_MAX``), else it ends ``CRASHED``. Until
    :func:`restart` the instance is no endpoint and is not scraped. Returns the requests lost."""
    i0 = clu_i[CI_INST0, c]
    g = i0 + i
    if inst_i[II_DOWN, g]:
        return 0
    inst_i[II_DOWN, g] = 1
    clu_i[CI_NDOWN, c] += 1
    R = run[g]
    lost = np.empty(inst_i[II_NRUN, g] + inst_i[II_WQ_LEN, g] + inst_i[II_PENDING, g], np.int64)
    k = 0
    m = inst_i[II_SEG_LEN, g]
    for j in range(inst_i[II_NRUN, g]):
        r = R[RUN_ID, j]
        if req_i[RI_OUTCOME, r] != IN_FLIGHT:  # aborted already, to be dropped at the step's end
            clu_i[CI_ACTIVE, c] -= 1
            req_i[RI_HELD, r] = 0
            continue
        req_i[RI_GENERATED, r] = R[RUN_GEN, j] + (np.searchsorted(seg[g, :m], t, side="right") if m else 0)
        lost[k] = r
        k += 1
    q = inst_i[II_WQ_HEAD, g]
    while q >= 0:
        lost[k] = q
        k += 1
        q = req_i[RI_NEXT, q]
    base, n = clu_i[CI_REQ0, c], clu_i[CI_HEAP_LEN, c]  # on their way to it: out of the heap
    keep_t, keep_r = np.empty(n), np.empty(n, np.int64)
    kept = 0
    for h in range(n):
        r = heap_r[base + h]
        if req_i[RI_PD, r] != PD_TRANSFER and req_i[RI_INSTANCE, r] == i:
            if req_i[RI_OUTCOME, r] != IN_FLIGHT:
                clu_i[CI_ACTIVE, c] -= 1
            else:
                lost[k] = r
                k += 1
        else:
            keep_t[kept], keep_r[kept] = heap_t[base + h], r
            kept += 1
    clu_i[CI_HEAP_LEN, c] = 0
    for h in range(kept):
        _heap_push(heap_t, heap_r, clu_i, c, keep_t[h], keep_r[h])
    # The instance restarts empty: no batch, queue, KV blocks or prefix cache.
    e0 = inst_i[II_ENT0, g]
    for e in range(e0, e0 + inst_i[II_ENT_MASK, g] + 1):
        ent[e, EN_KEY] = 0
    inst_i[II_NRUN, g], inst_i[II_WQ_LEN, g], inst_i[II_PENDING, g], inst_i[II_SEG_LEN, g] = 0, 0, 0, 0
    inst_i[II_WQ_HEAD, g], inst_i[II_WQ_TAIL, g], inst_i[II_LRU_HEAD, g], inst_i[II_LRU_TAIL, g] = -1, -1, -1, -1
    inst_i[II_USED, g], inst_i[II_EVICTABLE, g], inst_i[II_ANON_FRONT, g] = 0, 0, inst_i[II_TOTAL, g]
    inst_f[IF_NEXT_T, g], inst_f[IF_STEP_S, g] = np.inf, 0.0
    lost = np.sort(lost[:k])  # in arrival order
    least = clu_i[CI_BOOKS, c] == ROUTER_LEAST_TOKENS or clu_i[CI_BOOKS, c] == ROUTER_BAILIAN_SAMPLING
    for r in lost:
        inst_i[II_INFLIGHT, g] -= 1  # the gateway hears of the failure
        inst_i[II_QPREFILL, g] -= req_i[RI_PREFILL_EST, r]
        req_i[RI_PREFILL_EST, r] = 0
        req_i[RI_HELD, r] = 0
        if least:
            inst_f[IF_LT_TOKENS, g] -= req_f[RF_SENT, r]
        if clu_i[CI_LOG_FINISH, c]:  # a Python router hears of it as of a finish
            log[clu_i[CI_REQ0, c] + clu_i[CI_LOG_LEN, c]] = r
            clu_i[CI_LOG_LEN, c] += 1
        b = req_i[RI_BAND, r]
        if req_i[RI_RETRIES, r] < clu_i[CI_RETRY_MAX, c] and bq[BQ_LEN, c, b] < clu_i[CI_BAND_CAP, c]:
            req_i[RI_RETRIES, r] += 1  # re-sent: joins its band queue, dispatched by the next cycle
            req_i[RI_GENERATED, r] = 0
            req_f[RF_FIRST, r] = np.nan
            _band_append(req_i, req_f, clu_f, bq, c, b, r, t)
        else:
            clu_i[CI_ACTIVE, c] -= 1
            _final(req_i, req_f, r, t, CRASHED)
            if req_f[RF_FIRST, r] > t:  # its first token had not reached the client
                req_f[RF_FIRST, r] = np.nan
    return k


@njit(cache=True)
def restart(inst_i, inst_f, clu_i, c, i, t):
    """Local instance ``i`` of cluster ``c``, crashed, is up again at ``t``: an endpoint with
    fresh metrics of an empty instance (unless a scrape outage covers it)."""
    g = clu_i[CI_INST0, c] + i
    if not inst_i[II_DOWN, g]:
        return
    inst_i[II_DOWN, g] = 0
    clu_i[CI_NDOWN, c] -= 1
    if not inst_i[II_NOSCRAPE, g]:
        inst_i[II_SCR_WAITING, g], inst_i[II_SCR_RUNNING, g] = 0, 0
        inst_f[IF_SCR_KV, g], inst_f[IF_SCRAPE_T, g] = 0.0, t


@njit(cache=True)
def _reclaim(req_i, req_f, inst_i, inst_f, run, seg, clu_i, clu_f, bq, ceil_ext, heap_r, log, c, blocked, nb, s,
             open_now, t):
    """llm-d-router's demand-driven eviction at a head-of-line break at band ``blocked``
    (flowcontrol/controller/internal/reclamation.go): the first band from there with
    queued requests, a priority above the next victim's, a ceiling > 0 and ``s`` at or
    above it sizes the decision, ``n = max(1, ceil((s - ceiling) / (s / in_flight)))``
    revocations (at most CI_EVICT_MAX and the evictable count), each of a lower priority
    than that band; then no decision until CF_EVICT_GRACE has passed (in the simulator a
    revoked stream ends at once, so its confirmation is immediate)."""
    victim, in_flight, evictable = _victim(req_i, req_f, inst_i, run, clu_i, heap_r, c)
    if victim < 0:
        return
    for b in range(blocked, nb):
        if bq[BQ_LEN, c, b] == 0:
            continue
        priority = req_i[RI_PRIORITY, bq[BQ_HEAD, c, b]]
        if priority <= req_i[RI_PRIORITY, victim]:
            return
        ceiling = _ceiling(clu_i, clu_f, ceil_ext, c, b, nb, s, open_now)
        if ceiling <= 0.0 or s < ceiling:
            continue
        credit = s / in_flight
        if not (credit > 0.0 and credit < np.inf):
            return
        n = min(max(1, int(np.ceil((s - ceiling) / credit))), clu_i[CI_EVICT_MAX, c], evictable)
        evicted = 0
        for k in range(n):
            if k:
                victim, _, _ = _victim(req_i, req_f, inst_i, run, clu_i, heap_r, c)
            if victim < 0 or req_i[RI_PRIORITY, victim] >= priority:
                break
            _evict(req_i, req_f, inst_i, inst_f, run, seg, clu_i, clu_f, log, c, victim, t)
            evicted += 1
        if evicted:
            clu_f[CF_EVICT_GATE, c] = t + clu_f[CF_EVICT_GRACE, c]
        return


@njit(cache=True)
def _dispatch_cycle(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, ceil_ext, heap_t, heap_r,
                    log, bkey, ix, win_t, win_c, ccount, lat_p, rng, c, t):
    """One dispatch cycle: expire, then dispatch at most one request, highest band first,
    stopping at the first band whose ceiling is <= the saturation. Without flow control only
    requests re-sent after a crash queue here: they are all dispatched at once."""
    nb = clu_i[CI_NBANDS, c]
    kind = clu_i[CI_FLOW, c]
    if kind == FLOW_NONE:
        for b in range(nb):
            while bq[BQ_LEN, c, b] and clu_i[CI_STATUS, c] != ST_ROUTE:
                r = _band_pop(req_i, bq, c, b)
                _dispatch(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t,
                          win_c, ccount, lat_p, rng, c, r)
        clu_f[CF_NEXT_CYCLE, c] = t if bq[BQ_LEN, c, :nb].sum() else np.inf  # the rest after a Python decision
        return
    expire(req_i, req_f, clu_i, clu_f, bq, c, t)
    s = saturation_now(inst_i, inst_f, clu_i, clu_f, c)
    open_now = True
    gated_from = 1.0 / (1.0 + clu_f[CF_F0, c])  # where the last band starts to be gated (0.5 at ramp 1)
    if kind == FLOW_SOFT_REFLECTIVE and gated_from <= s < 1.0:
        clu_i[CI_TICK, c] += 1
        open_now = clu_i[CI_TICK, c] % _soft_reflective_period(s, clu_f[CF_F1, c]) == 0
    if kind == FLOW_PY:
        clu_i[CI_HAS_DECISION, c] = 0
    blocked = False
    for b in range(nb):
        if s >= _ceiling(clu_i, clu_f, ceil_ext, c, b, nb, s, open_now):
            blocked = True
            if clu_i[CI_EVICT_MAX, c] and t >= clu_f[CF_EVICT_GATE, c]:
                _reclaim(req_i, req_f, inst_i, inst_f, run, seg, clu_i, clu_f, bq, ceil_ext, heap_r, log, c, b, nb, s,
                         open_now, t)
            break
        if bq[BQ_LEN, c, b]:
            r = _band_pop(req_i, bq, c, b)
            _dispatch(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c,
                  ccount, lat_p, rng, c, r)
            break
    queued = False
    oldest = np.inf
    for b in range(nb):
        if bq[BQ_LEN, c, b]:
            queued = True
            oldest = min(oldest, req_f[RF_ENQUEUED, bq[BQ_HEAD, c, b]])
    interval = clu_f[CF_DISP_INT, c]
    if not queued:
        clu_f[CF_NEXT_CYCLE, c] = np.inf
        return
    if kind == FLOW_SOFT_REFLECTIVE:
        stationary = s < gated_from or s >= 1.0 or _soft_reflective_period(s, clu_f[CF_F1, c]) == 1
    elif kind == FLOW_PY:
        stationary = clu_f[CF_STATIONARY, c] > 0
    else:
        stationary = True
    if blocked and stationary and clu_f[CF_SCRAPE_INT, c] > 0 and clu_i[CI_SAT_KIND, c] == SAT_UTILIZATION:
        # Nothing changes until the saturation does (next scrape, or the metrics going
        # stale), unless a request expires first.
        wake = min(clu_f[CF_NEXT_SCRAPE, c], oldest + clu_f[CF_TTL, c])
        stale_at = inst_f[IF_SCRAPE_T, clu_i[CI_INST0, c]] + clu_f[CF_SAT_STALE, c]
        if clu_i[CI_FAULTS, c]:  # metrics age per instance
            stale_at = _next_stale(inst_i, inst_f, clu_i, clu_f, c, t)
        if stale_at > t:
            wake = min(wake, stale_at)
        if clu_i[CI_EVICT_MAX, c] and clu_f[CF_EVICT_GATE, c] > t:  # the next eviction decision
            wake = min(wake, clu_f[CF_EVICT_GATE, c])
        clu_f[CF_NEXT_CYCLE, c] = max(t + interval, wake)
    else:
        clu_f[CF_NEXT_CYCLE, c] = t + interval


@njit(cache=True)
def is_done(clu_i, c):
    return clu_i[CI_PTR, c] >= clu_i[CI_REQ1, c] - clu_i[CI_REQ0, c] and clu_i[CI_ACTIVE, c] == 0


@njit(cache=True)
def _advance_cluster(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, ceil_ext, aprob,
                     lat_p, heap_t, heap_r, log, bkey, ix, win_t, win_c, ccount, rng, c, until):
    """The event loop of cluster ``c`` up to ``until`` or the next pause (sets CI_STATUS)."""
    if clu_i[CI_STATUS, c] == ST_ROUTE:
        return  # a routing decision is still owed
    clu_i[CI_STATUS, c] = ST_TIME
    until = min(until, clu_f[CF_HORIZON, c])
    i0, i1 = clu_i[CI_INST0, c], clu_i[CI_INST1, c]
    r0 = clu_i[CI_REQ0, c]
    n_req = clu_i[CI_REQ1, c] - r0
    interval = clu_f[CF_SCRAPE_INT, c]
    while True:
        g = i0
        t_inst = inst_f[IF_NEXT_T, i0]
        for k in range(i0 + 1, i1):
            if inst_f[IF_NEXT_T, k] < t_inst:
                t_inst = inst_f[IF_NEXT_T, k]
                g = k
        t_elig = heap_t[r0] if clu_i[CI_HEAP_LEN, c] else np.inf
        ptr = clu_i[CI_PTR, c]
        t_arr = req_f[RF_ARRIVAL, r0 + ptr] if ptr < n_req else np.inf
        t_cycle = clu_f[CF_NEXT_CYCLE, c]
        t = min(min(t_elig, t_inst), min(t_arr, t_cycle))
        t_other = t
        tptr = clu_i[CI_TO_PTR, c]  # client timeouts come in arrival order (one timeout for all)
        t_to = req_f[RF_ARRIVAL, r0 + tptr] + clu_f[CF_TIMEOUT, c] if tptr < ptr else np.inf
        t = min(t, t_to)
        horizon_t = min(t, until)
        if interval > 0 and clu_f[CF_NEXT_SCRAPE, c] <= horizon_t:
            # State is constant between events (up to KV growth inside decode segments,
            # which kv_used_at accounts for): only the last scrape tick before the next
            # event needs to be taken.
            nxt = clu_f[CF_NEXT_SCRAPE, c]
            tick = nxt + interval * np.floor((horizon_t - nxt) / interval)
            scrape(run, inst_i, inst_f, seg, clu_i, clu_f, c, tick)
            clu_f[CF_NEXT_SCRAPE, c] = tick + interval
        if t > until or t == np.inf:
            if is_done(clu_i, c):
                clu_i[CI_STATUS, c] = ST_DONE
                return
            if until < np.inf:
                clu_f[CF_NOW, c] = until
            clu_i[CI_STATUS, c] = ST_HORIZON if until >= clu_f[CF_HORIZON, c] else ST_TIME
            return
        clu_f[CF_NOW, c] = t
        if t_to < t_other:  # a client gives up (events at the same time go first)
            clu_i[CI_TO_PTR, c] = tptr + 1
            if req_i[RI_OUTCOME, r0 + tptr] == IN_FLIGHT:
                _abort(req_i, req_f, inst_i, inst_f, run, seg, clu_i, clu_f, log, c, r0 + tptr, t, TIMED_OUT)
        elif t_elig == t:
            r = _heap_pop(heap_t, heap_r, clu_i, c)
            if req_i[RI_PD, r] == PD_TRANSFER:
                _receive_kv(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, lat_p, log, c, r, t)
            else:
                _enqueue(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, lat_p,
                         i0 + req_i[RI_INSTANCE, r], r, t)
        elif t_inst == t:
            _complete(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, lat_p, log, heap_t, heap_r,
                      g)
            if interval == 0:
                scrape(run, inst_i, inst_f, seg, clu_i, clu_f, c, t)
        elif t_arr == t:
            if clu_i[CI_ADMIT, c] == ADMIT_PY and not clu_i[CI_HAS_DECISION, c]:
                clu_i[CI_PENDING, c] = r0 + ptr
                clu_i[CI_STATUS, c] = ST_ADMIT
                return
            _arrive(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, bq, aprob, heap_t, heap_r, bkey, ix,
                    win_t, win_c, ccount, lat_p, rng, c, r0 + ptr, t)
            clu_i[CI_PTR, c] = ptr + 1
        else:
            if clu_i[CI_FLOW, c] == FLOW_PY and not clu_i[CI_HAS_DECISION, c]:
                expire(req_i, req_f, clu_i, clu_f, bq, c, t)
                clu_i[CI_STATUS, c] = ST_CEILINGS
                return
            _dispatch_cycle(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, ceil_ext, heap_t,
                            heap_r, log, bkey, ix, win_t, win_c, ccount, lat_p, rng, c, t)
        if clu_i[CI_STATUS, c] == ST_ROUTE:
            return
        if is_done(clu_i, c):
            clu_i[CI_STATUS, c] = ST_DONE
            return


@njit(cache=True)
def advance(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, ceil_ext, aprob, lat_p,
            heap_t, heap_r, log, bkey, ix, win_t, win_c, ccount, rngs, active, until):
    """Advance every cluster ``c`` with ``active[c]`` to ``until[c]`` or its next pause."""
    req_i, req_f, unit_i, inst_i, inst_f, ent = (borrowed(req_i), borrowed(req_f), borrowed(unit_i),
                                                 borrowed(inst_i), borrowed(inst_f), borrowed(ent))
    run, seg, clu_i, clu_f, bq, ceil_ext = (borrowed(run), borrowed(seg), borrowed(clu_i), borrowed(clu_f),
                                            borrowed(bq), borrowed(ceil_ext))
    aprob, lat_p, heap_t, heap_r, log, bkey = (borrowed(aprob), borrowed(lat_p), borrowed(heap_t),
                                               borrowed(heap_r), borrowed(log), borrowed(bkey))
    ix, win_t, win_c, ccount = borrowed(ix), borrowed(win_t), borrowed(win_c), borrowed(ccount)
    for c in range(len(active)):
        if active[c]:
            _advance_cluster(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, ceil_ext,
                             aprob, lat_p, heap_t, heap_r, log, bkey, ix, win_t, win_c, ccount, rngs[c], c,
                             until[c])


@njit(cache=True)
def cached_tokens_all(req_i, unit_i, inst_i, ent, i0, i1, r):
    """:func:`cached_tokens` of request ``r`` on instances ``i0:i1``."""
    out = np.empty(i1 - i0, np.int64)
    for g in range(i0, i1):
        out[g - i0] = cached_tokens(req_i, unit_i, inst_i, ent, g, r)
    return out


@njit(cache=True)
def fits_all(req_i, inst_i, clu_i, c, r):
    """:func:`fits` of request ``r`` on every instance of cluster ``c``."""
    i0, i1 = clu_i[CI_INST0, c], clu_i[CI_INST1, c]
    out = np.empty(i1 - i0, np.bool_)
    for g in range(i0, i1):
        out[g - i0] = fits(req_i, inst_i, clu_i, c, g, r)
    return out
