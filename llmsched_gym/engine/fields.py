"""The engine state's fields, declared once.

Every array of :class:`~llmsched_gym.engine.state.EngineState` is a :class:`Record`: which
index *space* its slot axis runs over (requests, instances, clusters, ...), its dtype, and
its fields, each either a plain value or a *pointer*: an absolute index into a space. From
this table come the layout constants (``RI_INPUT``, ``N_RI``, ... in
:mod:`~llmsched_gym.engine.layout`), the allocation, the defaults a loaded slot starts
from, and the re-basing of pointers when a cluster's slot moves (a regrown state, a
forked cluster). A new field is one line here; the kernel refers to it by its constant.

A pointer holds -1 (or any negative value) for "none"; only values >= 0 are re-based.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Index spaces with per-cluster offsets (``EngineState.<space>_off``), and ``clu`` (one
#: slot per cluster). ``cpu`` entries live in ``ent`` after every GPU table.
SPACES = ("req", "unit", "ent", "cpu", "inst", "bkey", "ix", "clu")
SELF = "self"  # a pointer into the space of the entry that holds it (ent's GPU or CPU tables)


@dataclass(frozen=True)
class Field:
    """One field of a record: its layout constant, what it holds, its start value."""

    name: str  # the layout constant (e.g. "RI_INPUT")
    points_to: str | None = None  # a space (or SELF) whose absolute index it holds; None: a value
    default: float = 0.0  # what a loaded slot starts with (load() may then set it)
    doc: str = ""
    content: bool = False  # what the request is (load() writes it from its workload row; the kernel never does)


@dataclass(frozen=True)
class Record:
    """One array of the state.

    ``shape`` names its axes: ``"field"`` (one row per field), ``"slot"`` (the space's
    slots of every cluster, back to back), or a fixed extent (``"bands"``, ``"seqs"``,
    ``"segment"``, ``"params"``). A record without fields holds one value per slot
    (``points_to`` / ``default`` then describe that value).
    """

    array: str  # EngineState attribute
    spaces: tuple[str, ...]  # the slot axis' space(s): ent holds the GPU tables, then the CPU tiers
    dtype: type
    shape: tuple[str, ...]
    fields: tuple[Field, ...] = ()
    prefix: str = ""  # constant prefix of its fields, for N_<prefix> (e.g. "RI")
    points_to: str | None = None
    default: float = 0.0
    occupied_by: str | None = None  # a field whose 0 marks an empty slot, whose other fields the kernel never reads
    static: bool = False  # written by load() only, never by the kernel: a slot holding the same workload has it

    @property
    def field_axis(self) -> int | None:
        return self.shape.index("field") if "field" in self.shape else None

    @property
    def slot_axis(self) -> int:
        return self.shape.index("slot")

    def shape_for(self, slots: dict, extents: dict) -> tuple[int, ...]:
        """The array's shape for ``slots`` per space and the fixed ``extents``."""
        return tuple(len(self.fields) if axis == "field" else int(sum(slots[s] for s in self.spaces))
                     if axis == "slot" else extents[axis] for axis in self.shape)

    def field(self, arr: np.ndarray, k: int | None) -> np.ndarray:
        """Field ``k``'s view of ``arr`` (this record's array or a slice of it keeping its axes;
        None: the whole of a record without fields)."""
        if k is None:
            return arr
        idx = [slice(None)] * arr.ndim
        idx[self.field_axis] = k
        return arr[tuple(idx)]


def _fields(*specs) -> tuple[Field, ...]:
    return tuple(s if isinstance(s, Field) else Field(s) for s in specs)


