"""``llmsched-gym traces list | download``: the known public traces
(:mod:`llmsched_gym.workloads.trace_registry`) and fetching one by name."""

from __future__ import annotations

import sys

from rich.table import Table

from ..workloads.trace_registry import cache_dir, download, list_traces, locate
from . import tables
from .progress import DownloadBar


def add_cli(subparsers) -> None:
    """Register ``llmsched-gym traces list | download``."""
    p = subparsers.add_parser("traces", help="list the known public traces, or download one by name")
    sub = p.add_subparsers(dest="traces_command", required=True)
    q = sub.add_parser("list", help="every known public trace: name, format, size, license, source")
    q.set_defaults(func=cmd_traces_list)
    q = sub.add_parser("download", help="download a trace into the cache and check its SHA-256")
    q.add_argument("name", help="a name from `llmsched-gym traces list`")
    q.add_argument("--dir", help=f"trace directory to write into (default {cache_dir()})")
    q.add_argument("--from", dest="source", metavar="URL_OR_FILE",
                   help="fetch from this URL or local file instead (verified the same way)")
    q.add_argument("--allow-unverified", action="store_true",
                   help="accept a trace that has no pinned SHA-256 (prints the hash computed)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_traces_download)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return "?"


def cmd_traces_list(args) -> int:
    """``llmsched-gym traces list``."""
    t = Table(title="public traces (llmsched-gym traces download NAME)")
    for col in ("name", "format", "size", "license", "source", "SHA-256", "here"):
        t.add_column(col)
    for e in list_traces():
        found = locate(e.name)
        t.add_row(e.name, e.format, _size(e.size), e.license, e.repository,
                  e.sha256[:12] + "..." if e.sha256 else "not pinned", str(found) if found else "-")
    console = tables.console()
    tables.print_table(t, console)
    console.print("'not pinned': the published bytes could not be hashed when this list was made; "
                  "download needs --allow-unverified. Descriptions: docs/scenarios.md.")
    return 0


def cmd_traces_download(args) -> int:
    """``llmsched-gym traces download NAME``."""
    bar = DownloadBar(args.name) if not args.no_progress and sys.stderr.isatty() else None
    try:
        res = download(args.name, args.dir, source=args.source, allow_unverified=args.allow_unverified, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if not res.fetched:
        verified = "verified" if res.verified else f"NOT verified (no pinned hash), SHA-256 {res.sha256}"
        print(f"{args.name}: already present at {res.path}; {verified}")
    elif res.verified:
        print(f"{args.name}: downloaded to {res.path} (SHA-256 verified)")
    else:
        print(f"{args.name}: downloaded to {res.path}; NOT verified (no pinned hash), SHA-256 {res.sha256}",
              file=sys.stderr)
    return 0
