"""inference-perf shared-prefix profiles as workloads (llmsched_gym/workloads/inference_perf.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from llmsched_gym.cli import main
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import load_scenario
from llmsched_gym.workloads.inference_perf import InferencePerfProfile

PROFILE = {"num_unique_system_prompts": 3, "num_users_per_system_prompt": 4, "system_prompt_len": 100,
           "question_len": 47, "output_len": 20, "stages": [{"rate": 2.5, "duration": 20}, {"rate": 6.0, "duration": 10}]}


def _chains(w):
    return [tuple(w.hashes(r)) for r in range(len(w))]


def test_request_counts_lengths_and_arrivals():
    p = InferencePerfProfile.from_dict(PROFILE)
    w = p.generate(seed=1)
    assert p.stage_counts() == [50, 60] and len(w) == 110
    assert (w.input_tokens == 147).all() and (w.output_tokens == 20).all()
    (a0, b0), (a1, b1) = p.stage_windows()
    assert p.stage_bounds(w.arrival_s)[1] == (w.arrival_s[50], w.arrival_s[-1])
    assert (a0, b0, a1, b1) == (0.0, 20.0, 21.0, 31.0)  # stage_gap_s: inference-perf's 1 s interval
    s0, s1 = w.arrival_s[:50], w.arrival_s[50:]
    # constant load: exponential gaps rescaled to the duration, so the last one is at the stage's end
    assert s0.min() > a0 and s0[-1] == pytest.approx(b0) and s1.min() > a1 and s1[-1] == pytest.approx(b1)
    assert np.diff(w.arrival_s).min() >= 0
    poisson = InferencePerfProfile.from_dict({**PROFILE, "load_type": "poisson"}).generate(seed=1)
    assert len(poisson) == 110 and np.all(np.diff(poisson.arrival_s) >= 0)
    assert not np.allclose(poisson.arrival_s, w.arrival_s)


def test_prefix_sharing_follows_inference_perf():
    p = InferencePerfProfile.from_dict(PROFILE)
    w = p.generate(seed=3)
    chains, B = _chains(w), p.block_tokens
    pool = p.pool_size  # 12 distinct prompts
    assert len(set(chains)) == pool
    assert len(set(chains[:pool])) == pool  # the first G x U requests: every prompt once
    for r in range(pool, 50):  # then the pool repeats in order (n mod G x U)
        assert chains[r] == chains[r - pool]
    assert chains[50] == chains[0]  # each stage restarts at pool entry 0
    shared = 100 // B  # 6 blocks wholly inside the system prompt
    for i in range(pool):
        for j in range(i + 1, pool):
            common = next((k for k, (x, y) in enumerate(zip(chains[i], chains[j])) if x != y), len(chains[i]))
            same_group = w.prefix_group[i] == w.prefix_group[j]
            assert common == (shared if same_group else 0)
    assert np.bincount(w.prefix_group[:pool]).tolist() == [4, 4, 4]


def test_multi_turn_pairing():
    p = InferencePerfProfile.from_dict({**PROFILE, "enable_multi_turn_chat": True})
    w = p.generate(seed=0)
    chains = _chains(w)
    assert p.multi_turn and len(set(chains)) == p.pool_size
    assert np.bincount(w.prefix_group[:p.pool_size]).tolist() == [4, 4, 4]  # U questions per system prompt


def test_inference_perf_config_as_is():
    cfg = {"data": {"type": "shared_prefix", "shared_prefix": {"num_groups": 2, "num_prompts_per_group": 3,
                                                               "system_prompt_len": 32, "question_len": 8,
                                                               "output_len": 5}},
           "load": {"type": "poisson", "interval": 2, "stages": [{"rate": 1, "duration": 5}]}}
    p = InferencePerfProfile.from_dict(cfg)
    assert (p.num_groups, p.prompts_per_group, p.load_type, p.stage_gap_s, p.stages) == (2, 3, "poisson", 2.0, [(1.0, 5.0)])


@pytest.mark.parametrize("change, match", [
    ({"load_type": "burst"}, "load_type='burst' is not known"),
    ({"stages": []}, "stages is empty"),
    ({"stages": [{"rate": -1, "duration": 5}]}, r"stages\[0\].rate=-1 is invalid"),
    ({"question_len": 0}, "question_len=0 is invalid"),
    ({"num_grups": 2}, r"unknown field\(s\) \[.num_grups.\]"),
])
def test_bad_profile(change, match):
    with pytest.raises(ConfigError, match=match) as e:
        InferencePerfProfile.from_dict({**PROFILE, **change})
    assert "\n" not in str(e.value)


def test_scenario_yaml_runs_per_stage(tmp_path):
    sc = {"name": "ip", "cluster": {"instances": 1, "hardware": "H100", "model": "qwen2.5-7b",
                                    "latency_model": "vllm-calibrated",
                                    "engine": {"max_num_batched_tokens": 2048, "async_scheduling": True}},
          "workload": {"inference_perf": PROFILE}}
    path = tmp_path / "ip.yaml"
    path.write_text(yaml.safe_dump(sc))
    s = load_scenario(path)
    assert s.profile.block_tokens == 16 and s.base_rate() == pytest.approx(110 / 30)
    out = tmp_path / "out.json"
    assert main(["run", "--scenario", str(path), "--json", str(out)]) == 0
    res = json.loads(out.read_text())[0]
    wins = res["windows"]
    assert list(wins) == ["stage1", "stage2"]
    assert [wins[k]["requests"] for k in wins] == [50, 60]
    assert sum(wins[k]["finished"] for k in wins) == res["outcomes"]["finished"] == 110
    assert res["prefix_hit_token_ratio"] > 0.8  # prompts repeat after the first 12
    # a scaled rate scales every stage
    assert len(s.at_rate(2 * s.base_rate()).build_workload(0)) == 220


def test_compare_rows_per_stage(tmp_path):
    sc = {"name": "ipc", "cluster": {"instances": 1, "model": "qwen2.5-7b", "latency_model": "vllm-calibrated"},
          "workload": {"inference_perf": {**PROFILE, "stages": [{"rate": 2, "duration": 10}, {"rate": 4, "duration": 5}]}}}
    path = tmp_path / "ipc.yaml"
    path.write_text(yaml.safe_dump(sc))
    out = tmp_path / "cmp"
    assert main(["compare", "--scenario", str(path), "--policies", "round-robin", "--seeds", "1", "--out", str(out),
                 "--no-plots", "--workers", "1"]) == 0
    import csv

    rows = {r["class"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert {"stage1", "stage2", "all"} <= set(rows)
    assert (int(rows["stage1"]["requests"]), int(rows["stage2"]["requests"]), int(rows["all"]["requests"])) == (20, 20, 40)
