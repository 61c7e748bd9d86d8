"""Loaders for more public trace formats: Alibaba Qwen/Bailian JSONL, BurstGPT CSV and
ServeGen request lists (docs/scenarios.md has a sample of each).

Same contract as :mod:`llmsched_gym.workloads.traces`: each loader returns a
:class:`~llmsched_gym.workloads.workload.Workload` sorted by arrival time (rebased so the first
request arrives at 0), and a malformed row raises :class:`TraceFormatError` naming the
file, the 1-based line and the field. Rows are sorted stably by timestamp (none of these
formats promises an order); token counts of 0 are clipped to 1 where the format allows
them (a :class:`Workload` needs >= 1 token).
"""

from __future__ import annotations

import csv
import itertools
import math
import os
from typing import Iterable

import numpy as np

from ..errors import TraceFormatError
from .rows import first_bad, head_count, is_count, jsonl_rows, read_lines
from .workload import Workload

#: Tokens per hash block in the Qwen/Bailian traces (``*_blksz_16.jsonl``).
QWEN_BLOCK_TOKENS = 16
#: The request types the Qwen/Bailian traces document.
QWEN_TYPES = ("text", "search", "image", "file")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _column(path: str, lineno: list[int], rows: list[dict], name: str, ok, want: str,
            default=None, required: bool = True) -> list:
    """One field of every row, checked with ``ok`` (first failure names its line)."""
    if required:
        try:
            vals = [r[name] for r in rows]
        except KeyError:
            i = first_bad(rows, lambda r: name in r)
            raise TraceFormatError(path, lineno[i], name, "missing field") from None
    else:
        vals = [r.get(name, default) for r in rows]
    if not all(map(ok, vals)):
        i = first_bad(vals, ok)
        raise TraceFormatError(path, lineno[i], name, f"must be {want}, got {vals[i]!r}")
    return vals