REQUEST_INT = Record("req_i", ("req",), np.int64, ("field", "slot"), prefix="RI", fields=_fields(
    Field("RI_INPUT", content=True), Field("RI_OUTPUT", content=True), Field("RI_BAND", content=True),
    Field("RI_PRIORITY", content=True),
    Field("RI_UNIT0", "unit", doc="first of the request's prefix units", content=True),
    Field("RI_UNIT1", "unit", doc="end of its prefix units", content=True),
    "RI_GENERATED", "RI_HELD",
    Field("RI_INSTANCE", default=-1, doc="its instance, local to the cluster (-1: none yet)"),
    "RI_PREFIX_HIT", "RI_SCHEDULED", "RI_PREEMPTIONS", "RI_OUTCOME", "RI_PREFILL_EST",
    Field("RI_NEXT", "req", default=-1, doc="next request in its waiting or band queue"),
    Field("RI_CLOSED", doc="the environments' reward bookkeeping (cost of the request is final)"),
    Field("RI_BK0", "bkey", doc="first of its router block keys (compiled llm-d router's prefix index)", content=True),
    Field("RI_BK1", "bkey", doc="end of its router block keys", content=True),
    Field("RI_CLASS", default=-1, doc="its prefix class for LMetric's hotspot detector (-1: none)", content=True),
    Field("RI_CPU_HIT", doc="prompt tokens of the first schedule loaded from the CPU tier (part of RI_PREFIX_HIT)"),
    Field("RI_PD", doc="its P/D stage (PD_*)"),
    Field("RI_DECODE", default=-1, doc="its decode instance, local (-1: aggregated)"),
    Field("RI_PD_PRIVATE", doc="private blocks held on the prefill instance while its KV transfers"),
    Field("RI_RETRIES", doc="times the gateway re-sent it after its instance crashed (faults)"),
))
REQUEST_FLOAT = Record("req_f", ("req",), np.float64, ("field", "slot"), prefix="RF", fields=_fields(
    "RF_ARRIVAL",
    Field("RF_DISPATCH", default=np.nan), Field("RF_FIRST", default=np.nan), Field("RF_FINISH", default=np.nan),
    Field("RF_END", default=np.nan), Field("RF_ENQUEUED", default=np.nan),
    Field("RF_DELAY", doc="arrival delay at its instance (step-time model), seconds", content=True),
    Field("RF_FINISH_DELAY", doc="finish delay (step-time model), seconds", content=True),
    "RF_SENT",
    Field("RF_TRANSFER", default=np.nan, doc="seconds its KV took from the prefill to the decode instance"),
))
UNIT = Record("unit_i", ("unit",), np.int32, ("field", "slot"), prefix="U", static=True, fields=_fields(
    Field("U_KEY", doc="cluster-local dense key"), Field("U_BLOCKS", doc="full blocks"),
    Field("U_END", doc="token end"),
))
INSTANCE_INT = Record("inst_i", ("inst",), np.int64, ("field", "slot"), prefix="II", fields=_fields(
    Field("II_CLUSTER", "clu"), "II_TOTAL", "II_USED", "II_EVICTABLE", "II_NRUN",
    Field("II_WQ_HEAD", "req", default=-1), Field("II_WQ_TAIL", "req", default=-1), "II_WQ_LEN", "II_PENDING",
    "II_SEG_LEN", "II_SEG_USED0", "II_ITERS",
    Field("II_LRU_HEAD", "ent", default=-1), Field("II_LRU_TAIL", "ent", default=-1),
    Field("II_ENT0", "ent", doc="its prefix-cache table, slots ENT0 .. ENT0 + ENT_MASK"),
    "II_INFLIGHT", "II_QPREFILL", "II_SCR_WAITING", "II_SCR_RUNNING",
    Field("II_IX0", "ix", doc="the llm-d router's LRU of block keys for this instance"),
    Field("II_IX_HEAD", "ix", default=-1), Field("II_IX_TAIL", "ix", default=-1), "II_IX_COUNT",
    Field("II_ANON_FRONT", doc="vLLM order: anonymous free blocks ahead of the first cached unit"),
    Field("II_EVICTION", doc="eviction order (EVICT_*)"), Field("II_RESTART", doc="BLIS restart preemption"),
    "II_ENT_MASK", Field("II_ENT_DIRECT", doc="the table has a slot per key (no probing)"),
    Field("II_CPU0", "cpu", doc="its CPU KV tier table (after every GPU table)"), "II_CPU_MASK", "II_CPU_DIRECT",
    Field("II_CPU_CAP", doc="tier capacity in blocks (0: no tier)"), "II_CPU_USED",
    Field("II_CPU_HEAD", "cpu", default=-1, doc="the tier's LRU queue, oldest first"),
    Field("II_CPU_TAIL", "cpu", default=-1),
    Field("II_CPU_VISIBLE", doc="the precise prefix view counts the tier's units"),
    Field("II_CPU_OWNER", "inst", doc="the instance whose tier use and queue this one uses (shared tier)"),
    Field("II_DOWN", doc="crashed and not yet restarted (faults): no endpoint, not scraped"),
    Field("II_NOSCRAPE", doc="scrape outages covering it now (faults): its metrics stop refreshing"),
))
INSTANCE_FLOAT = Record("inst_f", ("inst",), np.float64, ("field", "slot"), prefix="IF", fields=_fields(
    Field("IF_NEXT_T", default=np.inf), "IF_SCR_KV", "IF_SCRAPE_T",
    "IF_LT_TOKENS", Field("IF_CPU_LOAD_US", doc="microseconds to load one token's KV from the CPU tier"),
    Field("IF_ROUTE_W", default=1.0, doc="ROUTER_LMETRIC_WEIGHTED's factor on its LMetric score"),
    Field("IF_STEP_S", doc="seconds of its current (last planned) iteration, for CF_ASYNC_LAG"),
    Field("IF_SLOW", default=1.0, doc="factor on its iterations' compute time (a straggler, faults)"),
))
RUNNING = Record("run", ("inst",), np.int64, ("slot", "field", "seqs"), prefix="RUN", fields=_fields(
    Field("RUN_ID", "req"), "RUN_INP", "RUN_OUT", "RUN_COMP", "RUN_GEN", "RUN_SHARED", "RUN_TAKE", "RUN_PREFILL",
    "RUN_DECODE", "RUN_DONE",
))
ENTRY = Record("ent", ("ent", "cpu"), np.int32, ("slot", "field"), prefix="EN", occupied_by="EN_KEY", fields=_fields(
    "EN_REF", "EN_BLOCKS", Field("EN_PREV", SELF), Field("EN_NEXT", SELF),
    Field("EN_ANON_AFTER", doc="vLLM order: anonymous free blocks released right after the unit"),
    Field("EN_KEY", doc="the unit's key + 1 (0: empty slot)"),
))
CLUSTER_INT = Record("clu_i", ("clu",), np.int64, ("field", "slot"), prefix="CI", fields=_fields(
    Field("CI_REQ0", "req"), Field("CI_REQ1", "req"), Field("CI_INST0", "inst"), Field("CI_INST1", "inst"),
    Field("CI_PTR", doc="arrivals so far (a prefix of the workload)"), "CI_ACTIVE", "CI_HEAP_LEN", "CI_NBANDS",
    "CI_STATUS", Field("CI_PENDING", "req"), "CI_DECISION", "CI_HAS_DECISION", "CI_ROUTER", "CI_RR_NEXT",
    "CI_FLOW", "CI_TICK", "CI_ADMIT", "CI_MAX_SEQS", "CI_BUDGET", "CI_BS", "CI_MAX_LEN", "CI_SKIP",
    "CI_BAND_CAP", "CI_LAT_KIND", "CI_INTEGER_US", "CI_LOG_LEN", "CI_LOG_FINISH",
    Field("CI_LAST_ROUTE", "req", default=-1), "CI_SAT_KIND",
    Field("CI_WIN_HEAD", doc="LMetric's detector window, a ring over the cluster's request slots"), "CI_WIN_LEN",
    "CI_NCLASSES",
    Field("CI_NSERVE", doc="instances that take new requests, the cluster's first NSERVE"),
    Field("CI_NPREFILL", doc="P/D's prefill pool, the cluster's first NPREFILL instances (0: P/D off)"),
    Field("CI_PD", doc="the compiled P/D decision (PD_DECIDE_*)"),
    Field("CI_EVICT_MAX", doc="llm-d's in-flight eviction, most revocations per decision (0: off)"),
    Field("CI_TO_PTR", doc="the next arrival (cluster-local) whose client timeout is still to come"),
    Field("CI_BOOKS", doc="the compiled router whose books dispatches and finishes keep (its prefix index, tokens "
                          "sent): CI_ROUTER, or the router a planner took routing over from (ROUTER_PY: none)"),
    Field("CI_WIN_CAP", doc="LMetric's detector window: the ring's capacity (the requests the cluster was loaded with)"),
    Field("CI_FAULTS", doc="a fault schedule may crash instances or stop scrapes: per-instance metric ages"),
    Field("CI_NDOWN", doc="crashed instances not yet restarted"),
    Field("CI_RETRY_MAX", doc="times the gateway re-sends a request lost to a crash (0: it fails)"),
    Field("CI_STALE_POLICY", doc="the utilization detector's stalenessPolicy (STALE_*)"),
    Field("CI_LINK_DOWN", doc="P/D KV link outages now (faults): transfers in flight or starting fail"),
    Field("CI_KV_RECOMPUTE", doc="a failed KV transfer is recomputed on the decode instance (else the request fails)"),
))
CLUSTER_FLOAT = Record("clu_f", ("clu",), np.float64, ("field", "slot"), prefix="CF", fields=_fields(
    "CF_NOW", "CF_HORIZON", "CF_NEXT_SCRAPE", Field("CF_NEXT_CYCLE", default=np.inf), "CF_SATURATION",
    "CF_SCRAPE_INT", "CF_TTL", "CF_DISP_INT", "CF_FT_DELAY", "CF_EXP_OUT", "CF_STATIONARY",
    Field("CF_R0", doc="the compiled router's parameters: R0..R3"), "CF_F0", "CF_F1",
    Field("CF_A0", doc="the compiled admission's parameters: A0..A3"), "CF_A1", "CF_R1", "CF_R2", "CF_R3",
    Field("CF_SAT_QUEUE", doc="the saturation detector's parameters: SAT_*"), "CF_SAT_KV", "CF_SAT_STALE",
    "CF_SAT_MAX_REQ", "CF_SAT_MAX_TOK", "CF_A2", "CF_A3", "CF_PD0", "CF_PD1",
    Field("CF_XFER_US", doc="P/D KV transfer: microseconds per prompt token"),
    Field("CF_XFER_LAT", doc="P/D KV transfer: seconds per transfer"),
    Field("CF_EVICT_GRACE", doc="seconds after a revocation before the next eviction decision"),
    Field("CF_EVICT_GATE", default=-np.inf, doc="the time the next eviction decision may run"),
    Field("CF_ASYNC_LAG", doc="iterations vLLM's async scheduling delays a request's outputs by (0 or 1)"),
    Field("CF_TIMEOUT", doc="the clients' timeout, seconds after arrival (inf: none)"),
    Field("CF_XFER_SLOW", default=1.0, doc="P/D KV transfer: factor on its time (a slow link, faults)"),
    Field("CF_LINK_UP_AT", default=-np.inf, doc="P/D KV link: when its last outage ended (faults)"),
))
INDEX = Record("ix", ("ix",), np.int32, ("field", "slot"), prefix="IX", fields=_fields(
    "IX_PRESENT", Field("IX_PREV", "ix", default=-1), Field("IX_NEXT", "ix", default=-1),
))
BANDS = Record("bq", ("clu",), np.int64, ("field", "slot", "bands"), prefix="BQ", fields=_fields(
    Field("BQ_HEAD", "req", default=-1), Field("BQ_TAIL", "req", default=-1), "BQ_LEN",
))

