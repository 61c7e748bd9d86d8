"""``benchmarks/train_agents.py pool``: studies of the same models on disjoint evaluation
seeds reported as one study, and refused when they are not."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "train_agents", Path(__file__).resolve().parents[1] / "benchmarks" / "train_agents.py")


@pytest.fixture()
def train_agents(tmp_path, monkeypatch):
    mod = importlib.util.module_from_spec(SPEC)
    SPEC.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", tmp_path)
    return mod


def _study(out: Path, name: str, eval_seeds, model="best", prefix="fc-x", train_seeds=(1,)):
    pols = ["soft-reflective-ceiling"] + [f"agent-s{t}" for t in train_seeds]
    rows = [{"scenario": "codegen", "policy": p, "seed": s, "class": "critical", "ttft_p99": 0.4 + 0.01 * s}
            for s in eval_seeds for p in pols]
    cfg = {"prefix": prefix, "model": model, "class_metrics": {"critical": ["ttft_p99"]}}
    (out / f"{name}.json").write_text(json.dumps({"study": name, "config": cfg, "train_seeds": list(train_seeds),
                                                  "eval_seeds": list(eval_seeds), "rows": rows}))


def test_pool_merges_rows_and_seeds(train_agents, tmp_path):
    _study(tmp_path, "a", [100, 101])
    _study(tmp_path, "b", [105])
    res = train_agents.pooled(["a", "b"])
    assert res["study"] == "a+b" and res["eval_seeds"] == [100, 101, 105]
    assert len(res["rows"]) == 6 and {r["seed"] for r in res["rows"]} == {100, 101, 105}


def test_pool_merges_training_seeds(train_agents, tmp_path):
    _study(tmp_path, "a", [110, 111], train_seeds=(1, 2))
    _study(tmp_path, "b", [110, 111], train_seeds=(6,))
    res = train_agents.pooled(["a", "b"])
    assert res["train_seeds"] == [1, 2, 6] and res["eval_seeds"] == [110, 111]
    pols = [r["policy"] for r in res["rows"]]
    assert pols.count("soft-reflective-ceiling") == 2  # the baseline's rows once
    assert sorted(set(pols) - {"soft-reflective-ceiling"}) == ["agent-s1", "agent-s2", "agent-s6"]


@pytest.mark.parametrize("other,match", [
    (dict(eval_seeds=[101, 102]), "share evaluation seeds"),
    (dict(eval_seeds=[100, 101], train_seeds=(1, 2)), "must share their training seeds"),
    (dict(eval_seeds=[105], train_seeds=(2,)), "must share their training seeds"),
    (dict(eval_seeds=[105], model=""), "evaluated other models"),
    (dict(eval_seeds=[105], prefix="fc-y"), "evaluated other models"),
])
def test_pool_refuses_mismatched_studies(train_agents, tmp_path, other, match):
    _study(tmp_path, "a", [100, 101])
    _study(tmp_path, "b", **other)
    with pytest.raises(SystemExit, match=match):
        train_agents.pooled(["a", "b"])
