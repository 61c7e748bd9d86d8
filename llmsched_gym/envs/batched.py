"""Compiled per-step work of the native vector environments over the shared engine state.

One call per vector step does, for every cluster at once, what the drivers of
:mod:`llmsched_gym.envs.core` do one cluster at a time: apply the routing actions, fill
the raw observation buffers, and advance the reward's cost tracker. The arithmetic is the
drivers', operation for operation (including numpy's pairwise summation order for the
cost sums), so a native vector env steps exactly like its single envs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..engine.borrow import borrowed
from ..engine.kernel import (
    advance,
    cached_tokens,
    dispatch_decided,
    fits_all,
    pairwise_sum,
    saturation_now,
    suggest,
)
from ..engine.layout import (
    BQ_HEAD,
    BQ_LEN,
    CF_EXP_OUT,
    CF_F0,
    CF_F1,
    CF_NEXT_CYCLE,
    CF_NOW,
    CF_SATURATION,
    CI_FAULTS,
    CI_INST0,
    CI_LAST_ROUTE,
    CI_MAX_SEQS,
    CI_NBANDS,
    CI_NPREFILL,
    CI_PENDING,
    CI_PTR,
    CI_REQ0,
    CI_STATUS,
    CRASHED,
    DROPPED,
    EVICTED,
    EXPIRED,
    IF_SCR_KV,
    IF_SCRAPE_T,
    II_INFLIGHT,
    II_QPREFILL,
    II_SCR_RUNNING,
    II_SCR_WAITING,
    REJECTED,
    RF_ARRIVAL,
    RF_END,
    RF_ENQUEUED,
    RF_FINISH,
    RF_FIRST,
    RI_BAND,
    RI_CLOSED,
    RI_INPUT,
    RI_OUTCOME,
    ST_DONE,
    ST_HORIZON,
    ST_ROUTE,
    ST_TIME,
)

# Cost-tracker scalars per cluster, ``trk[field, c]`` (float64): see CostTracker in core.py.
T_PTR, T_FIRST, T_CLOSED, T_TOTAL, T_OPEN = range(5)
N_T = 5


@njit(cache=True)
def route_all(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c, ccount,
              lat_p, choices):
    """Answer every cluster's pending routing decision with ``choices[c]``."""
    for c in range(len(choices)):
        clu_i[CI_STATUS, c] = ST_TIME
        dispatch_decided(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t,
                         win_c, ccount, lat_p, c, clu_i[CI_PENDING, c], choices[c])


@njit(cache=True)
def action_masks(req_i, inst_i, clu_i, out):
    """Instances each cluster's pending request fits on (all, if it fits nowhere); on a P/D
    cluster only decode instances (the decision picks the decode instance)."""
    for c in range(out.shape[0]):
        if clu_i[CI_STATUS, c] != ST_ROUTE:
            out[c] = True
            continue
        m = fits_all(req_i, inst_i, clu_i, c, clu_i[CI_PENDING, c])
        if m.any():
            out[c] = m
        else:
            out[c] = True
        out[c, :clu_i[CI_NPREFILL, c]] = False


@njit(cache=True)
def common_obs(req_f, inst_i, inst_f, clu_i, clu_f, bq, sim_bands, sat, running, waiting, kv, in_flight,
               prefill, band_len, band_wait):
    """The common observation keys of every cluster (rows of the raw buffers)."""
    C, I = running.shape
    for c in range(C):
        i0 = clu_i[CI_INST0, c]
        now = clu_f[CF_NOW, c]
        # the detector's value (metric ages per instance under faults), else the last scrape's
        sat[c, 0] = saturation_now(inst_i, inst_f, clu_i, clu_f, c) if clu_i[CI_FAULTS, c] else clu_f[CF_SATURATION, c]
        seqs = clu_i[CI_MAX_SEQS, c]
        for i in range(I):
            g = i0 + i
            running[c, i] = inst_i[II_SCR_RUNNING, g] / seqs
            waiting[c, i] = inst_i[II_SCR_WAITING, g]
            kv[c, i] = inst_f[IF_SCR_KV, g]
            in_flight[c, i] = inst_i[II_INFLIGHT, g]
            prefill[c, i] = inst_i[II_QPREFILL, g]
        band_len[c] = 0.0
        band_wait[c] = 0.0
        for b in range(clu_i[CI_NBANDS, c]):
            n = bq[BQ_LEN, c, b]
            band_len[c, sim_bands[c, b]] = n
            band_wait[c, sim_bands[c, b]] = now - req_f[RF_ENQUEUED, bq[BQ_HEAD, c, b]] if n else 0.0


