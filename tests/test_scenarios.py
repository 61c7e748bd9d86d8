"""Scenario registry, YAML scenarios, capacity measurement and the CLI (issues 2 and 8)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import assert_accounting, trace_path

from llmsched_gym.cli import main
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.scenarios import (
    Scenario,
    is_stable,
    list_scenarios,
    load_scenario,
    make_scenario,
    measure_capacity,
    register_scenario,
)

BUILTIN = {"codegen", "chat", "reasoning", "chatbot", "agent", "coder", "toolagent", "kv-hotspot",
           "kv-hotspot-thinking", "mooncake-conversation", "azure-code", "azure-conv"}

USER_YAML = {
    "name": "my-scenario",
    "description": "two instances, short gaussian prompts",
    "cluster": {"instances": 2, "hardware": "H100", "model": "qwen3-14b", "latency_model": "linear",
                "engine": {"max_num_batched_tokens": 4096}},
    "workload": {
        "arrival": {"process": "gamma", "rate": 6.0, "cv": 2.0},
        "input": {"dist": "gaussian", "mean": 400, "std": 100, "min": 8},
        "output": {"dist": "lognormal", "mean": 120, "std": 60},
        "classes": [{"name": "critical", "priority": 0, "share": 0.4},
                    {"name": "sheddable", "priority": -1, "share": 0.6}],
        "duration_s": 20,
    },
    "gateway": {"router": "lmetric", "flow_control": "soft-reflective-ceiling"},
}


def write_yaml(tmp_path, d, name="s.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d))
    return p


def test_builtin_names_are_registered():
    assert BUILTIN <= set(list_scenarios())
    assert {f"{f}-qwen2-7b" for f in ("chatbot", "agent", "coder", "toolagent")} <= set(list_scenarios())


def test_unknown_scenario_lists_registered_names():
    with pytest.raises(ConfigError, match="unknown scenario 'nope'.*codegen"):
        make_scenario("nope")


def test_paper_qps_maps_to_load_of_published_capacity(monkeypatch):
    import llmsched_gym.scenarios as S

    monkeypatch.setattr(S, "measure_capacity", lambda sc, **kw: 30.0)
    sc = make_scenario("codegen", paper_qps=10)
    assert sc.target_qps() == pytest.approx(10 / 15 * 30.0)
    assert make_scenario("codegen").target_qps() == pytest.approx(16 / 15 * 30.0)  # default: highest point
    assert make_scenario("chat", paper_qps=40).target_qps() == pytest.approx(40 / 70 * 30.0)
    assert make_scenario("codegen", qps=7).target_qps() == 7.0
    with pytest.raises(ConfigError, match="at most one"):
        make_scenario("codegen", qps=1, load=0.5)


def test_qps_override_sets_generated_rate():
    sc = make_scenario("chat", qps=30.0, duration_s=200.0)
    w = sc.build_workload(0)
    assert w.mean_rate == pytest.approx(30.0, rel=0.05)
    np.testing.assert_array_equal(w.arrival_s, sc.build_workload(0).arrival_s)
    assert np.mean(w.priority == 0) == pytest.approx(0.3, abs=0.03)


def small_codegen(instances):
    return make_scenario("codegen", instances=instances, capacity_horizon_s=60.0)


@pytest.fixture
def quick_capacity(tmp_path, monkeypatch):
    """A cold capacity cache, and shorter windows than the shipped method (same mechanics, faster)."""
    import llmsched_gym.capacity as C

    monkeypatch.setenv("LLMSCHED_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(C, "_MEMORY", {})
    monkeypatch.setattr(C, "MIN_ARRIVALS", 1000)
    monkeypatch.setattr(C, "SERVICE_TIMES", 4)
    return C


def test_measure_capacity_is_monotone_in_instances(tmp_path, quick_capacity):
    caps = [measure_capacity(small_codegen(n), rel_tol=0.05) for n in (1, 2)]
    assert caps[1] > 1.5 * caps[0]
    # deterministic and cached on disk
    assert (tmp_path / "capacity.json").exists()
    quick_capacity._MEMORY.clear()
    assert measure_capacity(small_codegen(1), rel_tol=0.05) == caps[0]


def test_half_load_keeps_queues_short_overload_grows_them(quick_capacity):
    sc = small_codegen(1)
    cap = measure_capacity(sc, rel_tol=0.05)
    ok, backlog_half = is_stable(sc, 0.5 * cap)
    bad, backlog_over = is_stable(sc, 1.2 * cap)
    assert ok and not bad
    assert backlog_over > 10 * max(backlog_half, 1)


def test_steady_state_criterion_and_how_capacity_was_found(quick_capacity):
    C = quick_capacity
    sc = small_codegen(1)
    rec = C.capacity_record(sc)
    assert rec["source"] == "measured now" and rec["method"] == C.METHOD
    cap = rec["qps"]
    # the search brackets the capacity: the last stable and the first unstable rate
    steps = {q: stable for q, stable, *_ in rec["steps"]}
    assert steps[cap] and not steps[rec["first_unstable_qps"]]
    assert rec["first_unstable_qps"] / cap - 1 <= 0.02
    # the envelope: every probed rate from half the capacity up to it is sustained
    assert all(stable for q, stable in steps.items() if cap / 2 <= q <= cap)
    assert any(cap / 2 <= q < cap for q in steps)
    # the window: capacity_horizon_s, service times of the heaviest requests, enough arrivals
    p99 = rec["service"]["p99_s"]
    assert rec["window_s"] >= max(60.0, C.SERVICE_TIMES * p99, 2 * C.MIN_ARRIVALS / cap) - 1e-9
    under, over = C.steady_state(sc, 0.5 * cap), C.steady_state(sc, 1.3 * cap)
    assert under.stable and abs(under.delivered_ratio - 1) < C.TOLERANCE and under.waiting_growth <= under.waiting_limit
    assert not over.stable and (over.delivered_ratio < 1 - C.TOLERANCE or over.waiting_growth > over.waiting_limit)
    assert over.ttft_mean_s > 10 * under.ttft_mean_s
    lines = C.describe(sc)
    assert f"{cap:.3f} req/s" in lines[0] and "no lasting queue" in lines[1]
    assert any(line.strip().startswith("search:") and f"{C.SEEDS} seed(s)" in line for line in lines)


def test_a_draining_second_half_extends_the_window_and_a_declared_burst_is_judged(quick_capacity):
    # Overloaded for the first 20 s, then light: at 60 s the second half still drains the
    # backlog (not steady yet), so the check doubles the window until it is steady. The
    # overload is a declared burst (the rate curve), and its queue is judged too: not sustained.
    C = quick_capacity
    sc = small_codegen(1)
    sc.workload.arrival.rate_curve = [[0, 3.0], [20, 3.0], [20, 0.3], [100000, 0.3]]
    check = C.steady_state(sc, 20.0, window_s=60.0)
    assert check.extensions >= 1 and check.window_s == 60.0 * 2 ** check.extensions
    assert not check.draining and not check.still_draining
    (burst,) = check.bursts
    assert burst["start_s"] < 1.0 and abs(burst["end_s"] - 20.0) < 0.1
    assert burst["waiting_growth"] > burst["waiting_limit"] and not burst["stable"] and not check.stable
    first, _ = C._check(sc, 20.0, 0, 60.0)
    assert first.draining and first.delivered_ratio > 1 + C.TOLERANCE


def test_a_backlog_still_draining_after_the_last_extension_is_not_sustained(quick_capacity, monkeypatch):
    # Without a declared burst (the same backlog from a cold start, a trace's own burst) a
    # second half that is still draining when the window can no longer grow carried the
    # first half's queue through it: a lasting queue.
    C = quick_capacity
    sc = small_codegen(1)
    sc.workload.arrival.rate_curve = [[0, 3.0], [20, 3.0], [20, 0.3], [100000, 0.3]]
    monkeypatch.setattr(C, "_burst_spans", lambda *a, **kw: [])
    monkeypatch.setattr(C, "MAX_EXTENSIONS", 0)
    check = C.steady_state(sc, 20.0, window_s=60.0)
    assert check.draining and check.still_draining and not check.stable
    assert check.delivered_ratio >= 1 - C.TOLERANCE and check.waiting_growth <= check.waiting_limit


def test_burst_spans_are_where_the_declared_rate_is_above_its_mean():
    import llmsched_gym.capacity as C

    (a, b), = C._burst_spans(make_scenario("kv-hotspot"), 200.0)
    assert abs(a - 30.0) < 0.1 and abs(b - 90.0) < 0.1
    assert C._burst_spans(make_scenario("chatbot"), 200.0) == []
    assert C._burst_spans(make_scenario("codegen"), 200.0) == []


def test_kv_hotspot_thinking_is_kv_hotspot_with_thinking_requests():
    base, thinking = make_scenario("kv-hotspot"), make_scenario("kv-hotspot-thinking")
    (bg0, hot0), (bg1, hot1) = base.workload, thinking.workload
    assert bg0.to_dict() == bg1.to_dict() and base.cluster == thinking.cluster
    assert hot1.output.to_dict() == make_scenario("reasoning").workload.output.to_dict()
    assert hot1.arrival.to_dict() == hot0.arrival.to_dict() and hot1.prefix.to_dict() == hot0.prefix.to_dict()
    assert hot1.output.mean > 20 * hot0.output.mean


def _fake_checks(monkeypatch, verdict):
    """Replace the steady-state run by ``verdict(qps, seed) -> bool``; the probed (qps, seed)."""
    import llmsched_gym.capacity as C

    calls = []

    def fake(scenario, qps, seed=0, window_s=None):
        calls.append((qps, seed))
        ok = verdict(qps, seed)
        return C.SteadyState(qps, 100.0, ok, 1000, 1000, 1.0 if ok else 0.8, 0.0, 40.0, 0, 0.1)

    monkeypatch.setattr(C, "steady_state", fake)
    monkeypatch.setattr(C, "service_stats", lambda sc, seed=0: {"p99_s": 1.0})
    return C, calls


def test_capacity_needs_every_seed_and_the_envelope_below_it(monkeypatch):
    sc = small_codegen(1)
    # seed 1 fails above 30 req/s: the capacity is what every seed sustains
    C, calls = _fake_checks(monkeypatch, lambda q, s: q < (30.0 if s == 1 else 60.0))
    rec = C.search_capacity(sc, rel_tol=0.02)
    assert 30.0 / 1.02 <= rec["qps"] < 30.0 and {s for _, s in calls} == set(range(C.SEEDS))
    # a non-monotone verdict (a router that overloads one instance at 36-40 req/s but not at
    # 40-60): the lucky rates above the hole are not the capacity
    C, calls = _fake_checks(monkeypatch, lambda q, s: q < 36.0 or 40.0 <= q < 60.0)
    rec = C.search_capacity(sc, rel_tol=0.02)
    assert 36.0 / 1.02 <= rec["qps"] < 36.0 and rec["first_unstable_qps"] / rec["qps"] - 1 <= 0.02
    probed = {q: ok for q, ok, *_ in rec["steps"]}
    assert any(ok and q > 40.0 for q, ok in probed.items())  # the bisection did land above the hole first
    assert all(ok for q, ok in probed.items() if rec["qps"] / 2 <= q <= rec["qps"])
    assert min(q for q in probed if q >= rec["qps"] / 2 * 0.999) <= rec["qps"] * C.ENVELOPE_STEP ** 6 * 1.001


def test_shipped_capacities_match_their_scenarios():
    # Each entry of the shipped table must still describe its scenario: rerun
    # `python benchmarks/validation/capacities.py NAME` after changing a built-in scenario.
    import llmsched_gym.capacity as C

    table = json.loads(C.SHIPPED_TABLE.read_text())
    assert table["method"] == C.METHOD
    assert {"codegen", "chatbot"} <= set(table["scenarios"])  # the README's first command
    assert {"mixed-chatbot", "flash-codegen"} <= set(table["scenarios"])  # the headroom scenarios
    for name, rec in table["scenarios"].items():
        sc = make_scenario(name)
        try:
            fingerprint = sc.fingerprint()
        except ConfigError:  # a trace scenario whose trace file is absent here
            continue
        assert rec["fingerprint"] == fingerprint, f"{name}: rerun python benchmarks/validation/capacities.py {name}"
        assert rec["method"] == C.METHOD and rec["qps"] > 0


def test_builtin_capacity_comes_from_the_shipped_table(tmp_path, monkeypatch):
    import llmsched_gym.capacity as C

    monkeypatch.setenv("LLMSCHED_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(C, "_MEMORY", {})
    monkeypatch.setattr(C, "steady_state", lambda *a, **kw: pytest.fail("a shipped capacity was re-measured"))
    want = json.loads(C.SHIPPED_TABLE.read_text())["scenarios"]["codegen"]["qps"]
    assert make_scenario("codegen", load=1.0).target_qps() == want
    assert make_scenario("codegen", load=0.5, duration_s=30.0).target_qps() == 0.5 * want
    assert C.capacity_record(make_scenario("codegen"))["source"].startswith("shipped table")
    assert not (tmp_path / "capacity.json").exists()


def test_duration_override_same_workload_on_cold_and_warm_cache(quick_capacity, monkeypatch):
    # Measuring capacity must neither shorten the scenario being measured nor depend on
    # the run's own window (issue 17: a cold cache cut every scenario to the capacity window).
    C = quick_capacity
    calls = []
    real = C.steady_state
    monkeypatch.setattr(C, "steady_state", lambda *a, **kw: calls.append(a[1]) or real(*a, **kw))
    base = make_scenario("codegen", instances=1, capacity_horizon_s=30.0)
    cold = make_scenario(base, load=0.5, duration_s=12.0).build_workload(0)
    measured = len(calls)
    assert measured > 0
    warm = make_scenario(base, load=0.5, duration_s=12.0).build_workload(0)
    np.testing.assert_array_equal(cold.arrival_s, warm.arrival_s)
    assert cold.arrival_s[-1] < 12.0
    # another window, or none (the scenario's own 180 s), reuses the one measurement
    other = make_scenario(base, load=0.5, duration_s=40.0).build_workload(0)
    assert 30.0 < other.arrival_s[-1] < 40.0
    full = make_scenario(base, load=0.5).build_workload(0)
    assert 170.0 < full.arrival_s[-1] < 180.0
    assert len(calls) == measured
    # a fresh process (empty memory cache) reads the same capacity from disk
    monkeypatch.setattr(C, "_MEMORY", {})
    np.testing.assert_array_equal(make_scenario(base, load=0.5, duration_s=12.0).build_workload(0).arrival_s,
                                  cold.arrival_s)
    assert len(calls) == measured


def test_user_yaml_scenario_runs_from_cli(tmp_path, capsys):
    p = write_yaml(tmp_path, USER_YAML)
    sc = load_scenario(p)
    assert sc.name == "my-scenario" and sc.cluster.engine.max_num_batched_tokens == 4096
    out = tmp_path / "r.json"
    assert main(["run", "--scenario", str(p), "--json", str(out)]) == 0
    res = json.loads(out.read_text())[0]  # --json writes a list, one summary per seed
    assert res["router"] == "lmetric" and res["flow_control"] == "soft-reflective-ceiling"
    assert res["outcomes"]["arrivals"] == sum(v for k, v in res["outcomes"].items() if k != "arrivals")
    assert set(res["classes"]) == {"critical", "sheddable", "all"}
    assert "ttft_p99" in res["classes"]["critical"]


@pytest.mark.parametrize("patch, message", [
    ({"workload": {**USER_YAML["workload"], "arival": {}}}, "arival"),
    ({"workload": {**USER_YAML["workload"], "arrival": {"process": "poisson", "rate": -3}}}, r"workload\.arrival\.rate=-3"),
    ({"cluster": {**USER_YAML["cluster"], "instnces": 2}}, "instnces"),
    ({"cluster": {**USER_YAML["cluster"], "hardware": "B300"}}, "B300"),
    ({"gateway": {"router": "nope"}}, r"gateway\.router.*nope"),
    ({"qps": -1}, "qps=-1"),
])
def test_bad_yaml_names_the_field(tmp_path, capsys, patch, message):
    p = write_yaml(tmp_path, {**USER_YAML, **patch})
    with pytest.raises(ConfigError, match=message):
        load_scenario(p)
    assert main(["run", "--scenario", str(p)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["run", "--hardware", "B200"],
    ["run", "--model", "gpt-5"],
    ["run", "--instances", "-2"],
    ["run", "--kv-blocks", "lots"],
    ["run", "--qps", "-5"],
    ["run", "--trace", "/no/such/file.jsonl"],
    ["run", "--router", "nope"],
    ["run", "--flow-control", "jsq"],
    ["run", "--scenario", "nope"],
    ["scenarios", "--describe", "nope"],
])
def test_cli_bad_input_exits_2_without_traceback(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmsched-gym") and "Traceback" not in err


def test_cli_malformed_trace_names_line_and_field(tmp_path, capsys):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
                 '{"timestamp": 5, "input_length": -4, "output_length": 5, "hash_ids": [2]}\n')
    assert main(["run", "--trace", str(p), "--trace-format", "mooncake"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "input_length" in err


def test_cli_trace_replay_json_keys(tmp_path):
    trace = trace_path("azure_llm_2023", "AzureLLMInferenceTrace_code.csv")
    out = tmp_path / "s.json"
    assert main(["run", "--trace", str(trace), "--trace-format", "azure", "--limit", "400", "--instances", "2",
                 "--critical-share", "0.3", "--seed", "3", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())  # one entry per seed, always a list
    assert isinstance(runs, list) and len(runs) == 1
    s = runs[0]
    for key in ("classes", "outcomes", "prefix_hit_token_ratio", "sim_seconds", "wall_seconds"):
        assert key in s
    assert s["outcomes"]["finished"] == 400
    assert s["classes"]["critical"]["requests"] == 120


def test_mooncake_replay_prefix_hit_close_to_ideal():
    """One instance, unbounded cache, arrivals slowed 30x so requests rarely overlap."""
    from llmsched_gym.simulator import ClusterConfig, Simulator
    from llmsched_gym.workloads.traces import load_mooncake

    w = load_mooncake(trace_path("mooncake", "conversation_trace.jsonl"), time_scale=30)
    ideal = w.ideal_prefix_hit_ratio()
    assert ideal == pytest.approx(0.374, abs=5e-4)
    sim = Simulator(w, ClusterConfig(instances=1, kv_blocks="unlimited")).run()
    assert_accounting(sim)
    hit = summarize(sim)["prefix_hit_token_ratio"]
    assert ideal - 0.015 <= hit <= ideal


def test_describe_prints_workload_statistics(capsys, monkeypatch):
    import llmsched_gym.scenarios as S

    monkeypatch.setattr(S, "measure_capacity", lambda sc, **kw: 100.0)
    assert main(["scenarios", "--describe", "chatbot"]) == 0
    out = capsys.readouterr().out
    for word in ("req/s", "input tokens", "output tokens", "prefix-hit ideal", "16 x H20"):
        assert word in out


def test_register_user_scenario_factory():
    base = make_scenario("chat", qps=5.0, duration_s=5.0)
    register_scenario("test-user-chat", lambda: base, overwrite=True)
    sc = make_scenario("test-user-chat", instances=1)
    assert isinstance(sc, Scenario) and sc.cluster.instances == 1
    assert_accounting(sc.simulator(0).run())


def test_trace_scenario_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        make_scenario("azure-code", trace_path=str(tmp_path / "missing.csv")).build_workload(0)
