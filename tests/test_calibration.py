"""Calibration against measured runs, latency-model files, vLLM's async scheduling lag."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.calibration import (
    PHYSICAL_PRIOR,
    MeasuredRun,
    calibrate,
    decode_start,
    load_runs,
    parse_coefficients,
    run_scenario,
    simulate_run,
    write_latency_file,
)
from llmsched_gym.cli import main
from llmsched_gym.engine.latency import VLLM_CALIBRATED, make_latency_model
from llmsched_gym.errors import ConfigError
from llmsched_gym.simulator import ClusterConfig, Simulator
from llmsched_gym.workloads.workload import Workload

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "real_vllm"
WORKLOAD = {"num_unique_system_prompts": 3, "num_users_per_system_prompt": 3, "system_prompt_len": 100,
            "question_len": 300, "output_len": 60, "enable_multi_turn_chat": False, "load_type": "constant"}
TRUE = {"a0": 9000.0, "b3": 1.3, "b7": 600.0}
NEEDS_CONFIGS = pytest.mark.skipif(not (SHARED / "model_configs").is_dir(),
                                   reason="the real-vLLM model configs are not beside the repo (../shared/real_vllm)")


def _runs(measured_from: dict | None = None) -> list[MeasuredRun]:
    runs = []
    # weight-read times of ~4, ~7 and ~10 ms a step: b3 (per byte) and b7 (per step) separate
    for name, tp, stages in (("Qwen2.5-7B-Instruct", 1, [(4.0, 900.0), (12.0, 600.0)]),
                             ("Mistral-Nemo-Instruct-2407", 1, [(3.0, 900.0)]), ("Yi-34B", 2, [(6.0, 900.0)])):
        model = {"config": str(SHARED / "model_configs" / name / "config.json"), "name": name}
        vllm = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "block_size": 16, "version": "0.15.1"}
        run = MeasuredRun(name, model, "H100", tp, vllm, dict(WORKLOAD), [(r, t, {}) for r, t in stages], {})
        if measured_from is not None:  # the simulator's own statistics as the "measurements"
            got = simulate_run(run, "vllm-calibrated", measured_from)
            run.stages = [(r, t, st) for (r, t, _), st in zip(run.stages, got["stages"])]
            run.whole = got["whole"]
        runs.append(run)
    return runs


@NEEDS_CONFIGS
def test_calibration_recovers_known_coefficients():
    runs = _runs(measured_from=TRUE)
    start = {"a0": 15000.0, "b3": 1.0, "b7": 200.0}
    got = calibrate(runs, base="vllm-calibrated", base_params=start, fit=("a0", "b3", "b7"), iterations=15)
    tolerance = {"a0": 0.02, "b3": 0.02, "b7": 0.05}  # b7 moves a step by 0.6 ms of ~5-12 ms
    for k, v in TRUE.items():
        assert got[k] == pytest.approx(v, rel=tolerance[k]), (k, got[k])
    untouched = set(VLLM_CALIBRATED) - set(TRUE)
    assert all(got[k] == VLLM_CALIBRATED[k] for k in untouched)


@NEEDS_CONFIGS
def test_physical_prior_recovers_the_overheads_from_the_decode_start():
    """Runs simulated under the physical prior (b2b = b3 = 1, b4 from NVLink, b6 = 0) and known
    overheads: the linear decode start lands near them (Little's law and a mean context are
    approximations) and the fit from there recovers them."""
    true = {**PHYSICAL_PRIOR, "a0": 9000.0, "b2a": 1.5, "b7": 2000.0}
    runs = _runs(measured_from=true)
    start = {**PHYSICAL_PRIOR, "a0": 15000.0, "b2a": 0.1, "b7": 100.0}  # far from the truth, as BLIS's are
    fit = ("a0", "b2a", "b7")
    first = decode_start(runs, "vllm-calibrated", {**VLLM_CALIBRATED, **start}, fit)
    assert first["a0"] == 15000.0  # a0 delays arrivals: no decode signal, kept
    assert first["b7"] == pytest.approx(2000.0, rel=0.15) and first["b2a"] == pytest.approx(1.5, rel=0.5)
    got = calibrate(runs, base="vllm-calibrated", base_params=start, fit=fit, iterations=15, from_decode=("b2a", "b7"))
    tolerance = {"a0": 0.02, "b2a": 0.1, "b7": 0.03}
    for k in fit:
        assert got[k] == pytest.approx(true[k], rel=tolerance[k]), (k, got[k])
    assert all(got[k] == v for k, v in PHYSICAL_PRIOR.items())


def test_coefficient_lists_are_checked():
    assert parse_coefficients("--set", "b7=2000, b6=0", ("b6", "b7")) == {"b7": 2000.0, "b6": 0.0}
    with pytest.raises(ConfigError, match=r"--set='b9=1' is invalid; give NAME=VALUE with NAME one of b6, b7"):
        parse_coefficients("--set", "b9=1", ("b6", "b7"))
    with pytest.raises(ConfigError, match=r"--set b7='fast' is invalid; it must be a finite number >= 0"):
        parse_coefficients("--set", "b7=fast", ("b6", "b7"))
    with pytest.raises(ConfigError, match=r"--set b7=-1.0 is invalid"):
        parse_coefficients("--set", "b7=-1", ("b6", "b7"))


def test_latency_file_round_trip_and_cli(tmp_path):
    path = tmp_path / "lat.json"
    write_latency_file(path, "vllm-calibrated", {**VLLM_CALIBRATED, "b3": 1.25}, {"note": "test"})
    m = make_latency_model(str(path), "H100", "qwen2.5-7b")
    assert m.name == "vllm-calibrated" and m.b3 == 1.25
    assert make_latency_model(str(path), "H100", "qwen2.5-7b", b3=2.0).b3 == 2.0  # explicit overrides win
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "vllm-calibrated", "params": {"b99": 1}}))
    with pytest.raises(ConfigError, match=r"params \['b99'\]"):
        make_latency_model(str(bad))
    bad.write_text(json.dumps({"kind": "magic"}))
    with pytest.raises(ConfigError, match="kind='magic' is invalid"):
        make_latency_model(str(bad))


@NEEDS_CONFIGS
def test_calibrate_command(tmp_path, capsys):
    runs = _runs(measured_from=TRUE)
    doc = {"runs": [{"key": r.key, "model": r.model["name"], "model_config": r.model["config"], "hardware": "H100",
                     "tp": r.tp, "vllm": r.vllm, "workload": r.workload,
                     "stages": [{"rate": a, "duration_s": b, "measured": st} for a, b, st in r.stages],
                     "whole_run_measured": r.whole} for r in runs]}
    src = tmp_path / "runs.json"
    src.write_text(json.dumps(doc, default=float))
    out = tmp_path / "fit.json"
    assert main(["calibrate", "--runs", str(src), "--out", str(out), "--fit", "a0,b7", "--iterations", "3",
                 "--holdout-model", "Yi-34B"]) == 0
    text = capsys.readouterr().out
    assert "held_out:" in text and "Yi-34B" in text
    fit = json.loads(out.read_text())
    assert fit["kind"] == "vllm-calibrated" and fit["fit"]["held_out_models"] == ["Yi-34B"]
    assert len(fit["fit"]["errors_pct"]) == 3
    assert main(["calibrate", "--runs", str(src), "--out", str(out), "--holdout-model", "nope"]) == 2
    assert "--holdout-model 'nope' is not a model" in capsys.readouterr().err
    assert main(["calibrate", "--runs", str(src), "--out", str(out), "--physical-prior", "--fit", "a0,b3"]) == 2
    assert "--fit 'b3' contradicts --physical-prior" in capsys.readouterr().err
    assert main(["calibrate", "--runs", str(src), "--out", str(out), "--physical-prior", "--from-decode", "b6"]) == 2
    assert "--from-decode 'b6' is invalid; give fitted step coefficients: b2a, b5, b7" in capsys.readouterr().err
    assert main(["calibrate", "--runs", str(src), "--out", str(out), "--physical-prior", "--fit", "a0,b7",
                 "--iterations", "2"]) == 0
    fit = json.loads(out.read_text())
    assert fit["fit"]["from_decode"] == ["b7"] and fit["fit"]["fixed"] == PHYSICAL_PRIOR
    assert all(fit["params"][k] == v for k, v in PHYSICAL_PRIOR.items())


@pytest.mark.skipif(not (SHARED / "runs.json").is_file(), reason="the real-vLLM runs are not beside the repo")
def test_every_real_run_runs_through_the_public_interface():
    runs = load_runs(SHARED / "runs.json")
    assert len(runs) == 15 and any("FP8" in r.model["config"] for r in runs)
    for run in runs:
        sc = run_scenario(run)
        assert sc.cluster.engine.async_scheduling  # vLLM 0.15.1
        got = simulate_run(run)
        assert got["whole"]["finished"] == got["whole"]["requests"] == sum(int(r * t) for r, t, _ in run.stages)


def test_async_scheduling_delays_outputs_by_one_iteration():
    w = Workload([0.0], [200], [5])
    runs = {}
    for on in (False, True):
        cl = ClusterConfig(instances=1, model="qwen2.5-7b", latency_model="vllm-calibrated",
                           engine={"async_scheduling": on, "event_skipping": False})
        sim = Simulator(w, cl)
        sim.run()
        runs[on] = sim
    lat = runs[False].latency
    prefill = lat.step_time_us(np.array([200]), np.array([200]), 0, 0) * 1e-6
    decode = lat.step_time_us(np.zeros(0), np.zeros(0), 1, 203) * 1e-6  # the last decode step (203 in KV)
    t0, t1 = runs[False].table, runs[True].table
    assert t1.first_token_t[0] - t0.first_token_t[0] == pytest.approx(prefill, rel=1e-9)
    assert t1.finish_t[0] - t0.finish_t[0] == pytest.approx(decode, rel=1e-9)
    assert t1.outcome[0] == t0.outcome[0] == 1


@NEEDS_CONFIGS
@pytest.mark.parametrize(("name", "per_token", "tp", "kv_dtype"), [
    ("Llama-2-7b-hf", 32 * 32 * 128 * 2 * 2, 1, "auto"),  # MHA: 32 KV heads, 0.5 MiB a token
    ("Llama-2-7b-hf", 32 * 32 * 128 * 2 * 2, 2, "auto"),
    ("Llama-2-7b-hf", 32 * 32 * 128 * 2 * 1, 1, "fp8"),
    ("Qwen2.5-7B-Instruct", 28 * 4 * 128 * 2 * 2, 1, "auto"),  # GQA: 4 KV heads of 28 query heads
])
def test_decode_kv_read_is_every_sequence_whole_context_once(name, per_token, tp, kv_dtype):
    """KV bytes per token, hand-computed as layers x KV heads x head dim x 2 (K, V) x bytes; a
    decode step reads each sequence's whole context (paged attention) once, split over the TP
    ranks. Only b2b (the KV-read term) is non-zero here."""
    from llmsched_gym.engine.latency import VllmCalibratedModel
    from llmsched_gym.engine.steptime import lower, step_us

    cfg = str(SHARED / "model_configs" / name / "config.json")
    zero = {k: 0.0 for k in VLLM_CALIBRATED if k.startswith("b")}
    m = VllmCalibratedModel("H100", {"config": cfg, "kv_cache_dtype": kv_dtype}, tp, **{**zero, "b2b": 1.0})
    assert m.model.kv_bytes_per_token == per_token
    contexts, n = 3 * 700, 3  # three sequences of 700 tokens, each reading its context + its new token
    want = per_token * (contexts + n) / tp / m.hardware.bytes_per_us
    assert m.step_time_us(np.zeros(0), np.zeros(0), n, contexts) == pytest.approx(want, rel=1e-12)
    kind, p = lower(m)
    assert step_us(kind, p, False, 0, 0.0, 0.0, 0.0, n, float(contexts)) == pytest.approx(want, rel=1e-12)
