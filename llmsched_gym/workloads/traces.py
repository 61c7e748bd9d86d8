"""Loaders for public request traces (Mooncake JSONL, Azure CSV, BLIS TraceV2; the Qwen/Bailian,
BurstGPT and ServeGen loaders are in :mod:`llmsched_gym.workloads.trace_formats`).

Every loader returns a :class:`~llmsched_gym.workloads.workload.Workload` sorted by arrival time
and validates each row: a malformed row raises :class:`TraceFormatError` naming the
file, the 1-based line number and the field. Parsing is bulk (one ``json.loads`` or
``str.split`` per row, then numpy); the slow row-by-row checks run only to locate an
error once the bulk checks have found one.

Data notes (measured on the files in ``traces/SOURCES.md``):

* Mooncake ``conversation_trace.jsonl``: timestamps are bucketed to ~3 s steps with
  +-3 ms jitter (1,180 distinct values for 12,031 rows, no empty bucket).
* Azure 2023 code/conv: no row has 0 context or generated tokens; the loader clips
  zeros to 1 anyway (Azure 2024 and other dumps may contain them) because a
  :class:`Workload` needs >= 1 token.
* BLIS ``ref5000*.csv``: no slo_class, session or prefix group is set; arrivals are
  every 16,666 us.
"""

from __future__ import annotations

import csv
import itertools
import os
from dataclasses import dataclass, field

import numpy as np
import yaml

from ..errors import ConfigError, TraceFormatError
from .rows import first_bad, head_count, is_count, jsonl_rows, read_lines
from .trace_formats import load_burstgpt, load_qwen, load_servegen
from .workload import CRITICAL, SHEDDABLE, Workload

MOONCAKE_BLOCK_TOKENS = 512
#: Block size used to express BLIS prefix groups as chained hash ids.
BLIS_BLOCK_TOKENS = 16
#: BLIS slo_class -> priority (empty means the default class).
BLIS_PRIORITY = {
    "": CRITICAL,
    "critical": CRITICAL,
    "standard": CRITICAL,
    "sheddable": SHEDDABLE,
    "batch": SHEDDABLE,
    "background": SHEDDABLE,
}
#: Trace format names (``load_trace``, ``--trace-format``, ``workload.trace.format``).
TRACE_FORMATS = ("mooncake", "azure", "blis", "qwen", "burstgpt", "servegen")


# ---------------------------------------------------------------------------- Mooncake


def _spread(ts: np.ndarray, seed: int | None) -> np.ndarray:
    """Spread requests that share a timestamp across their bucket.

    A bucket is a run of equal timestamps; its width is the gap to the next distinct
    timestamp, capped at the trace's median gap (so an empty bucket after it does not
    stretch it). With ``seed=None`` the ``k`` requests of a bucket land at
    ``t + j * width / k``; with a seed they land at sorted uniform positions (a Poisson
    process conditioned on the count). Row order is preserved either way.
    """
    uniq, start, count = np.unique(ts, return_index=True, return_counts=True)
    if len(uniq) == len(ts):
        return ts
    gaps = np.diff(uniq)
    step = float(np.median(gaps)) if len(gaps) else 0.0
    width = np.minimum(np.append(gaps, step), step)
    bucket = np.repeat(np.arange(len(uniq)), count)
    j = np.arange(len(ts)) - start[bucket]
    if seed is None:
        frac = j / count[bucket]
    else:
        # Sorting uniforms within each bucket: lexsort on (value, bucket).
        u = np.random.default_rng(seed).random(len(ts))
        frac = u[np.lexsort((u, bucket))]
    return ts + frac * width[bucket]


