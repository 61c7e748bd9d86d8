"""Traces by name: the registry, verified downloads (from local files only), lookup by name."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from conftest import TRACES as SHARED

from llmsched_gym.cli import main
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import TraceSource, load_scenario
from llmsched_gym.workloads import trace_registry as reg
from llmsched_gym.workloads.trace_registry import (
    TraceChecksumError,
    TraceEntry,
    download,
    locate,
    sha256_file,
)

ROWS = "".join(json.dumps({"timestamp": 1000 * i, "input_length": 600, "output_length": 3, "hash_ids": [0, i + 1]})
               + "\n" for i in range(4))


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A registered trace whose bytes are a local file; cache and trace dir in tmp_path."""
    src = tmp_path / "published" / "tiny.jsonl"
    src.parent.mkdir()
    src.write_text(ROWS)
    entry = TraceEntry("tiny", "mooncake", "example.org/tiny", "CC0", src.as_uri(), "tiny/tiny_trace.jsonl",
                       hashlib.sha256(ROWS.encode()).hexdigest(), len(ROWS), "four requests")
    monkeypatch.setitem(reg.TRACES, "tiny", entry)
    monkeypatch.setenv("LLMSCHED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LLMSCHED_TRACE_DIR", str(tmp_path / "empty"))
    return entry, src


def _leftovers(root):
    return sorted(p.name for p in root.rglob("*")) if root.exists() else []


def test_registry_entries_are_complete():
    from llmsched_gym.workloads.traces import TRACE_FORMATS

    for e in reg.list_traces():
        assert e.format in TRACE_FORMATS and e.url.startswith("https://") and e.license and e.repository
        assert e.sha256 is None or len(e.sha256) == 64
    assert {"mooncake-conversation", "azure-2023-code", "burstgpt-1", "qwen-bailian-a", "azure-2024-conv"} <= set(reg.TRACES)


@pytest.mark.parametrize("name", [n for n, e in reg.TRACES.items() if e.sha256])
def test_pinned_hashes_match_the_shared_files(name):
    e = reg.TRACES[name]
    p = SHARED / e.local
    if not p.exists():
        pytest.skip(f"{p} not present")
    assert sha256_file(p) == e.sha256 and p.stat().st_size == e.size


def test_download_verifies_and_finds_by_name(tiny, tmp_path):
    entry, src = tiny
    res = download("tiny", progress=False)
    assert res.verified and res.fetched and res.path == tmp_path / "cache" / "traces" / entry.local
    assert res.path.read_text() == ROWS and _leftovers(res.path.parent) == ["tiny_trace.jsonl"]
    again = download("tiny", progress=False)
    assert not again.fetched and again.verified  # already there: kept, not fetched
    assert locate("tiny") == res.path and locate(entry.local) == res.path
    assert TraceSource("tiny", "mooncake").resolve() == res.path
    doc = {"name": "by-name", "cluster": {"instances": 1}, "workload": {"trace": {"path": "tiny"}}}
    sc_path = tmp_path / "s.yaml"
    sc_path.write_text(yaml.safe_dump(doc))
    sc = load_scenario(sc_path)  # the format comes from the registry
    assert sc.workload.format == "mooncake" and len(sc.build_workload(0)) == 4


def test_wrong_checksum_fails_cleanly(tiny, tmp_path, capsys):
    entry, src = tiny
    forged = tmp_path / "forged.jsonl"
    forged.write_text(ROWS.replace("600", "601"))
    dest = tmp_path / "traces-here"
    with pytest.raises(TraceChecksumError, match=r"SHA-256 mismatch .*expected [0-9a-f]{64}, got [0-9a-f]{64}"):
        download("tiny", dest, source=str(forged), progress=False)
    assert not dest.exists()  # no partial file, no temporary file, not even the directories
    bad_entry = TraceEntry(**{**entry.__dict__, "sha256": "0" * 64})
    reg.TRACES["tiny"] = bad_entry
    assert main(["traces", "download", "tiny", "--dir", str(dest), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SHA-256 mismatch" in err and "nothing was written" in err
    assert not dest.exists()
    # An existing good file is not replaced by a failed download.
    dest.joinpath("tiny").mkdir(parents=True)
    good = dest / entry.local
    good.write_text("keep me")
    with pytest.raises(TraceChecksumError):
        download("tiny", dest, progress=False)
    assert good.read_text() == "keep me" and _leftovers(dest) == ["tiny", "tiny_trace.jsonl"]


def test_unpinned_trace_needs_allow_unverified(tiny, tmp_path, capsys):
    entry, src = tiny
    reg.TRACES["tiny"] = TraceEntry(**{**entry.__dict__, "sha256": None})
    with pytest.raises(ConfigError, match="no pinned SHA-256.*--allow-unverified"):
        download("tiny", tmp_path / "d", progress=False)
    assert main(["traces", "download", "tiny", "--dir", str(tmp_path / "d"), "--allow-unverified",
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "NOT verified" in err and entry.sha256 in err  # prints the hash it computed
    assert (tmp_path / "d" / entry.local).read_text() == ROWS


def test_git_lfs_pointer_is_refused(tiny, tmp_path):
    entry, src = tiny
    src.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n")
    reg.TRACES["tiny"] = TraceEntry(**{**entry.__dict__, "sha256": None})
    with pytest.raises(ConfigError, match="git-lfs pointer"):
        download("tiny", tmp_path / "d", allow_unverified=True, progress=False)
    assert not (tmp_path / "d").exists()


def test_cli_list_and_unknown_name(tiny, capsys):
    assert main(["traces", "list"]) == 0
    out = capsys.readouterr().out
    assert "mooncake-conversation" in out and "tiny" in out and "not pinned" in out
    assert main(["traces", "download", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert "trace 'nosuch' is not known; known:" in err and len(err.splitlines()) == 1


def test_run_trace_by_name(tiny, capsys):
    download("tiny", progress=False)
    assert main(["run", "--trace", "tiny", "--instances", "1", "--router", "round-robin"]) == 0
    assert "tiny_trace" in capsys.readouterr().out
    assert main(["run", "--trace", "nosuch-trace"]) == 2


def test_readme_layout_without_environment(tmp_path):
    """`traces list` and `run --trace NAME` find ../shared/traces beside the repository
    with no LLMSCHED_TRACE_DIR (the README's layout; an empty download cache)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    e = reg.TRACES["azure-2023-code"]
    if not (SHARED / e.local).exists():
        pytest.skip(f"{SHARED / e.local} not present")
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "LLMSCHED_TRACE_DIR"}
    env.update(LLMSCHED_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="300",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")])))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "llmsched_gym.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    listing = cli("traces", "list")
    assert listing.returncode == 0, listing.stderr
    line = next(ln for ln in listing.stdout.splitlines() if "azure-2023-code" in ln)
    assert str(SHARED.resolve() / "azure_llm_2023") in line.replace("\n", ""), line
    r = cli("run", "--trace", "azure-2023-code", "--instances", "2", "--router", "jsq", "--critical-share", "0.3",
            "--horizon", "30")
    assert r.returncode == 0, r.stderr
    assert "AzureLLMInferenceTrace_code" in r.stdout and "critical" in r.stdout