@njit(cache=True)
def metric_age(inst_f, clu_i, clu_f, age):
    """Seconds since each instance's metrics were scraped (the ``metric_age`` key)."""
    C, I = age.shape
    for c in range(C):
        i0 = clu_i[CI_INST0, c]
        for i in range(I):
            age[c, i] = clu_f[CF_NOW, c] - inst_f[IF_SCRAPE_T, i0 + i]


@njit(cache=True)
def routing_obs(req_i, req_f, unit_i, inst_i, ent, clu_i, clu_f, sim_bands, n_bands, hit, request):
    """The Routing keys: prefix hit of the pending request per instance, and its features."""
    C, I = hit.shape
    for c in range(C):
        r = clu_i[CI_LAST_ROUTE, c]
        if r < 0:
            hit[c] = 0.0
            request[c] = 0.0
            continue
        i0 = clu_i[CI_INST0, c]
        inp = req_i[RI_INPUT, r]
        for i in range(I):
            hit[c, i] = cached_tokens(req_i, unit_i, inst_i, ent, i0 + i, r) / max(inp, 1)
        request[c, 0] = inp
        request[c, 1] = clu_f[CF_EXP_OUT, c]
        request[c, 2] = sim_bands[c, req_i[RI_BAND, r]] / max(n_bands - 1, 1)
        request[c, 3] = clu_f[CF_NOW, c] - req_f[RF_ARRIVAL, r]


@njit(cache=True)
def hint_obs(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p, rngs,
             hint):
    """The ``hint`` key: one-hot of the books router's choice for each cluster's pending
    request (zeros where none is pending), drawing from ``rngs[c]`` (the simulators'
    ``hint_rng``); the driver's ``_extra_obs`` for every cluster, once per decision."""
    for c in range(hint.shape[0]):
        hint[c] = 0.0
        if clu_i[CI_STATUS, c] == ST_ROUTE:
            hint[c, suggest(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount,
                            lat_p, rngs[c], c, clu_i[CI_PENDING, c])] = 1.0


@njit(cache=True)
def track_costs(req_i, req_f, clu_i, clu_f, trk, wband, e2e, penalty, scale, final, rewards):
    """One step of every cluster's cost tracker (``ttft`` / ``e2e`` rewards); fills ``rewards``.

    A request is open from arrival until its cost is final; ``T_FIRST`` is the first
    request that may still be open, ``RI_CLOSED`` marks the closed ones. The cost sums run
    over the open requests in arrival order in numpy's pairwise order, as the Python
    tracker's ``cost[closed].sum()`` and ``cost.sum()`` do.
    """
    for c in range(len(rewards)):
        r0 = clu_i[CI_REQ0, c]
        ptr = clu_i[CI_PTR, c]
        trk[T_PTR, c] = max(trk[T_PTR, c], ptr)
        lo, hi = int(trk[T_FIRST, c]), int(trk[T_PTR, c])
        t = clu_f[CF_NOW, c]
        fin = final[c]
        closed_cost = np.empty(hi - lo)
        open_cost = np.empty(hi - lo)
        n_closed = 0
        n_open = 0
        for k in range(lo, hi):
            r = r0 + k
            if req_i[RI_CLOSED, r]:
                continue
            a = req_f[RF_ARRIVAL, r]
            stop = req_f[RF_FINISH, r] if e2e else req_f[RF_FIRST, r]
            known = not np.isnan(stop)
            out = req_i[RI_OUTCOME, r]
            unserved = (out == REJECTED or out == EXPIRED or out == DROPPED
                        or ((out == EVICTED or out == CRASHED) and not known))
            end = stop if known else (req_f[RF_END, r] if unserved else np.inf)
            if fin:
                upto = end if (known or unserved) else t
            else:
                upto = min(end, t)
            w = wband[c, req_i[RI_BAND, r]]
            cost = w * (upto - a) + (w * penalty) * (1.0 if unserved else 0.0)
            closed = True if fin else (unserved or (known and stop <= t))
            if closed:
                closed_cost[n_closed] = cost
                n_closed += 1
                req_i[RI_CLOSED, r] = 1
            else:
                open_cost[n_open] = cost
                n_open += 1
        while lo < hi and req_i[RI_CLOSED, r0 + lo]:
            lo += 1
        trk[T_FIRST, c] = lo
        if n_closed:
            trk[T_CLOSED, c] += pairwise_sum(closed_cost, 0, n_closed)
        total = trk[T_CLOSED, c] + (pairwise_sum(open_cost, 0, n_open) if n_open else 0.0)
        rewards[c] = -(total - trk[T_TOTAL, c]) * scale
        trk[T_TOTAL, c] = total
        trk[T_OPEN, c] = n_open