def _rechain(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Prefix-chained ids: block ``k`` of two requests gets the same id exactly when
    their blocks ``0..k`` have the same ids (what the engine's prefix cache assumes).

    Level by level over block positions: the chain id of ``(parent chain id, block id)``.
    """
    ids = np.asarray(ids, np.int64)
    out = np.empty_like(ids)
    if not len(ids):
        return out
    lens = np.diff(offsets)
    parent = np.full(len(lens), -1, np.int64)
    scale = int(ids.max()) + 1
    next_id = 0
    active = np.flatnonzero(lens > 0)
    k = 0
    while len(active):
        pos = offsets[active] + k
        key = (parent[active] + 1) * scale + ids[pos]
        uniq, inv = np.unique(key, return_inverse=True)
        new = inv.ravel().astype(np.int64) + next_id
        next_id += len(uniq)
        out[pos] = new
        parent[active] = new
        k += 1
        active = active[lens[active] > k]
    return out


def _finish(path: str, ts: np.ndarray, inp: np.ndarray, out: np.ndarray, *, time_scale: float,
            **fields) -> Workload:
    """Sort stably by time, rebase to 0, build the Workload (hash chains reordered too)."""
    order = np.argsort(ts, kind="stable")
    kw = {}
    if "hash_lists" in fields:
        lists = fields.pop("hash_lists")
        lens = np.fromiter((len(lists[i]) for i in order), np.int64, len(order))
        flat = np.fromiter(itertools.chain.from_iterable(lists[i] for i in order), np.int64, int(lens.sum()))
        offsets = np.concatenate([[0], np.cumsum(lens)])
        kw = {"hash_ids": _rechain(flat, offsets), "hash_offsets": offsets,
              "hash_block_tokens": fields.pop("hash_block_tokens")}
    for k in ("session_id", "prefix_group"):
        if k in fields:
            kw[k] = fields.pop(k)[order]
    t = ts[order]
    w = Workload(arrival_s=t - t[0], input_tokens=np.maximum(inp[order], 1),
                 output_tokens=np.maximum(out[order], 1), name=os.path.splitext(os.path.basename(path))[0], **kw)
    return w if time_scale == 1.0 else w.scaled(time_scale)


def _dense_codes(keys: list) -> np.ndarray:
    """Dense ints in order of first appearance; None maps to -1."""
    seen: dict = {}
    return np.fromiter((-1 if k is None else seen.setdefault(k, len(seen)) for k in keys), np.int64, len(keys))


# ---------------------------------------------------------------------------- Qwen / Bailian


#: The fields of a Qwen/Bailian JSONL row.
QWEN_FIELDS = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "type", "turn", "hash_ids")


def load_qwen(path: str | os.PathLike, *, time_scale: float = 1.0, limit: int | None = None) -> Workload:
    """Load an Alibaba Qwen/Bailian trace (github.com/alibaba-edu/qwen-bailian-usagetraces-anon,
    ``qwen_*_blksz_16.jsonl``).

    One JSON object a line: ``chat_id``, ``parent_chat_id`` (-1 for the first turn),
    ``timestamp`` (seconds), ``input_length``, ``output_length``, ``type`` (text, search,
    image, file), ``turn`` and ``hash_ids`` (one id per 16-token block of the prompt).

    Sessions follow the ``parent_chat_id`` links to the first turn (a parent outside the
    file roots its own session). The ids are re-chained on load (block ``k`` keeps its
    id only together with blocks ``0..k``) so the prefix cache sees prompt prefixes, not
    repeated blocks at other positions. A request may list fewer ids than its
    ``ceil(input_length / 16)`` blocks (its tail then has no prefix information), never more.

    Args:
        path: the ``.jsonl`` file.
        time_scale: multiplies inter-arrival times (> 1 slows the trace down).
        limit: keep only the first ``limit`` rows (all if None).
    """
    path = str(path)
    lineno, rows = jsonl_rows(path, limit, QWEN_FIELDS)
    is_int = lambda v: type(v) is int  # noqa: E731
    chat = _column(path, lineno, rows, "chat_id", is_count, "a non-negative integer")
    parent = _column(path, lineno, rows, "parent_chat_id", lambda v: is_int(v) and v >= -1,
                     "an integer >= -1 (-1 for the first turn)")
    ts = _column(path, lineno, rows, "timestamp", _is_number, "a non-negative number of seconds")
    inp = _column(path, lineno, rows, "input_length", lambda v: is_int(v) and v >= 1, "an integer >= 1")
    out = _column(path, lineno, rows, "output_length", is_count, "a non-negative integer")
    _column(path, lineno, rows, "type", lambda v: isinstance(v, str), f"a string ({', '.join(QWEN_TYPES)})")
    _column(path, lineno, rows, "turn", is_count, "a non-negative integer")
    hashes = _column(path, lineno, rows, "hash_ids", lambda v: type(v) is list and all(map(is_count, v)),
                     "a list of non-negative integers")
    for i, (h, n) in enumerate(zip(hashes, inp)):
        if len(h) > -(-n // QWEN_BLOCK_TOKENS):
            raise TraceFormatError(path, lineno[i], "hash_ids",
                                   f"has {len(h)} ids but input_length {n} has only ceil({n}/16) = "
                                   f"{-(-n // QWEN_BLOCK_TOKENS)} blocks")
    index: dict[int, int] = {}
    for i, c in enumerate(chat):
        if c in index:
            raise TraceFormatError(path, lineno[i], "chat_id",
                                   f"{c} repeats the chat_id of line {lineno[index[c]]}")
        index[c] = i
    root = [None] * len(chat)
    for i in range(len(chat)):
        walk, j = [], i
        while root[j] is None:
            walk.append(j)
            p = parent[j]
            if p == -1 or p not in index:
                root[j] = chat[j] if p == -1 else p
                break
            j = index[p]
            if j in walk:
                raise TraceFormatError(path, lineno[i], "parent_chat_id", "the parent links form a cycle")
        for k in walk:
            root[k] = root[j]
    return _finish(path, np.array(ts, np.float64), np.array(inp, np.int64), np.array(out, np.int64),
                   time_scale=time_scale, hash_lists=hashes, hash_block_tokens=QWEN_BLOCK_TOKENS,
                   session_id=_dense_codes(root))


# ---------------------------------------------------------------------------- BurstGPT

BURSTGPT_REQUIRED = ("Timestamp", "Request tokens", "Response tokens")
BURSTGPT_OPTIONAL = ("Session ID", "Elapsed time", "Model", "Total tokens", "Log Type")


def load_burstgpt(path: str | os.PathLike, *, time_scale: float = 1.0, limit: int | None = None,
                  model: str | None = None, drop_failures: bool = False) -> Workload:
    """Load a BurstGPT trace (github.com/HPMLL/BurstGPT, ``BurstGPT_*.csv``).

    CSV with a header naming at least ``Timestamp`` (seconds), ``Request tokens`` and
    ``Response tokens``; ``Model``, ``Total tokens``, ``Log Type``, ``Session ID`` and
    ``Elapsed time`` are read when present (``Session ID`` becomes the session), other
    columns are ignored. A ``Response tokens`` of 0 marks a failed request.

    Args:
        path: the ``.csv`` file.
        time_scale: multiplies inter-arrival times (> 1 slows the trace down).
        limit: keep only the first ``limit`` data rows (all if None), before filtering.
        model: keep only rows of this ``Model`` (e.g. ``ChatGPT`` or ``GPT-4``).
        drop_failures: drop failed rows; by default they are kept (they arrived) with
            their output clipped to 1 token.
    """
    path = str(path)
    lines = read_lines(path)
    if not lines or not lines[0].strip():
        raise TraceFormatError(path, 1, None, "empty file; expected a header with "
                               + ", ".join(BURSTGPT_REQUIRED))
    names = [c.strip() for c in next(csv.reader([lines[0]]))]
    missing = [c for c in BURSTGPT_REQUIRED if c not in names]
    if missing:
        raise TraceFormatError(path, 1, missing[0], f"missing column; header has {', '.join(names)}")
    numbered = [(i + 2, ln) for i, ln in enumerate(lines[1:]) if ln.strip()]
    numbered = numbered[: head_count(len(numbered), limit)]
    if not numbered:
        raise TraceFormatError(path, None, None, "no requests in file")
    lineno = [n for n, _ in numbered]
    rows = list(csv.reader([ln for _, ln in numbered]))
    for n, r in zip(lineno, rows):
        if len(r) != len(names):
            raise TraceFormatError(path, n, None, f"expected {len(names)} columns, got {len(r)}")
    cols = dict(zip(names, zip(*rows)))

    def number(name: str, integer: bool) -> np.ndarray:
        vals = [v.strip() for v in cols[name]]
        try:
            a = np.array(vals).astype(np.float64)
            bad = ~np.isfinite(a) | (a < 0)
            if integer:
                bad |= a != np.floor(a)
        except ValueError:
            bad = None
        if bad is None or bad.any():
            want = "a non-negative integer" if integer else "a non-negative number"

            def ok(v: str) -> bool:
                try:
                    x = float(v)
                except ValueError:
                    return False
                return math.isfinite(x) and x >= 0 and (not integer or x == int(x))

            i = first_bad(vals, ok)
            raise TraceFormatError(path, lineno[i], name, f"must be {want}, got {cols[name][i]!r}")
        return a

    ts = number("Timestamp", False)
    inp = number("Request tokens", True).astype(np.int64)
    out = number("Response tokens", True).astype(np.int64)
    for name in ("Total tokens", "Elapsed time"):
        if name in cols:
            number(name, name == "Total tokens")
    keep = np.ones(len(rows), bool)
    if model is not None:
        if "Model" not in cols:
            raise TraceFormatError(path, 1, "Model", f"model={model!r} given but the file has no Model column")
        models = np.array([m.strip() for m in cols["Model"]])
        keep &= models == model
        if not keep.any():
            raise TraceFormatError(path, None, "Model", f"no row has Model {model!r}; the file has "
                                   f"{', '.join(sorted(set(models.tolist())))}")
    if drop_failures:
        keep &= out > 0
        if not keep.any():
            raise TraceFormatError(path, None, "Response tokens", "every row is a failure (0 response tokens)")
    session = None
    if "Session ID" in cols:
        sids = [s.strip() for s in cols["Session ID"]]
        session = _dense_codes([None if s in ("", "nan", "NaN") else s for s in sids])
    idx = np.flatnonzero(keep)
    extra = {} if session is None else {"session_id": session[idx]}
    return _finish(path, ts[idx], inp[idx], out[idx], time_scale=time_scale, **extra)


# ---------------------------------------------------------------------------- ServeGen

_SERVEGEN_MM = ("image_tokens", "audio_tokens", "video_tokens")


def _servegen_tokens(data: dict) -> tuple[int, int] | str:
    """(input, output) tokens of one ServeGen request's ``data``, or the bad field's name."""
    if not isinstance(data, dict):
        return "data"
    out = data.get("output_tokens")
    if not _is_token_count(out):
        return "output_tokens"
    if "input_tokens" in data:
        inp = data["input_tokens"]
        return (int(inp), int(out)) if _is_token_count(inp) else "input_tokens"
    if "text_tokens" not in data:
        return "input_tokens"
    if not _is_token_count(data["text_tokens"]):
        return "text_tokens"
    total = int(data["text_tokens"])
    for name in _SERVEGEN_MM:
        v = data.get(name, [])
        if not isinstance(v, (list, tuple, np.ndarray)) or not all(map(_is_token_count, v)):
            return name
        total += int(sum(v))
    return total, int(out)


def _is_token_count(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0


def _as_servegen_dict(r) -> dict:
    if isinstance(r, dict):
        return r
    return {"request_id": getattr(r, "request_id", None), "timestamp": getattr(r, "timestamp", None),
            "data": getattr(r, "data", None)}


def load_servegen(source: "str | os.PathLike | Iterable", *, time_scale: float = 1.0,
                  limit: int | None = None) -> Workload:
    """Load a workload generated by Alibaba's ServeGen (github.com/alibaba/ServeGen).

    ``servegen.construct.generate_workload`` returns a list of ``Request(request_id,
    timestamp, data)``; this takes that list directly, or a JSONL file with one
    ``dataclasses.asdict(request)`` a line:
    ``{"request_id": 0, "timestamp": 0.42, "data": {"input_tokens": 812, "output_tokens": 95}}``.

    ``data`` holds ``input_tokens`` and ``output_tokens`` (language and reasoning
    workloads; ``reason_ratio`` is ignored), or for multimodal workloads ``text_tokens``
    plus the lists ``image_tokens``, ``audio_tokens``, ``video_tokens``, whose sum is the
    prompt. ``timestamp`` is in seconds.

    Args:
        source: a ``.jsonl`` path, or a sequence of ServeGen ``Request`` objects or dicts.
        time_scale: multiplies inter-arrival times (> 1 slows the trace down).
        limit: keep only the first ``limit`` requests (all if None).
    """
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        lineno, rows = jsonl_rows(path, limit)
    else:
        path = "<servegen requests>"
        rows = [_as_servegen_dict(r) for r in source]
        rows = rows[: head_count(len(rows), limit)] if rows else rows
        if not rows:
            raise TraceFormatError(path, None, None, "no requests given")
        lineno = list(range(1, len(rows) + 1))
    ts = _column(path, lineno, rows, "timestamp",
                 lambda v: _is_number(float(v)) if isinstance(v, (np.floating, np.integer)) else _is_number(v),
                 "a non-negative number of seconds")
    _column(path, lineno, rows, "data", lambda v: isinstance(v, dict), "a mapping of token counts")
    inp, out = [], []
    for n, r in zip(lineno, rows):
        got = _servegen_tokens(r["data"])
        if isinstance(got, str):
            if got not in r["data"]:
                raise TraceFormatError(path, n, f"data.{got}", "missing field")
            want = "a list of non-negative integers" if got in _SERVEGEN_MM else "a non-negative integer"
            raise TraceFormatError(path, n, f"data.{got}", f"must be {want}, got {r['data'][got]!r}")
        inp.append(got[0])
        out.append(got[1])
    return _finish(path, np.array(ts, np.float64), np.array(inp, np.int64), np.array(out, np.int64),
                   time_scale=time_scale)
