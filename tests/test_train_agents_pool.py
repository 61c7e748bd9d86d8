"""``benchmarks/studies/train_agents.py pool`` (:func:`agents.pooling.pool_studies`): studies of
the same models on disjoint evaluation seeds reported as one study, and refused when they are not."""

from __future__ import annotations

import pytest

from agents.pooling import pool_studies
from llmsched_gym.errors import ConfigError


def _study(name: str, eval_seeds, model="best", prefix="fc-x", train_seeds=(1,)) -> dict:
    pols = ["soft-reflective-ceiling"] + [f"agent-s{t}" for t in train_seeds]
    rows = [{"scenario": "codegen", "policy": p, "seed": s, "class": "critical", "ttft_p99": 0.4 + 0.01 * s}
            for s in eval_seeds for p in pols]
    cfg = {"prefix": prefix, "model": model, "class_metrics": {"critical": ["ttft_p99"]}}
    return {"study": name, "config": cfg, "train_seeds": list(train_seeds), "eval_seeds": list(eval_seeds),
            "rows": rows}


def test_pool_merges_rows_and_seeds():
    res = pool_studies([_study("a", [100, 101]), _study("b", [105])])
    assert res["study"] == "a+b" and res["eval_seeds"] == [100, 101, 105]
    assert len(res["rows"]) == 6 and {r["seed"] for r in res["rows"]} == {100, 101, 105}


def test_pool_merges_training_seeds():
    res = pool_studies([_study("a", [110, 111], train_seeds=(1, 2)), _study("b", [110, 111], train_seeds=(6,))])
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
def test_pool_refuses_mismatched_studies(other, match):
    with pytest.raises(ConfigError, match=match):
        pool_studies([_study("a", [100, 101]), _study("b", **other)])
