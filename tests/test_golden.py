"""Golden results: today's per-request records and env trajectories, reproduced bit for bit.

``tests/golden/data/*.npz`` were recorded by ``tests/golden/record.py`` from a snapshot of
the engine; each file holds its own inputs (workload arrays, cluster and gateway configs,
seeds, horizon), so these tests depend only on the public API: ``Simulator(workload,
cluster, gateway, seed=, horizon_s=).run()`` and ``sim.table``, and the Gymnasium
environments. A rewrite of the engine must reproduce every array exactly (NaNs equal).
See tests/golden/README.md.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from golden import golden_io as gio

FILES = sorted(gio.DATA.glob("*.npz"))


@functools.lru_cache(maxsize=4)
def _load(path: Path):
    return gio.load(path)


def _meta(path: Path) -> dict:
    return _load(path)[1]


def _same(expected: np.ndarray, got: np.ndarray) -> np.ndarray:
    same = expected == got
    if expected.dtype.kind == "f" and got.dtype.kind == "f":
        same |= np.isnan(expected) & np.isnan(got)
    return np.asarray(same)


def _diff_message(what: str, field: str, expected: np.ndarray, got: np.ndarray, describe=None) -> str | None:
    """None if equal (NaNs equal), else a message naming the first differing element."""
    expected, got = np.asarray(expected), np.asarray(got)
    try:
        np.testing.assert_array_equal(got, expected)
        return None
    except AssertionError:
        pass
    prefix = f"{what}: field {field!r}"
    if expected.shape != got.shape:
        prefix += f" has shape {got.shape}, expected {expected.shape}"
        if expected.ndim == 0 or got.ndim == 0 or expected.shape[1:] != got.shape[1:]:
            return prefix
        m = min(len(expected), len(got))
        expected, got = expected[:m], got[:m]
        if _same(expected, got).all():
            return prefix + f" (the first {m} agree)"
        prefix += "; over the common length it"
    same = _same(expected, got)
    bad = np.argwhere(~same)
    first = tuple(int(i) for i in bad[0])
    where = describe(first) if describe else f"index {first}"
    return (f"{prefix} differs at {len(bad)} of {same.size} elements; first at {where}: "
            f"expected {expected[first].item()!r}, got {got[first].item()!r}")


# ============================================================================ simulator runs
def _sim_params():
    out = []
    for p in FILES:
        meta = _meta(p)
        if meta["kind"] == "sim":
            out += [pytest.param(p, k, id=f"{meta['name']}/{r['label']}") for k, r in enumerate(meta["runs"])]
    return out


def test_golden_files_present():
    kinds = [_meta(p)["kind"] for p in FILES]
    assert kinds.count("sim") >= 10 and kinds.count("env") >= 4, f"golden files missing in {gio.DATA}"


@pytest.mark.parametrize("path,k", _sim_params())
def test_simulator_golden(path, k):
    arrays, meta = _load(path)
    run = meta["runs"][k]
    w = gio.workload_from(arrays, meta["workload"])
    sim = gio.run_case(w, run)
    got = gio.records(sim)
    what = f"case {meta['name']!r}, run {run['label']!r} (#{k})"

    def describe(idx):
        r = idx[0] if idx else 0
        return (f"request {r} (arrival {w.arrival_s[r].item()!r} s, priority {int(w.priority[r])}, "
                f"in/out {int(w.input_tokens[r])}/{int(w.output_tokens[r])} tokens)") if idx else "sim.now"

    errors = [m for f in (*gio.RECORD_FIELDS, "now")
              if (m := _diff_message(what, f, arrays[f"run{k}.{f}"], got[f], describe)) is not None]
    if errors:
        pytest.fail("\n".join(errors))


# ============================================================================ environments
def _env_params():
    return [pytest.param(p, id=_meta(p)["name"]) for p in FILES if _meta(p)["kind"] == "env"]


@pytest.mark.parametrize("path", _env_params())
def test_env_golden(path):
    arrays, meta = _load(path)
    env = gio.make_env(meta, gio.frozen_scenario(arrays, meta))
    try:
        got = gio.play(env, meta, actions=arrays["actions"])
    finally:
        env.close()
    what = f"env {meta['name']!r} ({meta['env_id']}{', num_envs=%d' % meta['num_envs'] if meta['num_envs'] else ''})"
    vector = bool(meta["num_envs"])

    def describe_for(key):
        def describe(idx):
            if key.startswith(("obs.", "info.")):
                if vector:
                    return f"frame {idx[0]} (after step {idx[0] - 1}), env {idx[1]}, element {idx[2:]}"
                step = int(arrays["frame_step"][idx[0]])
                kind = "reset" if arrays["frame_kind"][idx[0]] == 0 else "step"
                return f"frame {idx[0]} ({kind} after step {step}), element {idx[1:]}"
            if key in ("episode_returns", "final_at") or key.startswith("final."):
                return f"ended episode {idx[0]}" + (f", element {idx[1:]}" if len(idx) > 1 else "")
            return f"step {idx[0]}" + (f", element {idx[1:]}" if len(idx) > 1 else "")
        return describe

    order = ["frame_kind", "frame_step", "final_at", "terminated", "truncated", "rewards"]
    keys = [k for k in order if k in arrays] + sorted(k for k in got if k not in order)
    missing = sorted(set(arrays) - set(got) - {k for k in arrays if k.startswith("wl")})
    errors = [f"{what}: field {k!r} not produced" for k in missing]
    errors += [m for k in keys if (m := _diff_message(what, k, arrays[k], got[k], describe_for(k))) is not None]
    if errors:
        pytest.fail("\n".join(errors))
