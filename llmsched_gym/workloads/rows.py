"""Reading a trace file's rows: the low-level helpers every trace loader shares
(:mod:`.traces`, :mod:`.trace_formats`). Errors are :class:`~llmsched_gym.errors.TraceFormatError`
naming the file and line, or :class:`~llmsched_gym.errors.ConfigError` for a bad limit."""

from __future__ import annotations

import json

from ..errors import ConfigError, TraceFormatError


def read_lines(path: str) -> list[str]:
    """All lines of a text file; a missing or unreadable file is a TraceFormatError."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        raise TraceFormatError(str(path), None, None, "file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceFormatError(str(path), None, None, f"cannot read file: {e}") from None


def first_bad(values: list, ok) -> int:
    """Index of the first element for which ``ok`` is false (callers know one exists)."""
    return next(i for i, v in enumerate(values) if not ok(v))


def is_count(v) -> bool:
    """Whether ``v`` is a non-negative int (as parsed from JSON; not a bool)."""
    return type(v) is int and v >= 0  # bool is an int subclass; reject it explicitly


def head_count(n: int, limit: int | None) -> int:
    """How many of ``n`` rows to read: all (``limit=None``) or at most ``limit`` (a positive integer)."""
    if limit is None:
        return n
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit={limit!r} is invalid; it must be a positive integer or None")
    return min(n, limit)


def jsonl_rows(path: str, limit: int | None, fields=None) -> tuple[list[int], list]:
    """(line numbers, parsed objects) of the non-blank lines of a JSONL file; with
    ``fields``, a key outside them (a misspelt field) is an error, not ignored."""
    numbered = [(i + 1, ln) for i, ln in enumerate(read_lines(path)) if ln.strip()]
    numbered = numbered[: head_count(len(numbered), limit)]
    if not numbered:
        raise TraceFormatError(path, None, None, "no requests in file")
    rows = []
    for n, ln in numbered:
        try:
            rows.append(json.loads(ln))
        except json.JSONDecodeError as e:
            raise TraceFormatError(path, n, None, f"invalid JSON: {e.msg}") from None
    for n, r in zip(numbered, rows):
        if not isinstance(r, dict):
            raise TraceFormatError(path, n[0], None, f"each line must be a JSON object, got {type(r).__name__}")
    if fields is not None:
        allowed = set(fields)
        for n, r in zip(numbered, rows):
            if not allowed.issuperset(r):
                bad = next(k for k in r if k not in allowed)
                raise TraceFormatError(path, n[0], bad, f"unknown field; allowed: {', '.join(fields)}")
    return [n for n, _ in numbered], rows