#: Every array of the state (records without fields hold one value per slot).
RECORDS: tuple[Record, ...] = (
    REQUEST_INT, REQUEST_FLOAT, UNIT, INSTANCE_INT, INSTANCE_FLOAT, RUNNING, ENTRY, CLUSTER_INT, CLUSTER_FLOAT,
    INDEX, BANDS,
    Record("seg", ("inst",), np.float64, ("slot", "segment")),  # a decode segment's iteration end times
    Record("ceil_ext", ("clu",), np.float64, ("slot", "bands"), default=1.0),  # external ceilings per band
    Record("aprob", ("clu",), np.float64, ("slot", "bands")),  # external rejection probabilities per band
    Record("lat_p", ("inst",), np.float64, ("slot", "params")),  # each instance's lowered step-time model
    Record("heap_t", ("req",), np.float64, ("slot",)),  # requests on their way to an instance: a heap
    Record("heap_r", ("req",), np.int64, ("slot",), points_to="req"),  # at the cluster's request slots
    Record("log", ("req",), np.int64, ("slot",), points_to="req"),  # finishes a Python router must hear of
    Record("win_t", ("req",), np.float64, ("slot",)),  # LMetric's detector: arrival times and classes
    Record("win_c", ("req",), np.int64, ("slot",)),  # in its window, a ring over the request slots,
    Record("ccount", ("req",), np.int64, ("slot",)),  # and arrivals per class in the window
    Record("bkey", ("bkey",), np.int32, ("slot",), static=True),  # router block keys, dense per cluster
)


