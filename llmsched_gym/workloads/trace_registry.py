"""Public traces by name: ``llmsched-gym traces list`` and ``traces download NAME``.

Every known public trace has an entry (:data:`TRACES`): where it is published, its
license, size and format, and the path it takes under a trace directory (the layout of
``../shared/traces``). ``download`` fetches it with pooch into the user's cache
(``$LLMSCHED_CACHE_DIR/traces`` or ``~/.cache/llmsched-gym/traces``): a temporary file,
its SHA-256 checked, and only then moved into place, so a failed or interrupted download
never leaves a partial file. What is written here is what pooch does not do: the
registry, local sources, the git-lfs check and error messages that say what happened.
pooch is imported only by the functions that download or hash (about 0.1 s with
requests, which ``import llmsched_gym`` would otherwise pay on every start).

A SHA-256 is pinned only where it was computed on the published bytes; traces whose
bytes could not be obtained when this list was made have none, and ``download``
refuses them unless ``allow_unverified`` (``--allow-unverified``) is given, in which
case it prints the hash it computed so the user can pin it.

Scenarios find a downloaded trace by name or by its path under the trace directory
(:func:`locate`): ``workload: {trace: {path: mooncake-conversation}}`` or
``llmsched-gym run --trace azure-2023-code``.
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
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


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file (pooch's ``file_hash``)."""
    import pooch  # imported where used: ~0.1 s with requests, which ``import llmsched_gym`` does not pay

    return pooch.file_hash(str(path), alg="sha256")


@dataclass
class DownloadResult:
    """What :func:`download` did: the file, its SHA-256, whether that matched a pin,
    and whether bytes were fetched (False: an already verified copy was kept)."""

    path: Path
    sha256: str
    verified: bool
    fetched: bool


class _Fetcher:
    """A pooch downloader of one trace: pooch's HTTP downloader for a URL, a copy for a
    local file (``--from FILE``, ``file://``: pooch has no downloader for them). It refuses
    a git-lfs pointer (what a repository serves for a file it stores in LFS) and keeps the
    SHA-256 of the bytes it wrote, for the error when they do not match the pin."""

    def __init__(self, source: str, progress):
        self.source = source
        self.progress = progress
        self.sha256: str | None = None

    def __call__(self, url: str, output_file: str, pooch_obj) -> None:
        import pooch

        local = _local_path(self.source)
        if local is None:
            pooch.HTTPDownloader(progressbar=self.progress or False, headers={"User-Agent": "llmsched-gym"})(
                self.source, output_file, pooch_obj)
        else:
            with open(local, "rb") as src, open(output_file, "wb") as out:
                shutil.copyfileobj(src, out)
        with open(output_file, "rb") as f:
            if f.read(64).startswith(b"version https://git-lfs"):
                raise ConfigError(f"{self.source} returned a git-lfs pointer, not the data")
        self.sha256 = pooch.file_hash(output_file, alg="sha256")


def _local_path(source: str) -> Path | None:
    """The file a source names (a path, or a ``file://`` URL); None for a network URL."""
    if source.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(source).path))
    if "://" not in source:
        p = Path(source).expanduser()
        if not p.is_file():
            raise ConfigError(f"--from {source}: file not found")
        return p
    return None


def download(name: str, dest_dir: str | os.PathLike | None = None, *, source: str | None = None,
             allow_unverified: bool = False, progress=False, entry: TraceEntry | None = None
             ) -> DownloadResult:
    """Fetch trace ``name`` into ``dest_dir`` (default :func:`cache_dir`) at its ``local`` path,
    with pooch (``pooch.retrieve``: a temporary file beside the target, moved into place
    only after its SHA-256 matched).

    Args:
        name: a registry name (``llmsched-gym traces list``).
        dest_dir: the trace directory to write into.
        source: fetch from this URL or local file instead of the entry's URL (a mirror,
            or a copy obtained elsewhere, verified the same way).
        allow_unverified: accept a trace with no pinned SHA-256 (the computed hash is
            returned in the result, ``verified`` False).
        progress: a progress bar for pooch's HTTP downloader (an object with ``total``,
            ``update``, ``reset`` and ``close``, as the CLI's; True: pooch's own, which
            needs tqdm); False: none.
        entry: use this entry instead of looking ``name`` up (tests, private mirrors).

    The target is never partial: a failed download removes its temporary file and the
    directories it created, and an existing file is replaced only by verified bytes. An
    existing file with the pinned hash is kept without fetching.
    """
    import pooch

    e = entry or get_trace(name)
    if e.sha256 is None and not allow_unverified:
        raise ConfigError(f"trace {e.name!r} has no pinned SHA-256 (its published bytes were not available "
                          "when the list was made); pass --allow-unverified to download it anyway")
    target = (Path(dest_dir).expanduser() if dest_dir is not None else cache_dir()) / e.local
    if target.is_file() and source is None:  # kept: with the pinned hash, or (unpinned) as it is
        digest = sha256_file(target)
        if e.sha256 is None or digest == e.sha256:
            return DownloadResult(target, digest, e.sha256 is not None, False)
    created = [p for p in reversed(target.parents) if not p.exists()]
    where = source or e.url
    fetch = _Fetcher(where, progress)
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel("WARNING")  # pooch says what it fetches on stderr; the CLI says it once, after
    ok = False
    try:
        pooch.retrieve(where, known_hash=f"sha256:{e.sha256}" if e.sha256 else None, fname=target.name,
                       path=target.parent, downloader=fetch)
        ok = True
        if fetch.sha256 is None:  # pooch found the pinned bytes already there
            return DownloadResult(target, e.sha256, True, False)
        return DownloadResult(target, fetch.sha256, e.sha256 is not None, True)
    except ConfigError as err:
        raise ConfigError(f"trace {e.name!r}: {err}; nothing was written") from None
    except ValueError:  # pooch: the bytes do not have the pinned hash (it removed them)
        raise TraceChecksumError(f"trace {e.name!r}: SHA-256 mismatch for {where}: expected {e.sha256}, "
                                 f"got {fetch.sha256}; nothing was written") from None
    except OSError as err:  # requests' errors are OSErrors too
        raise ConfigError(f"trace {e.name!r}: download from {where} failed: {err}; nothing was written") from None
    finally:
        logger.setLevel(level)
        if not ok:
            for p in reversed(created):
                try:
                    p.rmdir()
                except OSError:
                    break


__all__ = ["TRACES", "TraceEntry", "TraceChecksumError", "DownloadResult", "list_traces", "get_trace",
           "DEFAULT_TRACE_DIR", "trace_dir", "cache_dir", "search_dirs", "locate", "sha256_file", "download"]
