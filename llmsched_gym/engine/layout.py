"""Field indices of the batched engine state (see :mod:`llmsched_gym.engine.state`).

The state of C clusters lives in a few 2-D numpy arrays, one row per field and one
column per request, instance or cluster; the compiled kernels index them with these
constants (numba folds module-level integers into the code).

numba's on-disk cache is keyed on the source of the module that defines a function, not
on the modules whose constants it folds in: after editing this file, delete the cached
kernels (``rm llmsched_gym/engine/__pycache__/*.nb[ic]``) or they keep the old values.
"""

# Requests, int64 ``req_i[field, r]`` (all clusters' requests back to back).
(RI_INPUT, RI_OUTPUT, RI_BAND, RI_PRIORITY, RI_UNIT0, RI_UNIT1, RI_GENERATED, RI_HELD, RI_INSTANCE,
 RI_PREFIX_HIT, RI_SCHEDULED, RI_PREEMPTIONS, RI_OUTCOME, RI_PREFILL_EST, RI_NEXT, RI_CLOSED, RI_BK0,
 RI_BK1, RI_CLASS, RI_CPU_HIT, RI_PD, RI_DECODE, RI_PD_PRIVATE) = range(23)
N_RI = 23  # RI_CLASS: the request's prefix class for LMetric's hotspot detector (-1: none)  # RI_CLOSED: the environments' reward bookkeeping (cost of the request is final)
# RI_CPU_HIT: prompt tokens of the first schedule loaded from the CPU tier (part of RI_PREFIX_HIT).
# RI_PD: the request's P/D stage (PD_*); RI_DECODE: its decode instance (local index, -1: aggregated);
# RI_PD_PRIVATE: its private blocks held on the prefill instance while its KV transfers.
# RI_BK0:RI_BK1: the request's router block keys in ``bkey`` (dense per cluster), for the
# compiled llm-d router's approximate prefix index.
# Requests, float64 ``req_f[field, r]``: times in seconds; delays precomputed per request.
(RF_ARRIVAL, RF_DISPATCH, RF_FIRST, RF_FINISH, RF_END, RF_ENQUEUED, RF_DELAY, RF_FINISH_DELAY,
 RF_SENT, RF_TRANSFER) = range(10)
N_RF = 10  # RF_TRANSFER: seconds its KV took from the prefill to the decode instance (nan: aggregated)
# Prefix units, int64 ``unit_i[field, u]``: cluster-local dense key, full blocks, token end.
U_KEY, U_BLOCKS, U_END = range(3)
N_U = 3
# Instances, int64 ``inst_i[field, g]``.
(II_CLUSTER, II_TOTAL, II_USED, II_EVICTABLE, II_NRUN, II_WQ_HEAD, II_WQ_TAIL, II_WQ_LEN, II_PENDING,
 II_SEG_LEN, II_SEG_USED0, II_ITERS, II_LRU_HEAD, II_LRU_TAIL, II_ENT0, II_INFLIGHT, II_QPREFILL,
 II_SCR_WAITING, II_SCR_RUNNING, II_IX0, II_IX_HEAD, II_IX_TAIL, II_IX_COUNT, II_ANON_FRONT, II_EVICTION,
 II_RESTART, II_ENT_MASK, II_ENT_DIRECT, II_CPU0, II_CPU_MASK, II_CPU_DIRECT, II_CPU_CAP, II_CPU_USED,
 II_CPU_HEAD, II_CPU_TAIL, II_CPU_VISIBLE, II_CPU_OWNER) = range(37)
