"""Backends (llmsched_gym/evaluation/backends.py): results in task order on any of them, the
same cells whether they run in local processes or on Ray (issue 13)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from llmsched_gym.cli import main
from llmsched_gym.errors import ConfigError, MissingExtraError
from llmsched_gym.evaluation.backends import LocalBackend, RayBackend, make_backend

#: A tiny compare grid: 1 point x 2 policies x 2 seeds of a 5 s codegen window.
GRID = ["compare", "--scenario", "codegen", "--qps", "6", "--policies", "router=jsq;router=round-robin",
        "--seeds", "2", "--duration", "5", "--no-plots"]


def _late_square(x: int) -> int:
    time.sleep(0.05 * (3 - x))  # the first tasks finish last
    return x * x


@pytest.mark.parametrize("workers", [1, 2])
def test_local_backend_returns_results_in_task_order(workers):
    seen = []
    out = LocalBackend(workers).map(_late_square, [0, 1, 2, 3], lambda i, r: seen.append((i, r)))
    assert out == [0, 1, 4, 9]
    assert sorted(seen) == [(0, 0), (1, 1), (2, 4), (3, 9)]


def test_backend_names_and_flags_are_checked(tmp_path, capsys):
    with pytest.raises(ConfigError, match="allowed: local, ray"):
        make_backend("dask")
    with pytest.raises(ConfigError, match="workers"):
        make_backend("local", workers=0)
    assert main([*GRID, "--ray-address", "auto", "--out", str(tmp_path)]) == 2
    assert "--ray-address='auto' applies only to --backend ray" in capsys.readouterr().err


def test_ray_backend_without_the_extra_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    with pytest.raises(MissingExtraError, match=r"\[ray\] extra"):
        RayBackend()
    assert main([*GRID, "--backend", "ray", "--out", str(tmp_path)]) == 2
    assert 'pip install -e ".[ray]"' in capsys.readouterr().err


def _rows(out) -> list[dict]:
    rows = json.loads((out / "results.json").read_text())["rows"]
    return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in rows]  # timing is not a result


def test_compare_on_ray_equals_local_cell_by_cell(tmp_path):
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (pip install -e '.[ray]')")
    assert main([*GRID, "--workers", "2", "--out", str(tmp_path / "local")]) == 0
    try:
        # a local Ray instance of 2 CPUs (no dashboard), started and shut down by the backend
        assert main([*GRID, "--workers", "2", "--backend", "ray", "--out", str(tmp_path / "ray")]) == 0
        assert not ray.is_initialized()
    finally:
        ray.shutdown()
    local, on_ray = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
    assert len(local) == 2 * 2 * 3  # policies x seeds x (critical, sheddable, all)
    for a, b in zip(local, on_ray, strict=True):
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN equal to NaN
