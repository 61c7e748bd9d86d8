"""Trace loaders: reference statistics from traces/SOURCES.md, error reporting, helpers."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from conftest import trace_path

from llmsched_gym.errors import ConfigError, TraceFormatError
from llmsched_gym.workloads.traces import (
    BLIS_BLOCK_TOKENS,
    assign_priorities,
    load_azure,
    load_blis_trace,
    load_mooncake,
    load_trace,
    scale_to_rate,
)


@pytest.fixture(scope="module")
def mooncake():
    return load_mooncake(trace_path("mooncake", "conversation_trace.jsonl"))


def test_mooncake_reference_statistics(mooncake):
    w = mooncake
    assert len(w) == 12_031
    assert w.input_tokens.mean() == pytest.approx(12_035, abs=0.5)
    assert np.median(w.input_tokens) == 6_909
    assert w.output_tokens.mean() == pytest.approx(343, abs=0.5)
    assert w.hash_block_tokens == 512
    assert len(w.hash_ids) == 288_500 and len(np.unique(w.hash_ids)) == 182_790
    assert w.ideal_prefix_hit_ratio() == pytest.approx(0.374, abs=0.0005)
    assert np.all(w.hash_ids[w.hash_offsets[:-1]] == 0)  # every request starts with block 0
    assert w.mean_rate == pytest.approx(3.40, abs=0.01)


def test_mooncake_bucket_spreading():
    path = trace_path("mooncake", "conversation_trace.jsonl")
    raw = load_mooncake(path, spread_buckets=False)
    even = load_mooncake(path)
    rand = load_mooncake(path, seed=7)
    # Raw timestamps sit on ~3 s buckets; spreading keeps each request within its bucket.
    assert len(np.unique(raw.arrival_s)) == 1_180
    assert len(np.unique(even.arrival_s)) == len(even)
    for w in (even, rand):
        assert np.all(np.diff(w.arrival_s) >= 0)
        assert np.all((w.arrival_s >= raw.arrival_s) & (w.arrival_s < raw.arrival_s + 3.0))
    assert np.array_equal(load_mooncake(path, seed=7).arrival_s, rand.arrival_s)
    np.testing.assert_array_equal(even.hash_ids, raw.hash_ids)


def test_mooncake_limit_and_time_scale():
    path = trace_path("mooncake", "conversation_trace.jsonl")
    w = load_mooncake(path, limit=100, time_scale=2.0)
    ref = load_mooncake(path, limit=100)
    assert len(w) == 100
    np.testing.assert_allclose(w.arrival_s, 2 * ref.arrival_s)


@pytest.mark.parametrize(
    "name, requests, in_mean, out_mean, rate",
    [("code", 8_819, 2_048, 27.9, 2.57), ("conv", 19_366, 1_155, 211, 5.53)],
)
def test_azure_reference_statistics(name, requests, in_mean, out_mean, rate):
    w = load_azure(trace_path("azure_llm_2023", f"AzureLLMInferenceTrace_{name}.csv"))
    assert len(w) == requests
    assert w.input_tokens.mean() == pytest.approx(in_mean, rel=0.001)
    assert w.output_tokens.mean() == pytest.approx(out_mean, rel=0.002)
    assert w.mean_rate == pytest.approx(rate, abs=0.01)
    assert w.arrival_s[0] == 0 and w.hash_block_tokens == 0
    assert w.ideal_prefix_hit_ratio() == 0.0


def test_loaders_are_fast():
    """A loader costs at most a few times parsing its file's lines (a ratio measured in one
    run: machines here are shared, so no absolute times)."""
    import json

    def parse_lines(path, jsonl):
        with open(path) as f:
            return [json.loads(ln) if jsonl else ln.split(",") for ln in f if ln.strip()]

    for path, loader, jsonl in [
        (trace_path("mooncake", "conversation_trace.jsonl"), load_mooncake, True),
        (trace_path("azure_llm_2023", "AzureLLMInferenceTrace_conv.csv"), load_azure, False),
    ]:
        def best(f):  # best of 3: a busy machine only ever makes a run slower
            times = []
            for _ in range(3):
                t = time.perf_counter()
                f()
                times.append(time.perf_counter() - t)
            return min(times)

        base = best(lambda p=path, j=jsonl: parse_lines(p, j))
        assert best(lambda p=path, f=loader: f(p)) < 6 * base + 0.05


def test_blis_trace():
    yaml_path = trace_path("blis", "ref5000.yaml")
    bt = load_blis_trace(yaml_path)
    w = bt.workload
    assert len(w) == 5_000
    assert w.mean_rate == pytest.approx(60.0, rel=1e-3)
    assert w.input_tokens.mean() == pytest.approx(513, abs=1)
    assert (w.input_tokens.min(), w.input_tokens.max()) == (2, 1375)
    assert bt.header["time_unit"] == "microseconds"
    ttft_ms = (bt.first_token_us - w.arrival_s * 1e6) / 1e3
    e2e_ms = (bt.finish_us - w.arrival_s * 1e6) / 1e3
    assert ttft_ms.mean() == pytest.approx(188.4, abs=0.1)
    assert e2e_ms.mean() == pytest.approx(15_798, abs=1)
    assert np.array_equal(bt.request_id, np.arange(5_000))
    assert np.all(w.priority == 0) and np.all(w.session_id == -1)
    # The csv path gives the same trace.
    np.testing.assert_array_equal(
        load_blis_trace(trace_path("blis", "ref5000.csv")).workload.arrival_s, w.arrival_s
    )


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


BLIS_HEADER = (
    "request_id,slo_class,session_id,prefix_group,prefix_length,input_tokens,output_tokens,"
    "arrival_time_us,first_chunk_time_us,last_chunk_time_us,status\n"
)


def test_blis_prefix_groups_and_classes(tmp_path):
    rows = [
        "0,critical,,sys,40,10,5,100,200,300,ok",
        "1,sheddable,s1,sys,40,30,5,200,300,400,ok",
        "2,batch,s1,,0,20,5,300,,,error",
        "3,standard,,other,40,10,5,400,500,600,ok",
    ]
    p = _write(tmp_path, "t.csv", BLIS_HEADER + "\n".join(rows) + "\n")
    bt = load_blis_trace(p)
    w = bt.workload
    np.testing.assert_array_equal(w.input_tokens, [50, 70, 20, 50])  # prefix prepended as in BLIS replay
    np.testing.assert_array_equal(w.priority, [0, -1, -1, 0])
    np.testing.assert_array_equal(w.session_id, [-1, 0, 0, -1])
    np.testing.assert_array_equal(w.prefix_group, [0, 0, -1, 1])
    G = BLIS_BLOCK_TOKENS
    shared = 40 // G
    np.testing.assert_array_equal(w.hashes(0)[:shared], w.hashes(1)[:shared])
    assert not set(w.hashes(0)[shared:]) & set(w.hashes(1))
    assert not set(w.hashes(3)) & set(w.hashes(0))  # another group shares nothing
    assert np.isnan(bt.first_token_us[2]) and bt.first_token_us[0] == 200


@pytest.mark.parametrize(
    "line, field, needle",
    [
        ("not json", None, "invalid JSON"),
        ('{"timestamp": 0, "input_length": 10, "hash_ids": [1]}', "output_length", "missing field"),
        (
            '{"timestamp": 0, "input_length": 10.5, "output_length": 1, "hash_ids": [1]}',
            "input_length",
            "integer",
        ),
        (
            '{"timestamp": -3, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            "timestamp",
            "non-negative",
        ),
        ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "hash_ids", "ceil"),
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}',
            "hash_ids",
            "integers",
        ),
        (
            '{"timestamp": 0, "input_length": 10, "output_length": true, "hash_ids": [1]}',
            "output_length",
            "integer",
        ),
    ],
)
def test_mooncake_malformed_rows(tmp_path, line, field, needle):
    good = json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]})
    p = _write(tmp_path, "bad.jsonl", f"{good}\n{good}\n{line}\n")
    with pytest.raises(TraceFormatError) as e:
        load_mooncake(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 3, field)
    assert needle in str(e.value) and "bad.jsonl, line 3" in str(e.value)


@pytest.mark.parametrize(
    "row, field",
    [
        ("2023-11-16 18:17:05.0000000,12,x", "GeneratedTokens"),
        ("2023-11-16 18:17:05.0000000,-4,3", "ContextTokens"),
        ("yesterday,12,3", "TIMESTAMP"),
        ("2023-11-16 18:17:05.0000000,12", None),
        ("2023-11-16 18:17:01.0000000,12,3", "TIMESTAMP"),  # goes back in time
    ],
)
def test_azure_malformed_rows(tmp_path, row, field):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n" + row + "\n"
    p = _write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceFormatError) as e:
        load_azure(p)
    assert (e.value.line, e.value.field) == (3, field)
    assert "bad.csv" in str(e.value)


def test_azure_zero_tokens_clipped_and_fraction_parsed(tmp_path):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,0,10\n2023-11-16 18:17:04.0319601,5,0\n"
    w = load_azure(_write(tmp_path, "z.csv", text))
    np.testing.assert_array_equal(w.input_tokens, [1, 5])
    np.testing.assert_array_equal(w.output_tokens, [10, 1])
    assert w.arrival_s[1] == pytest.approx(0.0520001, abs=1e-9)


def test_blis_malformed_rows(tmp_path):
    p = _write(tmp_path, "b.csv", BLIS_HEADER + "0,critical,,,0,10,5,100,,,ok\n1,vip,,,0,10,5,200,,,ok\n")
    with pytest.raises(TraceFormatError, match=r"line 3, field 'slo_class'.*allowed"):
        load_blis_trace(p)
    p = _write(tmp_path, "c.csv", BLIS_HEADER + "0,critical,,,0,ten,5,100,,,ok\n")
    with pytest.raises(TraceFormatError, match=r"line 2, field 'input_tokens'"):
        load_blis_trace(p)


def test_load_trace_dispatch_and_missing_file(tmp_path):
    w = load_trace(trace_path("azure_llm_2023", "AzureLLMInferenceTrace_code.csv"), "azure")
    assert len(w) == 8_819
    with pytest.raises(ConfigError, match="allowed: mooncake, azure, blis, qwen, burstgpt, servegen"):
        load_trace(tmp_path / "x.csv", "nosuch")
    with pytest.raises(TraceFormatError, match="not found"):
        load_trace(tmp_path / "missing.jsonl", "mooncake")
    with pytest.raises(TraceFormatError, match="not found"):
        load_mooncake(tmp_path / "missing.jsonl")


def test_assign_priorities_and_scale_to_rate(mooncake):
    w = assign_priorities(mooncake, critical_share=0.3, seed=1)
    assert (w.priority == 0).sum() == round(0.3 * len(w))
    assert set(np.unique(w.priority)) == {-1, 0}
    np.testing.assert_array_equal(w.priority, assign_priorities(mooncake, 0.3, seed=1).priority)
    assert not np.array_equal(w.priority, assign_priorities(mooncake, 0.3, seed=2).priority)
    assert np.all(mooncake.priority == 0)  # the input is unchanged
    fast = scale_to_rate(w, 10.0)
    assert fast.mean_rate == pytest.approx(10.0)
    np.testing.assert_array_equal(fast.priority, w.priority)
    with pytest.raises(ConfigError, match="rate"):
        scale_to_rate(w, -1)
    with pytest.raises(ConfigError, match="critical_share"):
        assign_priorities(w, 1.5)