@njit(cache=True)
def arrival_rates(req_i, clu_i, sim_bands, prev, interval, out):
    """Arrivals per scenario band over each cluster's last control interval, per second."""
    for c in range(out.shape[0]):
        out[c] = 0.0
        r0 = clu_i[CI_REQ0, c]
        for k in range(prev[c], clu_i[CI_PTR, c]):
            out[c, sim_bands[c, req_i[RI_BAND, r0 + k]]] += 1.0
        for b in range(out.shape[1]):
            out[c, b] = out[c, b] / interval


# ===================================================================== fused step
#: The raw observation buffers of :func:`observe`, in this order (observed or not).
RAW_KEYS = ("saturation", "running", "waiting", "kv_util", "in_flight", "prefill_tokens", "band_length",
            "band_oldest_wait", "prefix_hit", "request", "band_arrival_rate", "metric_age", "hint")
#: Normalization codes of core.TRANSFORMS ("frac" and "sat" are the identity).
NORM_CODES = {"count": 0, "tokens": 1, "time": 2, "frac": 3, "sat": 3, "request": 4}
_LOG2 = np.log(2.0)
_COUNT_DIV, _TOKENS_DIV, _TIME_DIV = 10 * _LOG2, 20 * _LOG2, 16 * _LOG2  # core._count, _tokens, _time


@njit(cache=True)
def _normalize(x, out, code, high, normalize):
    """core.normalize_obs of one key, into the float32 buffer ``out``."""
    C, K = x.shape
    for c in range(C):
        for k in range(K):
            v = x[c, k]
            if normalize:
                f = code if code != 4 else (1 if k < 2 else (2 if k == 3 else 3))  # request: tokens, tokens, -, time
                if f == 0:
                    v = np.log1p(v) / _COUNT_DIV
                elif f == 1:
                    v = np.log1p(v) / _TOKENS_DIV
                elif f == 2:
                    v = np.log1p(v * 100.0) / _TIME_DIV
            if v < 0.0:
                v = 0.0
            if normalize and v > high:
                v = high
            out[c, k] = v


@njit(cache=True)
def observe(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, bq, bkey, ix, win_t, win_c, ccount, lat_p,
            hint_rngs, hinted, sim_bands, n_bands, routing, raw, raw_off, arrival_rate, keys, codes, highs, normalize,
            out, out_off, masks):
    """Every cluster's raw observation (``raw``: the keys of RAW_KEYS as column blocks
    at ``raw_off``), the observed keys ``keys`` normalized into ``out`` (column blocks at
    ``out_off``), and (Routing) the action masks; ``hinted``: the ``hint`` key too
    (:func:`hint_obs`, drawing from ``hint_rngs``)."""
    o = raw_off
    req_i, req_f, unit_i, inst_i, inst_f, ent = (borrowed(req_i), borrowed(req_f), borrowed(unit_i),
                                                 borrowed(inst_i), borrowed(inst_f), borrowed(ent))
    clu_i, clu_f, bq, raw, out = borrowed(clu_i), borrowed(clu_f), borrowed(bq), borrowed(raw), borrowed(out)
    common_obs(req_f, inst_i, inst_f, clu_i, clu_f, bq, sim_bands, raw[:, o[0]:o[1]], raw[:, o[1]:o[2]],
               raw[:, o[2]:o[3]], raw[:, o[3]:o[4]], raw[:, o[4]:o[5]], raw[:, o[5]:o[6]], raw[:, o[6]:o[7]],
               raw[:, o[7]:o[8]])
    if routing:
        routing_obs(req_i, req_f, unit_i, inst_i, ent, clu_i, clu_f, sim_bands, n_bands, raw[:, o[8]:o[9]],
                    raw[:, o[9]:o[10]])
        action_masks(req_i, inst_i, clu_i, masks)
        if hinted:
            hint_obs(req_i, req_f, inst_i, inst_f, unit_i, ent, clu_i, clu_f, bkey, ix, win_t, win_c, ccount, lat_p,
                     hint_rngs, raw[:, o[12]:o[13]])
    else:
        raw[:, o[10]:o[11]] = arrival_rate
    metric_age(inst_f, clu_i, clu_f, raw[:, o[11]:o[12]])
    for k in range(len(keys)):
        j = keys[k]
        _normalize(raw[:, o[j]:o[j + 1]], out[:, out_off[k]:out_off[k + 1]], codes[k], highs[k], normalize)