N_II = 37
# II_CPU*: the CPU KV tier, a second table of units in ``ent`` (slots CPU0 .. CPU0 + MASK, after
# every GPU table) with its LRU queue (HEAD oldest) and capacity / use in blocks (CAP 0: no tier);
# II_CPU_VISIBLE: the precise prefix view (cached_tokens) counts the tier's units; II_CPU_OWNER:
# the instance whose CPU_USED / HEAD / TAIL the tier uses (itself, or the cluster's first if shared).
# II_IX*: the llm-d router's per-instance LRU of block keys (``ix[field, e]``);
# II_ANON_FRONT: vLLM order, anonymous free blocks ahead of the first cached unit;
# II_EVICTION: the instance's eviction order (EVICT_*); II_RESTART: BLIS restart preemption;
# II_ENT0 / II_ENT_MASK: the instance's prefix-cache table, slots ENT0 .. ENT0 + MASK;
# II_ENT_DIRECT: the table has a slot per key (key k lives in slot k, no probing).
# Instances, float64 ``inst_f[field, g]``.
IF_NEXT_T, IF_SCR_KV, IF_SCRAPE_T, IF_LT_TOKENS, IF_CPU_LOAD_US, IF_ROUTE_W, IF_STEP_S = range(7)
N_IF = 7  # IF_CPU_LOAD_US: microseconds to load one token's KV from the CPU tier
# IF_STEP_S: seconds of the instance's current (last planned) iteration, for CF_ASYNC_LAG.
# IF_ROUTE_W: ROUTER_LMETRIC_WEIGHTED's factor on the instance's LMetric score (Gateway-v0's routing action).
# Running batch, int64 ``run[g, field, slot]`` in admission order.
RUN_ID, RUN_INP, RUN_OUT, RUN_COMP, RUN_GEN, RUN_SHARED, RUN_TAKE, RUN_PREFILL, RUN_DECODE, RUN_DONE = range(10)
N_RUN = 10
# Prefix-cache entries, int64 ``ent[e, field]``: per instance an open-addressing table (linear
# probing, backward-shift deletion) of its cached units; EN_KEY is the unit's key + 1 (0: empty).
EN_REF, EN_BLOCKS, EN_PREV, EN_NEXT, EN_ANON_AFTER, EN_KEY = range(6)
N_EN = 6  # EN_ANON_AFTER: vLLM order, anonymous free blocks released right after the unit
# Clusters, int64 ``clu_i[field, c]``.
(CI_REQ0, CI_REQ1, CI_INST0, CI_INST1, CI_PTR, CI_ACTIVE, CI_HEAP_LEN, CI_NBANDS, CI_STATUS, CI_PENDING,
 CI_DECISION, CI_HAS_DECISION, CI_ROUTER, CI_RR_NEXT, CI_FLOW, CI_TICK, CI_ADMIT, CI_MAX_SEQS, CI_BUDGET,
 CI_BS, CI_MAX_LEN, CI_SKIP, CI_BAND_CAP, CI_LAT_KIND, CI_INTEGER_US, CI_LOG_LEN, CI_LOG_FINISH,
 CI_LAST_ROUTE, CI_SAT_KIND, CI_WIN_HEAD, CI_WIN_LEN, CI_NCLASSES, CI_NSERVE, CI_NPREFILL, CI_PD,
 CI_EVICT_MAX, CI_TO_PTR) = range(37)
N_CI = 37  # CI_TO_PTR: the next arrival (cluster-local) whose client timeout is still to come  # CI_WIN_*: LMetric's detector window, a ring in ``win_t``/``win_c`` over the cluster's request slots
# CI_NSERVE: instances that take new requests, the prefix CI_INST0 .. CI_INST0 + NSERVE of the cluster's
# (all of them unless an autoscaler drains or has not started the rest); routers and saturation read only those.
# CI_NPREFILL: P/D disaggregation's prefill pool, the cluster's first NPREFILL instances (0: every instance
# aggregated, P/D off); CI_PD: the compiled P/D decision (PD_DECIDE_*), parameters in CF_PD0, CF_PD1.
# CI_EVICT_MAX: llm-d's demand-driven in-flight eviction, most revocations per decision (0: off).
# Clusters, float64 ``clu_f[field, c]``; P0.. are the compiled policies' parameters.
(CF_NOW, CF_HORIZON, CF_NEXT_SCRAPE, CF_NEXT_CYCLE, CF_SATURATION, CF_SCRAPE_INT, CF_TTL, CF_DISP_INT,
 CF_FT_DELAY, CF_EXP_OUT, CF_STATIONARY, CF_R0, CF_F0, CF_F1, CF_A0, CF_A1, CF_R1, CF_R2, CF_R3,
 CF_SAT_QUEUE, CF_SAT_KV, CF_SAT_STALE, CF_SAT_MAX_REQ, CF_SAT_MAX_TOK, CF_A2, CF_A3, CF_PD0, CF_PD1,
 CF_XFER_US, CF_XFER_LAT, CF_EVICT_GRACE, CF_EVICT_GATE, CF_ASYNC_LAG, CF_TIMEOUT) = range(34)
