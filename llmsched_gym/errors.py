"""Errors raised for bad user input (configuration, traces, actions).

Every message names the offending field or value and what is allowed, so a user can
fix the input without reading a traceback. The CLI turns these into exit code 2.
"""

from __future__ import annotations

#: The longest word an error message shows whole; a longer value (a pasted file, a
#: runaway argument) shows its start and end and how long it is.
LONGEST_WORD = 200


def one_line(message: str) -> str:
    """``message`` on one line, each overlong word elided in the middle."""
    words = []
    for w in message.split():
        if len(w) > LONGEST_WORD:
            w = f"{w[:120]}...[{len(w):,} characters]...{w[-40:]}"
        words.append(w)
    return " ".join(words)


class ConfigError(ValueError):
    """A scenario, preset, policy name or keyword argument is invalid."""


class TraceFormatError(ConfigError):
    """A trace file is missing, unreadable or has a malformed row."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str):
        where = f"{path}" + (f", line {line}" if line is not None else "")
        where += f", field {field!r}" if field else ""
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field = path, line, field


class MissingExtraError(ConfigError):
    """A feature needs an optional extra (e.g. ``[rl]``) that is not installed."""


class OutputError(ConfigError):
    """An output path cannot be created or written."""


class PolicyError(RuntimeError):
    """A policy returned something the simulator cannot act on."""