@njit(cache=True)
def step(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, ceil_ext, aprob, lat_p, heap_t,
         heap_r, log, bkey, ix, win_t, win_c, ccount, rngs, routing, choices, until, prev, interval, arrival_rate,
         sim_bands, trk, wband, e2e, penalty, scale, steps, status, terminated, truncated, rewards):
    """One step of every cluster whose policies are all compiled: apply the routing
    ``choices`` (Routing), advance each cluster to its next decision or ``until[c]``, count
    the interval's arrivals per band (interval kinds) and advance the cost trackers.
    Returns whether any cluster's episode ended."""
    C = clu_i.shape[1]
    req_i, req_f, unit_i, inst_i, inst_f, ent = (borrowed(req_i), borrowed(req_f), borrowed(unit_i),
                                                 borrowed(inst_i), borrowed(inst_f), borrowed(ent))
    clu_i, clu_f, heap_t, heap_r, bkey, ix = (borrowed(clu_i), borrowed(clu_f), borrowed(heap_t), borrowed(heap_r),
                                              borrowed(bkey), borrowed(ix))
    if routing:
        route_all(req_i, req_f, unit_i, inst_i, inst_f, ent, clu_i, clu_f, heap_t, heap_r, bkey, ix, win_t, win_c,
                  ccount, lat_p, choices)
    else:
        for c in range(C):
            prev[c] = clu_i[CI_PTR, c]
    advance(req_i, req_f, unit_i, inst_i, inst_f, ent, run, seg, clu_i, clu_f, bq, ceil_ext, aprob, lat_p, heap_t,
            heap_r, log, bkey, ix, win_t, win_c, ccount, rngs, np.ones(C, np.bool_), until)
    if not routing:
        arrival_rates(req_i, clu_i, sim_bands, prev, interval, arrival_rate)
    done = np.empty(C, np.bool_)
    for c in range(C):
        s = clu_i[CI_STATUS, c]
        status[c] = s
        terminated[c] = s == ST_DONE
        truncated[c] = s == ST_HORIZON
        done[c] = terminated[c] or truncated[c]
        steps[c] += 1
    track_costs(req_i, req_f, clu_i, clu_f, trk, wband, e2e, penalty, scale, done, rewards)
    return done.any()


@njit(cache=True)
def apply_ceilings(actions, sim_bands, n_bands, bq, clu_f, ceilings, ceil_ext, wake_unchanged):
    """FlowControl actions: each cluster's per-band ceilings are the cumulative minimum of
    its action (a lower band never gets more than a higher one), mapped to the simulator's
    bands; a cluster with a queue is woken for a dispatch cycle now (Simulator.wake_dispatch),
    with ``wake_unchanged`` False only if its ceilings changed."""
    for c in range(actions.shape[0]):
        low = np.inf
        changed = wake_unchanged
        for b in range(actions.shape[1]):
            low = min(low, actions[c, b])
            changed |= ceilings[c, b] != low
            ceilings[c, b] = low
        if not changed:
            continue
        queued = False
        for b in range(n_bands):
            ceil_ext[c, b] = ceilings[c, sim_bands[c, b]]
            queued |= bq[BQ_LEN, c, b] > 0
        if queued:
            clu_f[CF_NEXT_CYCLE, c] = min(clu_f[CF_NEXT_CYCLE, c], clu_f[CF_NOW, c])


@njit(cache=True)
def apply_flow_params(params, n_bands, bq, clu_f):
    """FlowControl ``action="soft-reflective"``: each cluster's soft-reflective ramp and
    period scale (``params[c]``). A cluster whose parameters change and that has a queue is
    woken for a dispatch cycle now; unchanged ones run their duty cycle undisturbed."""
    for c in range(params.shape[0]):
        if clu_f[CF_F0, c] == params[c, 0] and clu_f[CF_F1, c] == params[c, 1]:
            continue
        clu_f[CF_F0, c] = params[c, 0]
        clu_f[CF_F1, c] = params[c, 1]
        queued = False
        for b in range(n_bands):
            queued |= bq[BQ_LEN, c, b] > 0
        if queued:
            clu_f[CF_NEXT_CYCLE, c] = min(clu_f[CF_NEXT_CYCLE, c], clu_f[CF_NOW, c])


@njit(cache=True)
def apply_rejection(actions, sheddable, sim_bands, n_bands, probs, aprob):
    """Admission actions: the rejection probability of each sheddable scenario band,
    mapped to the simulator's bands."""
    for c in range(actions.shape[0]):
        for k in range(len(sheddable)):
            probs[c, sheddable[k]] = actions[c, k]
        for b in range(n_bands):
            aprob[c, b] = probs[c, sim_bands[c, b]]
