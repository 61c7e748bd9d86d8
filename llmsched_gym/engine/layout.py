"""Layout constants of the batched engine state (see :mod:`llmsched_gym.engine.state`).

The field indices (``RI_INPUT``, ``N_RI``, ...) are generated from the declarative table in
:mod:`llmsched_gym.engine.fields`; the codes below name the values some fields hold. The
compiled kernels import these constants (numba folds module-level integers into the code;
its on-disk cache is keyed on the engine's sources, so an edit here recompiles).
"""

from .fields import constants

globals().update(constants())

# Saturation detectors (SaturationConfig: kind, concurrency mode).
SAT_UTILIZATION, SAT_REQUESTS, SAT_TOKENS, SAT_HYBRID = range(4)

# The utilization detector's stalenessPolicy (llm-d-router): a stale endpoint scores 1.0, or
# leaves the average (an all-stale pool is 0.0).
STALE_SATURATED, STALE_IGNORE = range(2)

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
IN_FLIGHT, FINISHED, REJECTED, EXPIRED, DROPPED, EVICTED, TIMED_OUT, CRASHED = range(8)

#: Decode iterations planned at once (bounds the per-instance segment buffer). A shorter
#: cap would not change any iteration, but the extra segment ends are events at which a
#: lazy metrics scrape is taken, which moves scrape ticks by float rounding.
SEGMENT_CHUNK = 4096