N_CF = 34  # CF_TIMEOUT: the clients' timeout, seconds after arrival (inf: none)  # CF_ASYNC_LAG: iterations vLLM's async scheduling delays a request's outputs by (0 or 1)  # CF_SAT_*: the saturation detector's parameters (llmsched_gym.gateway.saturation)
# CF_XFER_US / CF_XFER_LAT: P/D's KV transfer, microseconds per prompt token and seconds per transfer.
# CF_EVICT_GRACE: seconds after a revocation before the next eviction decision (its confirmation grace);
# CF_EVICT_GATE: the time the next decision may run.
# The llm-d router's block-key index entries, int64 ``ix[field, e]``: instance g's entry
# for dense key k is II_IX0[g] + k.
IX_PRESENT, IX_PREV, IX_NEXT = range(3)
N_IX = 3
# Band queues, int64 ``bq[field, c, band]`` (band 0 = highest priority).
BQ_HEAD, BQ_TAIL, BQ_LEN = range(3)

# Saturation detectors (SaturationConfig: kind, concurrency mode).
SAT_UTILIZATION, SAT_REQUESTS, SAT_TOKENS, SAT_HYBRID = range(4)

# Eviction orders (EngineConfig.eviction).
EVICT_CACHED_LAST, EVICT_VLLM = range(2)

# Status of a cluster after an advance.
ST_TIME, ST_HORIZON, ST_DONE, ST_ROUTE, ST_ADMIT, ST_CEILINGS = range(6)
STATUS_NAMES = ("time", "horizon", "done", "route", "admit", "ceilings")

# Compiled policies (0 = decided in Python at a pause).
(ROUTER_PY, ROUTER_ROUND_ROBIN, ROUTER_RANDOM, ROUTER_JSQ, ROUTER_VLLM_DP, ROUTER_LEAST_TOKENS, ROUTER_LLMD,
 ROUTER_LMETRIC, ROUTER_BAILIAN, ROUTER_AIBRIX, ROUTER_DYNAMO, ROUTER_SGLANG, ROUTER_BAILIAN_SAMPLING,
 ROUTER_PREDICTED_LATENCY, ROUTER_POLYSERVE, ROUTER_PREBLE, ROUTER_LMETRIC_WEIGHTED) = range(17)
FLOW_NONE, FLOW_PY, FLOW_STATIC, FLOW_HOLDBACK, FLOW_SOFT_REFLECTIVE, FLOW_FIXED = range(6)
ADMIT_PY, ADMIT_ALWAYS, ADMIT_LEGACY, ADMIT_PROBABILISTIC, ADMIT_BAND_PROBS = range(5)

# P/D disaggregation: a request's stage (RI_PD) and the compiled decisions (CI_PD).
PD_AGGREGATED, PD_PREFILL, PD_TRANSFER, PD_ARRIVED, PD_DECODE = range(5)
PD_DECIDE_ALWAYS, PD_DECIDE_LLMD, PD_DECIDE_DYNAMO = range(3)

# Outcomes (same codes as llmsched_gym.engine.requests).
IN_FLIGHT, FINISHED, REJECTED, EXPIRED, DROPPED, EVICTED, TIMED_OUT = range(7)

#: Decode iterations planned at once (bounds the per-instance segment buffer). A shorter
#: cap would not change any iteration, but the extra segment ends are events at which a
#: lazy metrics scrape is taken, which moves scrape ticks by float rounding.
SEGMENT_CHUNK = 4096