#: The fields of a Mooncake JSONL row (every one required).
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def load_mooncake(
    path: str | os.PathLike,
    *,
    time_scale: float = 1.0,
    limit: int | None = None,
    spread_buckets: bool = True,
    seed: int | None = None,
) -> Workload:
    """Load a Mooncake JSONL trace (``timestamp`` ms, ``input_length``, ``output_length``,
    ``hash_ids`` over 512-token blocks).

    Args:
        path: the ``.jsonl`` file.
        time_scale: multiplies inter-arrival times (> 1 slows the trace down).
        limit: keep only the first ``limit`` rows (all if None).
        spread_buckets: spread requests with equal timestamps across their bucket
            (the published files are bucketed to 3 s), see :func:`_spread`.
        seed: None spreads evenly (deterministic); an int places them at seeded
            uniform positions within the bucket.

    Zero ``output_length`` is clipped to 1; zero ``input_length`` is rejected.
    """
    path = str(path)
    lineno, rows = jsonl_rows(path, limit, MOONCAKE_FIELDS)
    cols = {}
    for name in MOONCAKE_FIELDS:
        try:
            cols[name] = [r[name] for r in rows]
        except (KeyError, TypeError):
            i = first_bad(rows, lambda r, n=name: isinstance(r, dict) and n in r)
            raise TraceFormatError(path, lineno[i], name, "missing field") from None
    for name in ("timestamp", "input_length", "output_length"):
        if set(map(type, cols[name])) != {int} or min(cols[name]) < 0:
            i = first_bad(cols[name], is_count)
            raise TraceFormatError(
                path, lineno[i], name, f"must be a non-negative integer, got {cols[name][i]!r}"
            )
    ts = np.array(cols["timestamp"], np.float64)
    inp = np.array(cols["input_length"], np.int64)
    out = np.array(cols["output_length"], np.int64)
    if inp.min() < 1:
        i = int(np.argmin(inp))
        raise TraceFormatError(path, lineno[i], "input_length", "must be >= 1")
    hash_lists = cols["hash_ids"]
    if set(map(type, hash_lists)) != {list}:
        i = first_bad(hash_lists, lambda v: type(v) is list)
        raise TraceFormatError(path, lineno[i], "hash_ids", "must be a list of integers")
    lens = np.fromiter(map(len, hash_lists), np.int64, len(hash_lists))
    bad = np.flatnonzero(lens != -(-inp // MOONCAKE_BLOCK_TOKENS))
    if len(bad):
        i = int(bad[0])
        raise TraceFormatError(
            path,
            lineno[i],
            "hash_ids",
            f"has {lens[i]} ids but input_length {inp[i]} needs ceil({inp[i]}/512) = {-(-inp[i] // 512)}",
        )
    flat = list(itertools.chain.from_iterable(hash_lists))
    if flat and (set(map(type, flat)) != {int} or min(flat) < 0):
        i = first_bad(hash_lists, lambda v: all(map(is_count, v)))
        raise TraceFormatError(path, lineno[i], "hash_ids", "ids must be non-negative integers")
    if np.any(np.diff(ts) < 0):
        i = int(np.flatnonzero(np.diff(ts) < 0)[0]) + 1
        raise TraceFormatError(path, lineno[i], "timestamp", "timestamps must be non-decreasing")
    ts = ts - ts[0]
    if spread_buckets:
        ts = _spread(ts, seed)
    w = Workload(
        arrival_s=ts / 1000.0,
        input_tokens=inp,
        output_tokens=np.maximum(out, 1),
        hash_ids=np.array(flat, np.int64),
        hash_offsets=np.concatenate([[0], np.cumsum(lens)]),
        hash_block_tokens=MOONCAKE_BLOCK_TOKENS,
        name=os.path.splitext(os.path.basename(path))[0],
    )
    return w if time_scale == 1.0 else w.scaled(time_scale)


# ---------------------------------------------------------------------------- Azure

_AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def _split_utc_offset(stamp: str) -> tuple[str, int]:
    """``(naive stamp, UTC offset in minutes)``: Azure 2024 writes
    ``2024-05-10 00:00:00.009930+00:00``; 2023 has no offset."""
    s = stamp.strip()
    if s.endswith("Z"):
        return s[:-1], 0
    if len(s) > 6 and s[-6] in "+-" and s[-3] == ":" and s[-5:-3].isdigit() and s[-2:].isdigit():
        minutes = int(s[-5:-3]) * 60 + int(s[-2:])
        return s[:-6], minutes if s[-6] == "+" else -minutes
    return s, 0


def _parse_stamps(stamps) -> np.ndarray:
    """datetime64[ns] of ISO-like stamps, in UTC when they carry an offset (mixed precision ok)."""
    first = stamps[0].strip() if len(stamps) else ""
    if not (first.endswith("Z") or (len(first) > 6 and first[-6] in "+-" and first[-3] == ":")):
        return np.array(stamps).astype("datetime64[ns]")
    naive, offset = zip(*map(_split_utc_offset, stamps))
    t = np.array(naive).astype("datetime64[ns]")
    return t - np.array(offset, np.int64).astype("timedelta64[m]")


def _azure_line_error(path: str, rows: list[list[str]], lineno: list[int]) -> TraceFormatError:
    """Locate the first malformed Azure row (slow path, only after a bulk failure)."""
    for line, row in zip(lineno, rows):
        if len(row) != 3:
            return TraceFormatError(path, line, None, f"expected 3 columns, got {len(row)}")
        try:
            np.datetime64(_split_utc_offset(row[0])[0], "ns")
        except ValueError:
            return TraceFormatError(path, line, "TIMESTAMP", f"cannot parse {row[0]!r}")
        for name, v in zip(_AZURE_HEADER[1:], row[1:]):
            if not v.strip().isdigit():
                return TraceFormatError(path, line, name, f"must be a non-negative integer, got {v!r}")
    return TraceFormatError(path, None, None, "malformed rows")


def load_azure(path: str | os.PathLike, *, time_scale: float = 1.0, limit: int | None = None) -> Workload:
    """Load an Azure LLM inference trace (2023/2024 CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``).

    2023 stamps are naive (``2023-11-16 18:17:03.9799600``); 2024 stamps carry a UTC
    offset and mixed precision (``2024-05-10 00:00:00.009930+00:00``,
    ``2024-05-12 00:00:00+00:00``) and are compared in UTC.

    Args:
        path: the ``.csv`` file.
        time_scale: multiplies inter-arrival times (> 1 slows the trace down).
        limit: keep only the first ``limit`` data rows (all if None).

    Arrival times are relative to the first row. Token counts of 0 are clipped to 1
    (the Workload needs >= 1; the 2023 files have none). Rows must be in time order.
    """
    path = str(path)
    lines = read_lines(path)
    if not lines or [c.strip() for c in lines[0].split(",")] != _AZURE_HEADER:
        got = lines[0] if lines else "<empty file>"
        raise TraceFormatError(path, 1, None, f"header must be {','.join(_AZURE_HEADER)}, got {got!r}")
    numbered = [(i + 2, ln) for i, ln in enumerate(lines[1:]) if ln.strip()]
    numbered = numbered[: head_count(len(numbered), limit)]
    if not numbered:
        raise TraceFormatError(path, None, None, "no requests in file")
    lineno = [n for n, _ in numbered]
    rows = [ln.split(",") for _, ln in numbered]
    try:
        stamps, ctx, gen = zip(*rows, strict=True)
        # numpy parses 'YYYY-MM-DD HH:MM:SS.fffffff' natively (space or T separator).
        t = _parse_stamps(stamps)
        inp = np.array(ctx).astype(np.int64)
        out = np.array(gen).astype(np.int64)
    except ValueError:
        raise _azure_line_error(path, rows, lineno) from None
    if inp.min() < 0 or out.min() < 0:
        i = int(np.flatnonzero((inp < 0) | (out < 0))[0])
        name = "ContextTokens" if inp[i] < 0 else "GeneratedTokens"
        raise TraceFormatError(path, lineno[i], name, "must be >= 0")
    rel = (t - t[0]).astype(np.int64) / 1e9
    if np.any(np.diff(rel) < 0):
        i = int(np.flatnonzero(np.diff(rel) < 0)[0]) + 1
        raise TraceFormatError(path, lineno[i], "TIMESTAMP", "timestamps must be non-decreasing")
    w = Workload(
        arrival_s=rel,
        input_tokens=np.maximum(inp, 1),
        output_tokens=np.maximum(out, 1),
        name=os.path.splitext(os.path.basename(path))[0],
    )
    return w if time_scale == 1.0 else w.scaled(time_scale)


# ---------------------------------------------------------------------------- BLIS


@dataclass
class BlisTrace:
    """A BLIS TraceV2 file: the workload plus BLIS's own per-request results.

    Attributes:
        workload: the requests (arrival = ``send_time_us`` where it is > 0, else
            ``arrival_time_us``, as BLIS's replay injects them; absolute, not rebased).
        first_token_us: BLIS's ``first_chunk_time_us`` (absolute, float64; NaN when
            the row's status is not ``ok`` or the field is empty).
        finish_us: BLIS's ``last_chunk_time_us`` (same conventions).
        request_id: the trace's request ids, aligned with the workload rows.
        header: the parsed ``.yaml`` header.
        deadline_us: ``deadline_us`` (absolute client timeout; NaN for 0 = none). The
            simulator does not time requests out in flight; this is for analysis.
        slo_target_us: ``slo_target_us`` per-request TTFT target (NaN for 0 / absent).
        round_index: ``round_index`` within the session (0 when absent).
        client_id, tenant_id, model: the string columns (empty when absent).
    """

    workload: Workload
    first_token_us: np.ndarray
    finish_us: np.ndarray
    request_id: np.ndarray
    header: dict = field(default_factory=dict)
    deadline_us: np.ndarray | None = None
    slo_target_us: np.ndarray | None = None
    round_index: np.ndarray | None = None
    client_id: np.ndarray | None = None
    tenant_id: np.ndarray | None = None
    model: np.ndarray | None = None


_BLIS_REQUIRED = ("request_id", "input_tokens", "output_tokens", "arrival_time_us")
#: BLIS's own slo_class -> priority map (GAIE-compatible; empty means standard).
BLIS_GAIE_PRIORITY = {"": 3, "critical": 4, "standard": 3, "batch": -1, "sheddable": -2, "background": -3}
#: ``session_context_growth`` header values BLIS knows.
BLIS_CONTEXT_GROWTH = ("", "accumulate")


def _blis_prefix_hashes(group: np.ndarray, plen: np.ndarray, inp: np.ndarray, G: int,
                        session: np.ndarray | None = None):
    """Chained ids over ``G``-token blocks: the full blocks of a group's shared prefix get
    the group's ids; with ``session`` (accumulated sessions, -1 elsewhere) every other full
    block gets its session's id for that position (the rounds of a session are prefixes of
    one growing token stream); every other block gets a fresh id.
    """
    nblk = -(-inp // G)
    offsets = np.concatenate([[0], np.cumsum(nblk)])
    req = np.repeat(np.arange(len(inp)), nblk)
    k = np.arange(offsets[-1]) - offsets[req]
    shared_blocks = np.where(group >= 0, plen // G, 0)
    n_groups = int(group.max()) + 1 if len(group) else 0
    # The group id space is [0, n_groups * max_shared); session ids follow, then fresh ids.
    span = int(shared_blocks.max()) if len(shared_blocks) else 0
    shared = k < shared_blocks[req]
    base = n_groups * span
    ids = np.where(shared, group[req] * span + k, -1)
    if session is not None and (session >= 0).any():
        s_span = int((inp // G).max()) + 1
        in_session = (session[req] >= 0) & ~shared & ((k + 1) * G <= inp[req])
        ids = np.where(in_session, base + session[req] * s_span + k, ids)
        base += (int(session.max()) + 1) * s_span
    fresh = ids < 0
    ids[fresh] = base + np.arange(int(fresh.sum()))
    return ids, offsets


def load_blis_trace(path: str | os.PathLike, *, priority_map: "dict | str | None" = None) -> BlisTrace:
    """Load a BLIS TraceV2 trace (``.yaml`` header beside a ``.csv``; either path works).

    Columns are found by name (``vllm_priority``, ``slo_target_us`` and the trailing
    columns may be present or not); only ``request_id, input_tokens, output_tokens,
    arrival_time_us`` are required. As BLIS's replay does:

    * a request is injected at ``send_time_us`` when that is > 0, else ``arrival_time_us``;
    * without a prefix group, a ``server_input_tokens`` > 0 replaces ``input_tokens``;
    * requests in a ``prefix_group`` get ``prefix_length`` shared tokens prepended
      (prompt = group prefix + ``input_tokens``), as chained hash ids over 16-token blocks;
    * ``session_id`` groups requests into sessions, ``round_index`` must number each
      session's rounds 0, 1, 2, ...; with the header's ``session_context_growth:
      accumulate`` round k's prompt is the group prefix, every earlier round's input and
      output, then its own ``input_tokens`` (one growing stream, so each round's prompt
      is a cached prefix of the next). Rounds arrive at their recorded times (open loop;
      BLIS replays sessions closed-loop, waiting for each round to finish);
    * ``slo_class`` maps to priority via ``priority_map``: None uses the two-class
      :data:`BLIS_PRIORITY` (critical/standard 0, sheddable/batch/background -1),
      ``"blis"`` BLIS's own :data:`BLIS_GAIE_PRIORITY`, or give a dict;
    * the header's ``goodput_slo_targets`` (``{class: {ttft_ms, itl_ms, e2e_ms}}``) become
      the workload's per-priority TTFT / TPOT SLOs (the strictest where classes share a
      priority);
    * ``deadline_us`` (0 = no timeout, otherwise not before the arrival) and the string
      columns are returned on the :class:`BlisTrace` (the simulator does not enforce
      deadlines).

    ``session_id`` and ``prefix_group`` strings become dense ints.
    """
    path = str(path)
    stem, ext = os.path.splitext(path)
    if ext in (".yaml", ".yml"):
        csv_path, yaml_path = stem + ".csv", path
    else:
        csv_path, yaml_path = path, stem + ".yaml"
    if priority_map is None:
        prio_map = BLIS_PRIORITY
    elif priority_map == "blis":
        prio_map = BLIS_GAIE_PRIORITY
    elif isinstance(priority_map, dict) and all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in priority_map.items()):
        prio_map = {k.strip().lower(): v for k, v in priority_map.items()}
    else:
        raise ConfigError(f"priority_map={priority_map!r} is invalid; use None, 'blis' or a dict "
                          "of slo_class -> integer priority")
    header: dict = {}
    if os.path.exists(yaml_path):
        try:
            header = yaml.safe_load("\n".join(read_lines(yaml_path))) or {}
        except yaml.YAMLError as e:
            raise TraceFormatError(yaml_path, None, None, f"invalid YAML: {e}") from None
        if not isinstance(header, dict):
            raise TraceFormatError(yaml_path, None, None, f"the header must be a mapping, got {type(header).__name__}")
        unit = header.get("time_unit", "microseconds")
        if unit != "microseconds":
            raise TraceFormatError(
                yaml_path, None, "time_unit", f"{unit!r} is not supported; allowed: microseconds"
            )
        growth = header.get("session_context_growth") or ""
        if growth not in BLIS_CONTEXT_GROWTH:
            raise TraceFormatError(yaml_path, None, "session_context_growth",
                                   f"{growth!r} is not known; allowed: accumulate or empty")
    accumulate = header.get("session_context_growth") == "accumulate"
    lines = read_lines(csv_path)
    reader = csv.reader(lines)
    try:
        names = next(reader)
    except StopIteration:
        raise TraceFormatError(csv_path, None, None, "empty file") from None
    missing = [c for c in _BLIS_REQUIRED if c not in names]
    if missing:
        raise TraceFormatError(csv_path, 1, missing[0], f"missing column; header has {', '.join(names)}")
    rows = list(reader)
    if not rows:
        raise TraceFormatError(csv_path, None, None, "no requests in file")
    for i, r in enumerate(rows):
        if len(r) != len(names):
            raise TraceFormatError(csv_path, i + 2, None, f"expected {len(names)} columns, got {len(r)}")
    cols = dict(zip(names, zip(*rows)))

    def ints(name: str, default: str | None = None) -> np.ndarray:
        vals = cols.get(name)
        if vals is None:
            return np.zeros(len(rows), np.int64)
        if default is not None:
            vals = [v or default for v in vals]
        try:
            a = np.array(vals).astype(np.int64)
        except ValueError:
            i = first_bad(list(vals), lambda v: v.strip().lstrip("-").isdigit())
            raise TraceFormatError(csv_path, i + 2, name, f"must be an integer, got {vals[i]!r}") from None
        if a.min() < 0:
            i = int(np.argmin(a))
            raise TraceFormatError(csv_path, i + 2, name, f"must be >= 0, got {a[i]}")
        return a

    def codes(name: str, vals=None) -> np.ndarray:
        """Dense int per distinct non-empty string in order of appearance, -1 if empty."""
        vals = np.array(cols.get(name, [""] * len(rows)) if vals is None else vals)
        uniq, first, inv = np.unique(vals, return_index=True, return_inverse=True)
        rank = np.empty(len(uniq), np.int64)
        rank[np.argsort(first)] = np.arange(len(uniq))
        code = rank[inv]
        if (uniq == "").any():
            empty = rank[int(np.flatnonzero(uniq == "")[0])]
            code = np.where(code == empty, -1, code - (code > empty))
        return code

    def strings(name: str) -> np.ndarray:
        return np.array([v.strip() for v in cols.get(name, [""] * len(rows))], dtype=object)

    inp, out = ints("input_tokens"), ints("output_tokens")
    arrival_us = ints("arrival_time_us")
    send_us = ints("send_time_us", "0")
    inject_us = np.where(send_us > 0, send_us, arrival_us)
    group, plen = codes("prefix_group"), ints("prefix_length", "0")
    server_in = ints("server_input_tokens", "0")
    inp = np.where((server_in > 0) & (group < 0), server_in, inp)
    for name in ("text_tokens", "image_tokens", "audio_tokens", "video_tokens", "num_chunks"):
        ints(name, "0")  # validated like BLIS does
    if "streaming" in cols:
        bad = [v for v in cols["streaming"] if v.strip().lower() not in ("true", "false", "1", "0", "t", "f", "")]
        if bad:
            i = first_bad(list(cols["streaming"]),
                           lambda v: v.strip().lower() in ("true", "false", "1", "0", "t", "f", ""))
            raise TraceFormatError(csv_path, i + 2, "streaming", f"must be true or false, got {cols['streaming'][i]!r}")
    if "reason_ratio" in cols:
        def ratio_ok(v: str) -> bool:
            try:
                x = float(v or 0)
            except ValueError:
                return False
            return 0.0 <= x <= 1.0

        if not all(map(ratio_ok, cols["reason_ratio"])):
            i = first_bad(list(cols["reason_ratio"]), ratio_ok)
            raise TraceFormatError(csv_path, i + 2, "reason_ratio",
                                   f"must be a number in [0, 1], got {cols['reason_ratio'][i]!r}")
    deadline = ints("deadline_us", "0")
    late = (deadline > 0) & (arrival_us > 0) & (deadline < arrival_us)
    if late.any():
        i = int(np.flatnonzero(late)[0])
        raise TraceFormatError(csv_path, i + 2, "deadline_us",
                               f"{deadline[i]} precedes arrival_time_us {arrival_us[i]} (0 means no timeout)")
    slo_target = ints("slo_target_us", "0")
    session = codes("session_id")
    round_index = ints("round_index", "0")
    if "round_index" in cols and (session >= 0).any():
        order_s = np.lexsort((round_index, session))
        order_s = order_s[session[order_s] >= 0]
        s_sorted = session[order_s]
        start = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
        expected = np.arange(len(order_s)) - np.maximum.accumulate(np.where(start, np.arange(len(order_s)), 0))
        bad = np.flatnonzero(round_index[order_s] != expected)
        if len(bad):
            i = int(order_s[bad[0]])
            raise TraceFormatError(csv_path, i + 2, "round_index",
                                   f"session {cols['session_id'][i]!r} has round {round_index[i]} where round "
                                   f"{expected[bad[0]]} is expected (rounds must be 0, 1, 2, ...)")
    prompt = inp + np.where(group >= 0, plen, 0)
    if accumulate and (session >= 0).any():
        # Round k: round 0's prefix, every earlier round's input and output, its own input.
        order_s = np.lexsort((round_index, session))
        order_s = order_s[session[order_s] >= 0]
        s_sorted = session[order_s]
        start = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
        first = order_s[np.maximum.accumulate(np.where(start, np.arange(len(order_s)), 0))]
        turn = inp[order_s] + out[order_s]
        before = np.cumsum(turn) - turn
        before -= np.maximum.accumulate(np.where(start, before, 0))
        group[order_s] = group[first]
        plen[order_s] = plen[first]
        prompt[order_s] = np.where(group[first] >= 0, plen[first], 0) + before + inp[order_s]
    for name, v in (("input_tokens", prompt), ("output_tokens", out)):
        if v.min() < 1:
            i = int(np.argmin(v))
            raise TraceFormatError(csv_path, i + 2, name, "must be >= 1")
    slo = list(cols.get("slo_class", [""] * len(rows)))
    try:
        priority = np.fromiter((prio_map[s.strip().lower()] for s in slo), np.int64, len(slo))
    except KeyError:
        i = first_bad(slo, lambda s: s.strip().lower() in prio_map)
        allowed = ", ".join(repr(k) for k in prio_map)
        raise TraceFormatError(
            csv_path, i + 2, "slo_class", f"{slo[i]!r} is not known; allowed: {allowed}"
        ) from None
    slo_ttft, slo_tpot = _blis_slo_targets(yaml_path, header, prio_map)
    order = np.argsort(inject_us, kind="stable")
    ids, offsets = _blis_prefix_hashes(group[order], plen[order], prompt[order], BLIS_BLOCK_TOKENS,
                                       session[order] if accumulate else None)

    def chunk_times(name: str) -> np.ndarray:
        vals = np.array([v or "nan" for v in cols.get(name, ["nan"] * len(rows))])
        try:
            t = vals.astype(np.float64)
        except ValueError:
            i = first_bad(list(vals), lambda v: v == "nan" or v.strip().isdigit())
            raise TraceFormatError(csv_path, i + 2, name, f"must be a number, got {vals[i]!r}") from None
        if "status" in cols:
            t[np.array(cols["status"]) != "ok"] = np.nan
        return t[order]

    w = Workload(
        arrival_s=inject_us[order] / 1e6,
        input_tokens=prompt[order],
        output_tokens=out[order],
        priority=priority[order],
        hash_ids=ids,
        hash_offsets=offsets,
        hash_block_tokens=BLIS_BLOCK_TOKENS,
        session_id=session[order],
        prefix_group=group[order],
        slo_ttft_s=slo_ttft,
        slo_tpot_s=slo_tpot,
        name=os.path.basename(stem),
    )
    return BlisTrace(
        workload=w,
        first_token_us=chunk_times("first_chunk_time_us"),
        finish_us=chunk_times("last_chunk_time_us"),
        request_id=ints("request_id")[order],
        header=header,
        deadline_us=np.where(deadline > 0, deadline, np.nan)[order],
        slo_target_us=np.where(slo_target > 0, slo_target, np.nan)[order],
        round_index=round_index[order],
        client_id=strings("client_id")[order],
        tenant_id=strings("tenant_id")[order],
        model=strings("model")[order],
    )


def _blis_slo_targets(yaml_path: str, header: dict, prio_map: dict) -> tuple[dict, dict]:
    """Per-priority TTFT and TPOT SLOs (seconds) from ``goodput_slo_targets``."""
    targets = header.get("goodput_slo_targets") or {}
    if not isinstance(targets, dict):
        raise TraceFormatError(yaml_path, None, "goodput_slo_targets", "must be a mapping of class -> targets")
    ttft: dict[int, float] = {}
    tpot: dict[int, float] = {}
    for cls, t in targets.items():
        key = str(cls).strip().lower()
        if key not in prio_map:
            raise TraceFormatError(yaml_path, None, f"goodput_slo_targets.{cls}",
                                   f"class {cls!r} is not known; allowed: {', '.join(repr(k) for k in prio_map)}")
        if not isinstance(t, dict) or set(t) - {"ttft_ms", "itl_ms", "e2e_ms"}:
            raise TraceFormatError(yaml_path, None, f"goodput_slo_targets.{cls}",
                                   "must be a mapping with ttft_ms, itl_ms, e2e_ms")
        p = prio_map[key]
        for name, out in (("ttft_ms", ttft), ("itl_ms", tpot)):
            v = t.get(name, 0) or 0
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise TraceFormatError(yaml_path, None, f"goodput_slo_targets.{cls}.{name}",
                                       f"must be a number >= 0 (0 = not gated), got {v!r}")
            if v > 0:
                out[p] = min(out.get(p, np.inf), v / 1e3)
    return ttft, tpot


# ---------------------------------------------------------------------------- helpers


def _loader(format: str):
    """The loader function of a format name (see :data:`TRACE_FORMATS`)."""
    return {"mooncake": load_mooncake, "azure": load_azure, "qwen": load_qwen, "burstgpt": load_burstgpt,
            "servegen": load_servegen}[format]


def load_trace(path: str | os.PathLike, format: str, **kwargs) -> Workload:
    """Load a trace by format name (one of :data:`TRACE_FORMATS`).

    ``kwargs`` go to the format's loader; for ``blis`` only the workload is returned
    (it takes ``priority_map`` only).
    """
    if format not in TRACE_FORMATS:
        raise ConfigError(f"trace format {format!r} is not known; allowed: {', '.join(TRACE_FORMATS)}")
    if not os.path.isfile(path):
        raise TraceFormatError(str(path), None, None, f"{format} trace file not found")
    if format == "blis":
        unknown = set(kwargs) - {"priority_map"}
        if unknown:
            raise ConfigError(f"the blis trace loader takes only priority_map, got {', '.join(sorted(unknown))}")
        return load_blis_trace(path, **kwargs).workload
    return _loader(format)(path, **kwargs)


def assign_priorities(
    workload: Workload,
    critical_share: float = 0.3,
    seed: int = 0,
    critical: int = CRITICAL,
    sheddable: int = SHEDDABLE,
) -> Workload:
    """A copy of ``workload`` with exactly ``round(critical_share * n)`` requests, chosen
    uniformly at random with a seeded numpy Generator, given priority ``critical`` and
    the rest ``sheddable``.

    Args:
        workload: the requests (left unchanged).
        critical_share: fraction of critical requests, in [0, 1].
        seed: seed of the random choice.
        critical / sheddable: the two priority values.
    """
    if not 0.0 <= critical_share <= 1.0:
        raise ConfigError(f"critical_share={critical_share!r} is invalid; it must be in [0, 1]")
    n = len(workload)
    chosen = np.random.default_rng(seed).permutation(n)[: int(round(critical_share * n))]
    w = workload.subset(slice(None))
    w.priority = np.full(n, sheddable, np.int64)
    w.priority[chosen] = critical
    return w


def scale_to_rate(workload: Workload, rate: float) -> Workload:
    """A copy whose mean arrival rate (``Workload.mean_rate``) is ``rate`` requests/s."""
    if not (isinstance(rate, (int, float)) and rate > 0 and np.isfinite(rate)):
        raise ConfigError(f"rate={rate!r} is invalid; it must be a finite number > 0")
    if len(workload) < 2 or workload.duration_s <= 0:
        raise ConfigError("cannot scale the rate of a workload with fewer than 2 distinct arrival times")
    return workload.scaled(workload.mean_rate / rate)