def constants() -> dict[str, int]:
    """The layout constants: each field's row index, and ``N_<prefix>`` per record."""
    out = {}
    for rec in RECORDS:
        for k, f in enumerate(rec.fields):
            out[f.name] = k
        if rec.fields:
            out[f"N_{rec.prefix}"] = len(rec.fields)
    return out


def pointer_rows(rec: Record) -> list[tuple[int | None, str]]:
    """``(field index or None for the whole record, target space)`` of a record's pointers."""
    if not rec.fields:
        return [(None, rec.points_to)] if rec.points_to else []
    return [(k, f.points_to) for k, f in enumerate(rec.fields) if f.points_to]


class Rows:
    """Named fields of one entity's records over every slot of a state: ``rows.now`` is the
    ``CF_NOW`` row of ``clu_f`` (a numpy view: ``state.clusters.now[c] = t`` writes the state).
    The name is the field's constant without its prefix, in lower case."""

    __slots__ = ("_rows",)

    def __init__(self, state, records: tuple[Record, ...]):
        rows = {}
        for rec in records:
            arr = getattr(state, rec.array)
            for k, f in enumerate(rec.fields):
                rows[f.name.split("_", 1)[1].lower()] = rec.field(arr, k)
        object.__setattr__(self, "_rows", rows)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self._rows[name]
        except KeyError:
            raise AttributeError(f"no engine field {name!r}; fields: {', '.join(sorted(self._rows))}") from None

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"assign into the field's array instead: rows.{name}[index] = value")

    def __dir__(self):
        return sorted(self._rows)


