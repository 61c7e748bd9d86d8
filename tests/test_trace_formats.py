"""Qwen/Bailian, BurstGPT, Azure 2024, BLIS TraceV2 (all columns) and ServeGen loaders.

Every fixture is written here into tmp_path; one malformed-row test per format checks
that the error names the file, the line and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
import yaml

from llmsched_gym.errors import TraceFormatError
from llmsched_gym.scenarios import load_scenario
from llmsched_gym.workloads.trace_formats import load_burstgpt, load_qwen, load_servegen
from llmsched_gym.workloads.traces import BLIS_BLOCK_TOKENS, load_azure, load_blis_trace, load_trace


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _jsonl(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


# ---------------------------------------------------------------------------- Qwen / Bailian
def _qwen(chat, parent, t, n_in, n_out, hashes, turn=1, type_="text"):
    return {"chat_id": chat, "parent_chat_id": parent, "timestamp": t, "input_length": n_in,
            "output_length": n_out, "type": type_, "turn": turn, "hash_ids": hashes}


QWEN = [
    _qwen(159, -1, 0.5, 40, 12, [7, 8, 9]),
    _qwen(55, -1, 0.0, 20, 3, [1, 2]),
    _qwen(160, 159, 3.25, 70, 0, [7, 8, 9, 10, 11], turn=2),  # follows 159 and shares its 3 blocks
    _qwen(161, 999, 4.0, 16, 5, [9], turn=3, type_="search"),  # parent outside the file
    _qwen(162, 160, 6.0, 33, 5, [3, 7, 8], turn=3),  # block ids of 159 at other positions
]


def test_qwen_sessions_and_prefix_chains(tmp_path):
    w = load_qwen(_write(tmp_path, "qwen_traceA_blksz_16.jsonl", _jsonl(QWEN)))
    assert w.hash_block_tokens == 16 and len(w) == 5
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.5, 3.25, 4.0, 6.0])  # sorted, rebased
    np.testing.assert_array_equal(w.input_tokens, [20, 40, 70, 16, 33])
    np.testing.assert_array_equal(w.output_tokens, [3, 12, 1, 5, 5])  # 0 clipped to 1
    s = w.session_id
    assert s[1] == s[2] == s[4] and len({s[0], s[1], s[3]}) == 3
    np.testing.assert_array_equal(w.hashes(2)[:3], w.hashes(1))  # a cached prefix of the next turn
    # Ids are chained: 159's block ids 7, 8 at positions 1, 2 of request 162 share nothing.
    assert not set(w.hashes(4)) & set(w.hashes(1))
    assert w.ideal_prefix_hit_ratio() > 0
    assert load_trace(tmp_path / "qwen_traceA_blksz_16.jsonl", "qwen", limit=2).input_tokens.tolist() == [20, 40]


@pytest.mark.parametrize("row, field, needle", [
    ({k: v for k, v in _qwen(3, -1, 1.0, 16, 1, [1]).items() if k != "turn"}, "turn", "missing field"),
    (_qwen(3, -1, "soon", 16, 1, [1]), "timestamp", "non-negative number"),
    (_qwen(3, -1, 1.0, 16.5, 1, [1]), "input_length", "integer >= 1"),
    (_qwen(3, -2, 1.0, 16, 1, [1]), "parent_chat_id", "integer >= -1"),
    (_qwen(3, -1, 1.0, 16, 1, [1, 2]), "hash_ids", "has 2 ids but input_length 16"),
    (_qwen(3, -1, 1.0, 16, 1, [1, "x"]), "hash_ids", "list of non-negative integers"),
    (_qwen(1, -1, 1.0, 16, 1, [1]), "chat_id", "repeats the chat_id of line 1"),
    (_qwen(3, -1, 1.0, 16, 1, [1], type_=5), "type", "a string"),
])
def test_qwen_malformed_row(tmp_path, row, field, needle):
    p = _write(tmp_path, "q.jsonl", _jsonl([_qwen(1, -1, 0.0, 16, 1, [1]), _qwen(2, 1, 0.5, 32, 1, [1, 2])]) + "\n"
               + json.dumps(row) + "\n")
    with pytest.raises(TraceFormatError) as e:
        load_qwen(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 4, field)  # line 3 is blank
    assert needle in str(e.value) and f"{p}, line 4, field {field!r}" in str(e.value)


def test_qwen_invalid_json_line(tmp_path):
    p = _write(tmp_path, "q.jsonl", _jsonl([_qwen(1, -1, 0.0, 16, 1, [1])]) + "{nope\n")
    with pytest.raises(TraceFormatError, match=r"q.jsonl, line 2: invalid JSON"):
        load_qwen(p)


# ---------------------------------------------------------------------------- BurstGPT
BURST = (
    "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,,1.5,ChatGPT,472,18,490,Conversation log\n"
    "45,77,2.0,ChatGPT,1087,0,1087,Conversation log\n"
    "18.5,77,3.1,GPT-4,417,276,693,API log\n"
    "118,,0.9,ChatGPT,0,45,45,API log\n"
)


def test_burstgpt(tmp_path):
    p = _write(tmp_path, "BurstGPT_1.csv", BURST)
    w = load_burstgpt(p)
    np.testing.assert_allclose(w.arrival_s, [0.0, 13.5, 40.0, 113.0])
    np.testing.assert_array_equal(w.input_tokens, [472, 417, 1087, 1])
    np.testing.assert_array_equal(w.output_tokens, [18, 276, 1, 45])  # a failure kept, clipped to 1
    np.testing.assert_array_equal(w.session_id, [-1, 0, 0, -1])
    assert len(load_burstgpt(p, drop_failures=True)) == 3
    gpt4 = load_burstgpt(p, model="GPT-4")
    assert len(gpt4) == 1 and gpt4.input_tokens[0] == 417
    with pytest.raises(TraceFormatError, match="no row has Model 'Claude'"):
        load_burstgpt(p, model="Claude")
    # The original v1 header (no Session ID / Elapsed time) reads too.
    v1 = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n"
    assert load_trace(_write(tmp_path, "v1.csv", v1), "burstgpt").input_tokens.tolist() == [472]


@pytest.mark.parametrize("row, field, needle", [
    ("50,,1.0,ChatGPT,many,18,490,API log", "Request tokens", "non-negative integer"),
    ("50,,1.0,ChatGPT,472,-3,490,API log", "Response tokens", "non-negative integer"),
    ("later,,1.0,ChatGPT,472,18,490,API log", "Timestamp", "non-negative number"),
    ("50,,1.0,ChatGPT,472,18,490.5,API log", "Total tokens", "non-negative integer"),
    ("50,,1.0,ChatGPT,472,18", None, "expected 8 columns, got 6"),
])
def test_burstgpt_malformed_row(tmp_path, row, field, needle):
    p = _write(tmp_path, "b.csv", BURST + row + "\n")
    with pytest.raises(TraceFormatError) as e:
        load_burstgpt(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 6, field)
    assert needle in str(e.value)
    bad = _write(tmp_path, "h.csv", "Time,Request tokens,Response tokens\n1,2,3\n")
    with pytest.raises(TraceFormatError, match=r"h.csv, line 1, field 'Timestamp': missing column"):
        load_burstgpt(bad)


# ---------------------------------------------------------------------------- Azure 2024
AZURE24 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2024-05-10 00:00:00.009930+00:00,2048,12\n"
    "2024-05-10 00:00:01+00:00,512,0\n"
    "2024-05-10 02:00:02.5+02:00,100,7\n"  # 00:00:02.5 UTC
)


def test_azure_2024(tmp_path):
    w = load_azure(_write(tmp_path, "AzureLLMInferenceTrace_code_1week.csv", AZURE24))
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.99007, 2.49007], atol=1e-9)
    np.testing.assert_array_equal(w.output_tokens, [12, 1, 7])


@pytest.mark.parametrize("row, field", [
    ("2024-05-10 00:00:03.1+00:00,12,x", "GeneratedTokens"),
    ("2024-13-10 00:00:03+00:00,12,3", "TIMESTAMP"),
    ("2024-05-09 23:59:59+00:00,12,3", "TIMESTAMP"),  # before the previous row, in UTC
])
def test_azure_2024_malformed_row(tmp_path, row, field):
    p = _write(tmp_path, "a24.csv", AZURE24 + row + "\n")
    with pytest.raises(TraceFormatError) as e:
        load_azure(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 5, field)


# ---------------------------------------------------------------------------- BLIS TraceV2, every column
BLIS_COLUMNS = ("request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,"
                "streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,"
                "reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,"
                "first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason")


def _blis_row(rid, slo, session, rnd, group, plen, n_in, n_out, arrival, send=0, deadline=0, server_in=0,
              reason="0", tenant="t1"):
    return (f"{rid},c{rid % 2},{tenant},{slo},{session},{rnd},{group},{plen},true,{n_in},{n_out},{n_in},0,0,0,"
            f"{reason},qwen3-14b,{deadline},{server_in},{arrival},{send},{arrival + 900},{arrival + 5000},"
            f"{n_out},ok,,stop")


BLIS_ROWS = [
    _blis_row(0, "critical", "s1", 0, "sys", 40, 10, 6, 1_000, deadline=301_000),
    _blis_row(1, "batch", "", 0, "", 0, 20, 5, 2_000, server_in=25),
    _blis_row(2, "critical", "s1", 1, "sys", 40, 8, 4, 3_000, send=3_500),
    _blis_row(3, "sheddable", "s2", 0, "", 0, 30, 2, 4_000),
    _blis_row(4, "critical", "s1", 2, "sys", 40, 9, 3, 5_000),
]
BLIS_HEADER_YAML = {"trace_version": 3, "time_unit": "microseconds", "mode": "generated",
                    "session_context_growth": "accumulate",
                    "goodput_slo_targets": {"critical": {"ttft_ms": 500, "itl_ms": 50},
                                            "standard": {"ttft_ms": 800},
                                            "sheddable": {"ttft_ms": 2000, "e2e_ms": 9000}}}


def _blis_files(tmp_path, rows, header=BLIS_HEADER_YAML, name="run"):
    csv_path = _write(tmp_path, f"{name}.csv", BLIS_COLUMNS + "\n" + "\n".join(rows) + "\n")
    if header is not None:
        _write(tmp_path, f"{name}.yaml", yaml.safe_dump(header))
    return csv_path


def test_blis_all_columns_accumulated_sessions(tmp_path):
    bt = load_blis_trace(_blis_files(tmp_path, BLIS_ROWS))
    w = bt.workload
    np.testing.assert_allclose(w.arrival_s * 1e6, [1_000, 2_000, 3_500, 4_000, 5_000])  # send_time_us wins
    # Accumulated session s1: prefix 40 + earlier rounds' input and output + own input.
    np.testing.assert_array_equal(w.input_tokens, [50, 25, 40 + 16 + 8, 30, 40 + 16 + 12 + 9])
    np.testing.assert_array_equal(w.priority, [0, -1, 0, -1, 0])
    np.testing.assert_array_equal(w.session_id, [0, -1, 0, 1, 0])
    np.testing.assert_array_equal(bt.round_index, [0, 0, 1, 0, 2])
    G = BLIS_BLOCK_TOKENS
    for a, b in ((0, 2), (2, 4)):  # each round's full blocks are a cached prefix of the next
        n = w.input_tokens[a] // G
        np.testing.assert_array_equal(w.hashes(a)[:n], w.hashes(b)[:n])
    assert not set(w.hashes(1)) & set(w.hashes(0)) and not set(w.hashes(3)) & set(w.hashes(0))
    assert bt.deadline_us[0] == 301_000 and np.isnan(bt.deadline_us[1])
    assert list(bt.tenant_id) == ["t1"] * 5 and bt.model[0] == "qwen3-14b"
    assert w.slo_ttft_s == {0: 0.5, -1: 2.0} and w.slo_tpot_s == {0: 0.05}  # critical/standard share 0: strictest
    gaie = load_blis_trace(tmp_path / "run.yaml", priority_map="blis").workload
    np.testing.assert_array_equal(gaie.priority, [4, -1, 4, -2, 4])
    # Without the accumulate header each round's prompt is its own prefix + input.
    plain = load_blis_trace(_blis_files(tmp_path, BLIS_ROWS, {"time_unit": "microseconds"}, "plain")).workload
    np.testing.assert_array_equal(plain.input_tokens, [50, 25, 48, 30, 49])


@pytest.mark.parametrize("bad, field, needle", [
    (_blis_row(5, "critical", "", 0, "", 0, 10, 5, 9_000, deadline=8_000), "deadline_us", "precedes arrival_time_us"),
    (_blis_row(5, "critical", "s2", 2, "", 0, 10, 5, 9_000), "round_index", "round 2 where round 1 is expected"),
    (_blis_row(5, "critical", "", 0, "", 0, 10, 5, 9_000, reason="1.5"), "reason_ratio", "in [0, 1]"),
    (_blis_row(5, "vip", "", 0, "", 0, 10, 5, 9_000), "slo_class", "'vip' is not known"),
    (_blis_row(5, "critical", "", 0, "", 0, 10, 5, 9_000).replace(",true,", ",maybe,"), "streaming", "true or false"),
    (_blis_row(5, "critical", "", 0, "", 0, 10, 5, 9_000, server_in=-1), "server_input_tokens", ">= 0"),
])
def test_blis_malformed_row(tmp_path, bad, field, needle):
    p = _blis_files(tmp_path, BLIS_ROWS + [bad])
    with pytest.raises(TraceFormatError) as e:
        load_blis_trace(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 7, field)
    assert needle in str(e.value)


def test_blis_header_errors(tmp_path):
    p = _blis_files(tmp_path, BLIS_ROWS, {**BLIS_HEADER_YAML, "session_context_growth": "Accumulate"})
    with pytest.raises(TraceFormatError, match=r"run.yaml, field 'session_context_growth'.*allowed: accumulate"):
        load_blis_trace(p)
    p = _blis_files(tmp_path, BLIS_ROWS, {**BLIS_HEADER_YAML, "goodput_slo_targets": {"gold": {"ttft_ms": 1}}})
    with pytest.raises(TraceFormatError, match=r"field 'goodput_slo_targets.gold'.*not known"):
        load_blis_trace(p)


# ---------------------------------------------------------------------------- ServeGen
@dataclass
class _Request:  # servegen.construct.Request
    request_id: int
    timestamp: float
    data: dict


def test_servegen_lists_and_files(tmp_path):
    reqs = [_Request(1, 0.75, {"input_tokens": np.int64(812), "output_tokens": np.int64(95)}),
            _Request(0, 0.25, {"input_tokens": 300, "output_tokens": 0, "reason_ratio": 0.4}),
            _Request(2, 1.5, {"text_tokens": 40, "image_tokens": [576, 576], "audio_tokens": [], "video_tokens": [],
                              "output_tokens": 20})]
    w = load_servegen(reqs)
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.5, 1.25])
    np.testing.assert_array_equal(w.input_tokens, [300, 812, 40 + 1152])
    np.testing.assert_array_equal(w.output_tokens, [1, 95, 20])
    rows = [{"request_id": r.request_id, "timestamp": r.timestamp,
             "data": {k: (int(v) if isinstance(v, np.integer) else v) for k, v in r.data.items()}} for r in reqs]
    p = _write(tmp_path, "servegen.jsonl", _jsonl(rows))
    np.testing.assert_array_equal(load_trace(p, "servegen").input_tokens, w.input_tokens)


@pytest.mark.parametrize("data, field, needle", [
    ({"input_tokens": 10}, "data.output_tokens", "missing field"),
    ({"input_tokens": -1, "output_tokens": 3}, "data.input_tokens", "non-negative integer"),
    ({"text_tokens": 4, "image_tokens": "big", "output_tokens": 3}, "data.image_tokens", "list of non-negative"),
    ({"output_tokens": 3}, "data.input_tokens", "missing field"),
])
def test_servegen_malformed_row(tmp_path, data, field, needle):
    good = {"request_id": 0, "timestamp": 0.0, "data": {"input_tokens": 5, "output_tokens": 5}}
    p = _write(tmp_path, "sg.jsonl", _jsonl([good, {"request_id": 1, "timestamp": 1.0, "data": data}]))
    with pytest.raises(TraceFormatError) as e:
        load_servegen(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 2, field)
    assert needle in str(e.value)
    with pytest.raises(TraceFormatError, match=r"<servegen requests>, line 2, field 'timestamp'"):
        load_servegen([good, {"timestamp": -1.0, "data": {}}])


# ---------------------------------------------------------------------------- scenarios
def test_scenario_yaml_with_new_trace_format(tmp_path):
    _write(tmp_path, "q.jsonl", _jsonl(QWEN))
    doc = {"name": "qwen-replay", "cluster": {"instances": 1},
           "workload": {"trace": {"path": str(tmp_path / "q.jsonl"), "format": "qwen", "critical_share": 0.4}}}
    sc = load_scenario(_write(tmp_path, "s.yaml", yaml.safe_dump(doc)))
    w = sc.build_workload(0)
    assert len(w) == 5 and (w.priority == 0).sum() == 2
    sim = sc.simulator(0, router="llm-d").run()
    assert sim.table.counts()["finished"] == 5
