"""Public traces by name: ``llmsched-gym traces list`` and ``traces download NAME``.

Every known public trace has an entry (:data:`TRACES`): where it is published, its
license, size and format, and the path it takes under a trace directory (the layout of
``../shared/traces``). ``download`` streams it into the user's cache
(``$LLMSCHED_CACHE_DIR/traces`` or ``~/.cache/llmsched-gym/traces``) through a temporary
file, checks the SHA-256 and only then moves it into place, so a failed or interrupted
download never leaves a partial file.

A SHA-256 is pinned only where it was computed on the published bytes; traces whose
bytes could not be obtained when this list was made have none, and ``download``
refuses them unless ``allow_unverified`` (``--allow-unverified``) is given, in which
case it prints the hash it computed so the user can pin it.

Scenarios find a downloaded trace by name or by its path under the trace directory
(:func:`locate`): ``workload: {trace: {path: mooncake-conversation}}`` or
``llmsched-gym run --trace azure-2023-code``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError


class TraceChecksumError(ConfigError):
    """A downloaded trace does not have the pinned SHA-256 (nothing was written)."""


@dataclass(frozen=True)
class TraceEntry:
    """One public trace.

    Attributes:
        name: the registry name (``llmsched-gym traces download NAME``).
        format: the loader (:data:`llmsched_gym.workloads.traces.TRACE_FORMATS`).
        repository: where it is published.
        license: its license.
        url: where ``download`` fetches it from.
        local: its path under a trace directory (same layout as ``../shared/traces``).
        sha256: pinned SHA-256 of the published file, or None when not computed.
        size: bytes (measured with the hash, or as the publisher's git-lfs pointer states;
            None when unknown).
        description: one line for ``traces list``.
    """

    name: str
    format: str
    repository: str
    license: str
    url: str
    local: str
    sha256: str | None
    size: int | None
    description: str


_MOONCAKE = "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/"
_AZURE23 = "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/"
_AZURE24 = "https://azurepublicdatasettraces.blob.core.windows.net/azurellminfererencetrace/"
_QWEN = "https://github.com/alibaba-edu/qwen-bailian-usagetraces-anon/raw/main/"

#: Every known public trace. Pinned hashes and sizes were computed on the published
#: files (Mooncake and Azure 2023: the repositories' files, identical to ../shared/traces).
TRACES: dict[str, TraceEntry] = {e.name: e for e in (
    TraceEntry("mooncake-conversation", "mooncake", "github.com/kvcache-ai/Mooncake", "Apache-2.0",
               _MOONCAKE + "traces/conversation_trace.jsonl", "mooncake/conversation_trace.jsonl",
               "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df", 3_029_533,
               "Kimi chat service, 1 hour, 12,031 requests, 512-token prefix hashes"),
    TraceEntry("mooncake-synthetic", "mooncake", "github.com/kvcache-ai/Mooncake", "Apache-2.0",
               _MOONCAKE + "traces/synthetic_trace.jsonl", "mooncake/synthetic_trace.jsonl",
               "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131", 1_136_313,
               "built from public datasets, Poisson arrivals, 3,993 requests"),
    TraceEntry("mooncake-toolagent", "mooncake", "github.com/kvcache-ai/Mooncake", "Apache-2.0",
               _MOONCAKE + "traces/toolagent_trace.jsonl", "mooncake/toolagent_trace.jsonl", None, None,
               "tool and agent workload, 1 hour, 23,608 requests"),
    TraceEntry("mooncake-arxiv", "mooncake", "github.com/kvcache-ai/Mooncake", "Apache-2.0",
               _MOONCAKE + "arxiv-trace/mooncake_trace.jsonl", "mooncake/mooncake_trace.jsonl", None, None,
               "the earlier single-file trace of the arXiv report"),
    TraceEntry("azure-2023-code", "azure", "github.com/Azure/AzurePublicDataset", "CC-BY-4.0",
               _AZURE23 + "AzureLLMInferenceTrace_code.csv", "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
               "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6", 320_117,
               "code completion, 1 hour, 8,819 requests"),
    TraceEntry("azure-2023-conv", "azure", "github.com/Azure/AzurePublicDataset", "CC-BY-4.0",
               _AZURE23 + "AzureLLMInferenceTrace_conv.csv", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
               "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8", 719_188,
               "conversation, 1 hour, 19,366 requests"),
    TraceEntry("azure-2024-code", "azure", "github.com/Azure/AzurePublicDataset", "CC-BY-4.0",
               _AZURE24 + "AzureLLMInferenceTrace_code_1week.csv",
               "azure_llm_2024/AzureLLMInferenceTrace_code_1week.csv", None, None,
               "code completion, one week (May 2024)"),
    TraceEntry("azure-2024-conv", "azure", "github.com/Azure/AzurePublicDataset", "CC-BY-4.0",
               _AZURE24 + "AzureLLMInferenceTrace_conv_1week.csv",
               "azure_llm_2024/AzureLLMInferenceTrace_conv_1week.csv", None, None,
               "conversation, one week (May 2024)"),
    TraceEntry("burstgpt-1", "burstgpt", "github.com/HPMLL/BurstGPT", "CC-BY-4.0",
               "https://raw.githubusercontent.com/HPMLL/BurstGPT/main/data/BurstGPT_1.csv",
               "burstgpt/BurstGPT_1.csv", None, None,
               "ChatGPT and GPT-4 on Azure, first 2 months, with failures"),
    TraceEntry("qwen-bailian-a", "qwen", "github.com/alibaba-edu/qwen-bailian-usagetraces-anon", "Apache-2.0",
               _QWEN + "qwen_traceA_blksz_16.jsonl", "qwen_bailian/qwen_traceA_blksz_16.jsonl", None, None,
               "to-C chat service (Bailian), 16-token block hashes, sessions"),
    TraceEntry("qwen-bailian-b", "qwen", "github.com/alibaba-edu/qwen-bailian-usagetraces-anon", "Apache-2.0",
               _QWEN + "qwen_traceB_blksz_16.jsonl", "qwen_bailian/qwen_traceB_blksz_16.jsonl", None, None,
               "to-B API calling (Bailian), 16-token block hashes, sessions"),
    TraceEntry("qwen-bailian-coder", "qwen", "github.com/alibaba-edu/qwen-bailian-usagetraces-anon", "Apache-2.0",
               _QWEN + "qwen_coder_blksz_16.jsonl", "qwen_bailian/qwen_coder_blksz_16.jsonl", None, 132_054_902,
               "Qwen coder service (Bailian), 16-token block hashes, sessions"),
    TraceEntry("qwen-bailian-thinking", "qwen", "github.com/alibaba-edu/qwen-bailian-usagetraces-anon",
               "Apache-2.0", _QWEN + "qwen_thinking_blksz_16.jsonl", "qwen_bailian/qwen_thinking_blksz_16.jsonl",
               None, 27_901_454, "Qwen thinking service (Bailian), 16-token block hashes, sessions"),
)}


def list_traces() -> list[TraceEntry]:
    """The known public traces, by name."""
    return [TRACES[k] for k in sorted(TRACES)]


def get_trace(name: str) -> TraceEntry:
    """The entry of ``name`` (ConfigError listing the known names otherwise)."""
    if name not in TRACES:
        raise ConfigError(f"trace {name!r} is not known; known: {', '.join(sorted(TRACES))} "
                          "(see `llmsched-gym traces list`)")
    return TRACES[name]


def cache_dir() -> Path:
    """Where ``download`` puts traces by default: ``$LLMSCHED_CACHE_DIR/traces`` or
    ``~/.cache/llmsched-gym/traces``."""
    root = os.environ.get("LLMSCHED_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "llmsched-gym")
    return Path(root) / "traces"


#: The public traces' directory of the README's layout: ``../shared/traces`` beside the
#: repository (this file is ``<repository>/llmsched_gym/workloads/trace_registry.py``).
DEFAULT_TRACE_DIR = Path(__file__).resolve().parents[3] / "shared" / "traces"


def trace_dir() -> Path:
    """``LLMSCHED_TRACE_DIR`` if set, else :data:`DEFAULT_TRACE_DIR`."""
    return Path(os.environ.get("LLMSCHED_TRACE_DIR") or DEFAULT_TRACE_DIR)


def search_dirs() -> list[Path]:
    """Trace directories searched by name, in order: :func:`trace_dir`, then the download cache."""
    return [trace_dir(), cache_dir()]


def locate(path_or_name: str) -> Path | None:
    """A trace file by registry name or by its path under a trace directory (None if absent)."""
    rel = TRACES[path_or_name].local if path_or_name in TRACES else path_or_name
    if Path(rel).is_absolute():
        return Path(rel) if Path(rel).exists() else None
    for d in search_dirs():
        p = d / rel
        if p.exists():
            return p
    return None


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass
class DownloadResult:
    """What :func:`download` did: the file, its SHA-256, whether that matched a pin,
    and whether bytes were fetched (False: an already verified copy was kept)."""

    path: Path
    sha256: str
    verified: bool
    fetched: bool


def _open_source(source: str):
    """(binary stream, total bytes or None, description) of a local path or a URL."""
    if "://" not in source:
        p = Path(source).expanduser()
        if not p.is_file():
            raise ConfigError(f"--from {source}: file not found")
        return open(p, "rb"), p.stat().st_size, str(p)
    try:
        resp = urllib.request.urlopen(urllib.request.Request(source, headers={"User-Agent": "llmsched-gym"}),
                                      timeout=60)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ConfigError(f"cannot download {source}: {getattr(e, 'reason', e)}") from None
    length = resp.headers.get("Content-Length") if hasattr(resp, "headers") else None
    return resp, int(length) if length and length.isdigit() else None, source


def _progress(total: int | None, label: str, enabled: bool):
    """A rich progress bar on stderr (None when disabled or stderr is not a terminal)."""
    if not enabled or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), console=Console(file=sys.stderr), transient=True)
    bar.start()
    return bar, bar.add_task(label, total=total)


def download(name: str, dest_dir: str | os.PathLike | None = None, *, source: str | None = None,
             allow_unverified: bool = False, progress: bool = True, entry: TraceEntry | None = None
             ) -> DownloadResult:
    """Fetch trace ``name`` into ``dest_dir`` (default :func:`cache_dir`) at its ``local`` path.

    Args:
        name: a registry name (``llmsched-gym traces list``).
        dest_dir: the trace directory to write into.
        source: fetch from this URL or local file instead of the entry's URL (a mirror,
            or a copy obtained elsewhere, verified the same way).
        allow_unverified: accept a trace with no pinned SHA-256 (the computed hash is
            returned in the result, ``verified`` False).
        progress: show a progress bar on stderr.
        entry: use this entry instead of looking ``name`` up (tests, private mirrors).

    The bytes go to a temporary file beside the target; it is renamed into place only
    after the SHA-256 matched, and removed on any failure, so the target is never partial.
    An existing file with the pinned hash is kept without fetching.
    """
    e = entry or get_trace(name)
    if e.sha256 is None and not allow_unverified:
        raise ConfigError(f"trace {e.name!r} has no pinned SHA-256 (its published bytes were not available "
                          "when the list was made); pass --allow-unverified to download it anyway")
    target = Path(dest_dir).expanduser() if dest_dir is not None else cache_dir()
    target = target / e.local
    if e.sha256 is not None and target.is_file() and source is None:
        digest = sha256_file(target)
        if digest == e.sha256:
            return DownloadResult(target, digest, True, False)
    created = [p for p in reversed(target.parents) if not p.exists()]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--dir {target.parent}: cannot create the directory: {err.strerror or err}") from None
    h = hashlib.sha256()
    bar = tmp = None
    ok = False
    where = source or e.url
    try:
        stream, total, where = _open_source(where)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        bar = _progress(total, e.name, progress)
        with os.fdopen(fd, "wb") as out, stream:
            head = b""
            while block := stream.read(1 << 20):
                if len(head) < 64:
                    head += block[:64]
                h.update(block)
                out.write(block)
                if bar:
                    bar[0].update(bar[1], advance=len(block))
        digest = h.hexdigest()
        if head.startswith(b"version https://git-lfs"):
            raise ConfigError(f"trace {e.name!r}: {where} returned a git-lfs pointer, not the data; "
                              "nothing was written")
        if e.sha256 is not None and digest != e.sha256:
            raise TraceChecksumError(f"trace {e.name!r}: SHA-256 mismatch for {where}: expected {e.sha256}, "
                                     f"got {digest}; nothing was written")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp's file is private; the trace is ordinary data
        os.replace(tmp, target)
        ok = True
        return DownloadResult(target, digest, e.sha256 is not None, True)
    except OSError as err:
        raise ConfigError(f"trace {e.name!r}: download from {where} failed: {err}; nothing was written") from None
    finally:
        if bar:
            bar[0].stop()
        if not ok:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
            for p in reversed(created):
                try:
                    p.rmdir()
                except OSError:
                    break


# ====================================================================== CLI
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
    from rich.table import Table

    from .. import tables

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
    res = download(args.name, args.dir, source=args.source, allow_unverified=args.allow_unverified,
                   progress=not args.no_progress)
    if not res.fetched:
        print(f"{args.name}: already present and verified at {res.path}")
    elif res.verified:
        print(f"{args.name}: downloaded to {res.path} (SHA-256 verified)")
    else:
        print(f"{args.name}: downloaded to {res.path}; NOT verified (no pinned hash), SHA-256 {res.sha256}",
              file=sys.stderr)
    return 0


__all__ = ["TRACES", "TraceEntry", "TraceChecksumError", "DownloadResult", "list_traces", "get_trace",
           "DEFAULT_TRACE_DIR", "trace_dir", "cache_dir", "search_dirs", "locate", "sha256_file", "download"]