#: The records behind each named view of a state (EngineState.requests / instances / clusters / bands).
ENTITIES = {"requests": (REQUEST_INT, REQUEST_FLOAT), "instances": (INSTANCE_INT, INSTANCE_FLOAT),
            "clusters": (CLUSTER_INT, CLUSTER_FLOAT), "bands": (BANDS,)}


def _slot_property(array: str, k: int, doc: str) -> property:
    column = "_" + array

    def get(self):
        return getattr(self, column)[k]

    def put(self, value) -> None:
        getattr(self, column)[k] = value

    return property(get, put, doc=doc)


def _cluster_slot_class() -> type:
    """A class whose attributes are one cluster's fields (``slot.now``, ``slot.status = ...``),
    read and written in the state: one property per field of the cluster records."""
    records = ENTITIES["clusters"]
    ns = {"__slots__": tuple("_" + rec.array for rec in records),
          "__doc__": "One cluster's fields in a state (EngineState.cluster(c)): reads and writes go to the state."}
    for rec in records:
        for k, f in enumerate(rec.fields):
            ns[f.name.split("_", 1)[1].lower()] = _slot_property(rec.array, k, f.doc or f.name)

    def __init__(self, state, c: int):
        for rec in records:
            setattr(self, "_" + rec.array, getattr(state, rec.array)[:, c])

    ns["__init__"] = __init__
    return type("ClusterSlot", (), ns)


ClusterSlot = _cluster_slot_class()

#: Parameter rows of each compiled policy role, and the row of its code.
POLICY_ROWS = {"router": ("CI_ROUTER", ("CF_R0", "CF_R1", "CF_R2", "CF_R3")),
               "flow": ("CI_FLOW", ("CF_F0", "CF_F1")),
               "admission": ("CI_ADMIT", ("CF_A0", "CF_A1", "CF_A2", "CF_A3")),
               "pd": ("CI_PD", ("CF_PD0", "CF_PD1"))}
