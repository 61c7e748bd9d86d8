"""The batched engine state: C clusters' requests, instances and gateways in shared arrays.

:class:`EngineState` is an explicit structure (in the spirit of gymnax / Jumanji): a few
2-D numpy arrays, one row per field (:mod:`~llmsched_gym.engine.layout`) and one column
per request, instance or cluster, with per-cluster offsets. The compiled
:func:`~llmsched_gym.engine.kernel.advance` is a function of it. Cluster ``c`` owns
requests ``REQ0[c]:REQ1[c]`` and instances ``INST0[c]:INST1[c]``; each instance owns a
prefix-cache table with one entry per distinct unit key of its cluster's workload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba.typed import List

from . import kernel
from .layout import (
    BQ_HEAD, BQ_TAIL, CF_DISP_INT, CF_EXP_OUT, CF_FT_DELAY, CF_HORIZON, CF_NEXT_CYCLE, CF_SCRAPE_INT, CF_TTL,
    CI_BAND_CAP, CI_BS, CI_BUDGET, CI_INST0, CI_INST1, CI_INTEGER_US, CI_LAT_KIND, CI_MAX_LEN, CI_MAX_SEQS,
    CI_NBANDS, CI_REQ0, CI_REQ1, CI_SKIP, II_CLUSTER, II_ENT0, II_LRU_HEAD, II_LRU_TAIL, II_TOTAL,
    II_WQ_HEAD, II_WQ_TAIL, IF_NEXT_T, SEGMENT_CHUNK, N_CF, N_CI, N_EN, N_IF, N_II, N_RF, N_RI, N_RUN, N_U,
    RF_ARRIVAL, RF_DELAY, RF_DISPATCH, RF_END, RF_ENQUEUED, RF_FINISH, RF_FINISH_DELAY, RF_FIRST, RI_BAND,
    RI_INPUT, RI_INSTANCE, RI_NEXT, RI_OUTPUT, RI_PRIORITY, RI_UNIT0, RI_UNIT1, EN_NEXT, EN_PREV, U_BLOCKS,
    U_END, U_KEY,
)
from .steptime import N_PARAMS, lower
from .units import prefix_units


@dataclass
class ClusterInputs:
    """What one cluster of a batch is built from (prepared by the simulator)."""

    workload: object  # llmsched_gym.workload.Workload
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


class EngineState:
    """The arrays of a batch of clusters (see the module docstring)."""

    def __init__(self, clusters: list[ClusterInputs]):
        C = len(clusters)
        n_req = [len(x.workload) for x in clusters]
        req_off = np.concatenate([[0], np.cumsum(n_req)]).astype(np.int64)
        inst_off = np.concatenate([[0], np.cumsum([x.instances for x in clusters])]).astype(np.int64)
        N, NI = int(req_off[-1]), int(inst_off[-1])
        units = [prefix_units(x.workload, x.engine.block_size) for x in clusters]
        unit_off = np.concatenate([[0], np.cumsum([len(u[1]) for u in units])]).astype(np.int64)
        ent_sizes = [x.instances * u[4] for x, u in zip(clusters, units)]
        ent_off = np.concatenate([[0], np.cumsum(ent_sizes)]).astype(np.int64)
        B = max([x.num_bands for x in clusters] + [1])
        S = max([x.engine.max_num_seqs for x in clusters] + [1])

        self.req_i = np.zeros((N_RI, N), np.int64)
        self.req_f = np.zeros((N_RF, N))
        self.unit_i = np.zeros((N_U, int(unit_off[-1])), np.int64)
        self.inst_i = np.zeros((N_II, NI), np.int64)
        self.inst_f = np.zeros((N_IF, NI))
        self.ent = np.zeros((N_EN, int(ent_off[-1])), np.int64)
        self.ent[EN_PREV] = self.ent[EN_NEXT] = -1
        self.run = np.zeros((NI, N_RUN, S), np.int64)
        self.seg = np.zeros((NI, SEGMENT_CHUNK))
        self.clu_i = np.zeros((N_CI, C), np.int64)
        self.clu_f = np.zeros((N_CF, C))
        self.bq = np.zeros((3, C, B), np.int64)
        self.bq[BQ_HEAD] = self.bq[BQ_TAIL] = -1
        self.ceil_ext = np.ones((C, B))
        self.aprob = np.zeros((C, B))
        self.lat_p = np.zeros((C, N_PARAMS))
        self.heap_t = np.zeros(N)
        self.heap_r = np.zeros(N, np.int64)
        self.log = np.zeros(N, np.int64)
        self.rngs = List()

        ri, rf = self.req_i, self.req_f
        for c, (x, (uoff, keys, blocks, ends, n_keys)) in enumerate(zip(clusters, units)):
            w = x.workload
            r0, r1, i0, i1 = req_off[c], req_off[c + 1], inst_off[c], inst_off[c + 1]
            ri[RI_INPUT, r0:r1] = w.input_tokens
            ri[RI_OUTPUT, r0:r1] = w.output_tokens
            ri[RI_PRIORITY, r0:r1] = w.priority
            ri[RI_BAND, r0:r1] = x.band_index
            ri[RI_UNIT0, r0:r1] = uoff[:-1] + unit_off[c]
            ri[RI_UNIT1, r0:r1] = uoff[1:] + unit_off[c]
            ri[RI_INSTANCE, r0:r1] = -1
            ri[RI_NEXT, r0:r1] = -1
            rf[RF_ARRIVAL, r0:r1] = w.arrival_s
            for f in (RF_DISPATCH, RF_FIRST, RF_FINISH, RF_END, RF_ENQUEUED):
                rf[f, r0:r1] = np.nan
            # Per-request overheads, elementwise as the step-time model prices them.
            rf[RF_DELAY, r0:r1] = x.latency.arrival_delay_us(w.input_tokens) * 1e-6
            rf[RF_FINISH_DELAY, r0:r1] = x.latency.finish_delay_us(w.output_tokens) * 1e-6
            u0, u1 = unit_off[c], unit_off[c + 1]
            self.unit_i[U_KEY, u0:u1], self.unit_i[U_BLOCKS, u0:u1], self.unit_i[U_END, u0:u1] = keys, blocks, ends

            ii = self.inst_i
            ii[II_CLUSTER, i0:i1] = c
            ii[II_TOTAL, i0:i1] = x.kv_blocks
            ii[II_WQ_HEAD, i0:i1] = ii[II_WQ_TAIL, i0:i1] = -1
            ii[II_LRU_HEAD, i0:i1] = ii[II_LRU_TAIL, i0:i1] = -1
            ii[II_ENT0, i0:i1] = ent_off[c] + n_keys * np.arange(x.instances)
            self.inst_f[IF_NEXT_T, i0:i1] = np.inf

            ci, cf = self.clu_i, self.clu_f
            ci[CI_REQ0, c], ci[CI_REQ1, c], ci[CI_INST0, c], ci[CI_INST1, c] = r0, r1, i0, i1
            ci[CI_NBANDS, c] = x.num_bands
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
            self.rngs.append(x.rng)
        self.req_off, self.inst_off = req_off, inst_off

    @property
    def num_clusters(self) -> int:
        return self.clu_i.shape[1]

    def arrays(self) -> tuple:
        """The kernel's arguments, in :func:`~llmsched_gym.engine.kernel.advance` order."""
        return (self.req_i, self.req_f, self.unit_i, self.inst_i, self.inst_f, self.ent, self.run, self.seg,
                self.clu_i, self.clu_f, self.bq, self.ceil_ext, self.aprob, self.lat_p, self.heap_t, self.heap_r,
                self.log, self.rngs)

    def advance(self, active: np.ndarray, until: np.ndarray) -> None:
        """Advance the clusters marked in ``active`` to ``until`` or their next pause."""
        kernel.advance(*self.arrays(), active, until)

    def scrape(self, c: int, t: float) -> None:
        kernel.scrape(self.run, self.inst_i, self.inst_f, self.seg, self.clu_i, self.clu_f, c, t)

    def dispatch_to(self, c: int, r: int, i: int) -> bool:
        """Send global request ``r`` of cluster ``c`` to its local instance ``i``; False if dropped."""
        return kernel.dispatch_to(self.req_i, self.req_f, self.unit_i, self.inst_i, self.inst_f, self.ent,
                                  self.clu_i, self.clu_f, self.heap_t, self.heap_r, c, r, i)

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
                                           float(self.clu_f[0, c])) for g in range(i0, i1)], np.int64)
