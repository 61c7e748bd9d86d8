"""Step-time models and hardware presets: hand-computed values, BLIS parity, physical floor."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.engine.hardware import (
    HARDWARE,
    MODELS,
    ModelConfig,
    get_hardware,
    get_model,
    kv_capacity_blocks,
)
from llmsched_gym.engine.latency import (
    LINEAR_PRESETS,
    LinearModel,
    RooflineModel,
    TrainedPhysicsModel,
    make_latency_model,
)
from llmsched_gym.errors import ConfigError

EMPTY = np.zeros(0, dtype=np.int64)


# --- presets -----------------------------------------------------------------------------
def _count_params(m: ModelConfig, *, qkv_bias: bool, qk_norm: bool, active: bool) -> int:
    """Parameter count from the architecture fields, independent of the stored totals."""
    d, q, kv = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim
    attn = d * q * 2 + d * kv * 2 + (q + 2 * kv if qkv_bias else 0) + (2 * m.head_dim if qk_norm else 0)
    experts = (m.experts_per_token if active else m.num_experts) if m.is_moe else 1
    mlp = experts * 3 * d * m.ffn + (d * m.num_experts if m.is_moe else 0)
    return m.embedding_params + m.layers * (attn + mlp + 2 * d) + d


@pytest.mark.parametrize(
    "name, qkv_bias, qk_norm, billions",
    [
        ("Qwen/Qwen3-14B", False, True, 14.8),
        ("Qwen/Qwen3-30B-A3B", False, True, 30.5),
        ("Qwen/Qwen2-7B", True, False, 7.6),
        ("Qwen/Qwen2.5-7B", True, False, 7.6),
        ("meta-llama/Llama-3.1-8B", False, False, 8.0),
    ],
)
def test_param_counts_follow_from_config(name, qkv_bias, qk_norm, billions):
    m = MODELS[name]
    assert m.total_params == _count_params(m, qkv_bias=qkv_bias, qk_norm=qk_norm, active=False)
    assert m.active_params == _count_params(m, qkv_bias=qkv_bias, qk_norm=qk_norm, active=True)
    assert round(m.total_params / 1e9, 1) == billions


def test_moe_active_params():
    m = get_model("Qwen/Qwen3-30B-A3B")
    assert m.is_moe and (m.num_experts, m.experts_per_token, m.ffn) == (128, 8, 768)
    assert round(m.active_params / 1e9, 1) == 3.4  # "A3B": 3.35e9 incl. embeddings


def test_hardware_values():
    h = get_hardware("H100")
    assert (h.peak_tflops, h.hbm_tbps, h.memory_gib) == (989.5, 3.35, 80.0)
    assert {n: (hw.peak_tflops, hw.hbm_tbps, hw.memory_gib) for n, hw in HARDWARE.items()} == {
        "H100": (989.5, 3.35, 80.0),
        "H200": (989.5, 4.8, 141.0),
        "A100": (312.0, 2.039, 80.0),
        "H20": (148.0, 4.0, 96.0),
        "L40S": (362.05, 0.864, 48.0),
    }


@pytest.mark.parametrize(
    "spelling, canonical",
    [
        ("qwen3-14b", "Qwen/Qwen3-14B"),
        ("Qwen/Qwen3-14B", "Qwen/Qwen3-14B"),
        ("QWEN3_14B", "Qwen/Qwen3-14B"),
        ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
        ("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
        ("qwen2-7b", "Qwen/Qwen2-7B"),
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ],
)
def test_model_spellings(spelling, canonical):
    assert get_model(spelling).name == canonical


@pytest.mark.parametrize("spelling", ["H100", "h100", "nvidia/H100-SXM", "NVIDIA-H100-80GB"])
def test_hardware_spellings(spelling):
    assert get_hardware(spelling).name == "H100"


def test_unknown_names_list_known_ones():
    with pytest.raises(ConfigError, match="H100, H200, A100, H20"):
        get_hardware("B200")
    with pytest.raises(ConfigError) as e:
        get_model("gpt-4")
    assert all(name in str(e.value) for name in MODELS)
    with pytest.raises(ConfigError, match="linear, roofline, blis-trained-physics"):
        make_latency_model("vidur")
    with pytest.raises(ConfigError, match="Qwen/Qwen3-14B on H100 TP1; meta-llama/Llama-3.1-8B on H100 TP1"):
        make_latency_model("linear", hardware="A100")
    with pytest.raises(ConfigError, match="Qwen/Qwen2.5-7B on H100 TP1"):
        make_latency_model("linear", model="qwen3-14b", tp=2)
    with pytest.raises(ConfigError, match="allowed: mfu_prefill, mfu_decode, overhead_us"):
        make_latency_model("roofline", mfu=0.5)
    with pytest.raises(ConfigError, match="tp=3"):
        make_latency_model("roofline", tp=3)  # 40 heads do not split 3 ways


# --- KV capacity (docs/architecture.md) --------------------------------------------------------------
def test_kv_capacity_reproduces_blis():
    # BLIS sim/latency/kv_capacity.go: 80 GiB x 0.9 - 14.77e9 x 2 B weights - 5.5 GiB activation
    # - 0.15 GiB non-torch = 38.84 GiB; / (160 KiB per token x 16) = 15,909.6 blocks.
    assert kv_capacity_blocks("H100", "qwen3-14b") == 15_909
    # BLIS's TP goldens (sim/latency/kv_capacity_tp_basis_test.go): activation once per
    # replica, 0.6 GiB non-torch per GPU.
    assert kv_capacity_blocks("H100", "llama-3.1-8b", tp=8) == 281_980
    assert kv_capacity_blocks("H100", "llama-3.1-8b", tp=16) == 574_434
    assert kv_capacity_blocks("H100", "qwen3-14b", block_size=32) == 15_909 // 2
    with pytest.raises(ConfigError, match="does not fit"):
        kv_capacity_blocks("H100", "qwen3-14b", gpu_memory_utilization=0.3)


# --- BLIS trained-physics (docs/architecture.md) --------------------------------------------------------
def test_trained_physics_prefill_and_lone_request_ttft():
    m = make_latency_model("blis-trained-physics", "H100", "qwen3-14b")
    prefill = m.step_time_us(np.array([2048]), np.array([2048]), 0, 0)
    assert prefill == pytest.approx(21_274, abs=1)
    ttft = m.arrival_delay_us(np.array([2048]))[0] + prefill + m.first_token_delay_us
    assert round(ttft / 1000, 2) == 36.88  # 15,563.2 + 21,274.0 + 45.9 us


def test_trained_physics_matches_blis_reference_run():
    # BLIS run (4 x Qwen3-14B/H100): a lone 185-token request on an idle instance had TTFT
    # 28,527 us. BLIS truncates a0, the step and a2 to whole microseconds.
    m = make_latency_model("blis-trained-physics")
    step = m.step_time_us(np.array([185]), np.array([185]), 0, 0)
    assert int(m.arrival_delay_us(np.array([185]))[0]) + int(step) + int(m.first_token_delay_us) == 28_527
    assert m.arrival_delay_us(np.array([185]))[0] + step + m.first_token_delay_us == pytest.approx(28_527, abs=2)


def test_trained_physics_decode():
    m = make_latency_model("blis-trained-physics")
    assert round(m.step_time_us(EMPTY, EMPTY, 1, 1024) / 1000, 1) == 12.3  # one request, context 1,024
    assert round(m.step_time_us(EMPTY, EMPTY, 64, 64 * 1024) / 1000, 1) == 18.7  # 64 x context 1,024


def test_trained_physics_overhead_placement():
    m = TrainedPhysicsModel(a0=100.0, a1=700.0, a2=40.0)
    np.testing.assert_array_equal(m.arrival_delay_us(np.array([10, 5000])), [100.0, 100.0])
    assert m.first_token_delay_us == 40.0
    # a2 on the first token and on each of the output - 1 decode steps, a1 once at the end;
    # a request without output is recorded at its first-token time.
    np.testing.assert_array_equal(m.finish_delay_us(np.array([0, 1, 10])), [40.0, 740.0, 1100.0])


def test_trained_physics_tp_all_reduce():
    one, two = TrainedPhysicsModel(tp=1), TrainedPhysicsModel(tp=2)
    no_comm = TrainedPhysicsModel(tp=2, b4=0.0)
    t = np.array([1024])
    comm = 2 * 40 * 1024 * 5120 * 2 * 2 * 0.5 / 3.35e6  # 2L units x tokens x d x 2 B x 2 phases x (tp-1)/tp
    assert two.step_time_us(t, t, 0, 0) - no_comm.step_time_us(t, t, 0, 0) == pytest.approx(0.752037 * comm)
    assert no_comm.step_time_us(t, t, 0, 0) < one.step_time_us(t, t, 0, 0)


# --- linear (BLIS blackbox) -----------------------------------------------------------------
def test_linear_exact():
    m = make_latency_model("linear", "H100", "Qwen/Qwen3-14B")
    got = m.step_time_us(np.array([300, 500]), np.array([300, 4000]), 10, 12_345)
    assert got == pytest.approx(13578.19 + 39.4447 * 800 + 27.3228 * 10, abs=1e-9)
    np.testing.assert_allclose(m.arrival_delay_us(np.array([0, 1000])), [8888.09, 8888.09 + 184.89])
    assert m.first_token_delay_us == 0.0
    llama = make_latency_model("linear", "H100", "llama-3.1-8b")
    assert llama.step_time_us(EMPTY, EMPTY, 3, 999) == pytest.approx(6472.01 + 3 * 304.402)
    custom = make_latency_model("linear", beta0=1.0, alpha2=5.0)
    assert custom.step_time_us(np.array([10]), np.array([10]), 2, 0) == pytest.approx(1.0 + 394.447 + 54.6456)
    np.testing.assert_array_equal(custom.finish_delay_us(np.array([0, 3])), [5.0, 15.0])


def test_linear_direct_construction_needs_no_preset():
    m = LinearModel("A100", "qwen2-7b", alpha0=0, alpha1=0, alpha2=0, beta0=1, beta1=2, beta2=3)
    assert m.step_time_us(np.array([4]), np.array([4]), 5, 0) == 1 + 8 + 15


# --- roofline --------------------------------------------------------------------------------
def test_roofline_hand_computed():
    m = RooflineModel("H100", "qwen3-14b", overhead_us=100.0)
    q = get_model("qwen3-14b")
    # Decode of 64 x 1,024 is memory-bound: weights (no input embedding) + KV read and write.
    mem = ((q.total_params - q.vocab * q.hidden) * 2 + q.kv_bytes_per_token * (64 * 1024 + 64)) / 3.35e6
    assert m.step_time_us(EMPTY, EMPTY, 64, 64 * 1024) == pytest.approx(mem + 100.0)
    # A 2,048-token prefill is compute-bound at MFU 0.45.
    flops = 2 * (q.total_params - 2 * q.vocab * q.hidden) * 2048 + 4 * 40 * 128 * 40 * 2048 * 2049 / 2
    assert m.step_time_us(np.array([2048]), np.array([2048]), 0, 0) == pytest.approx(flops / (989.5e6 * 0.45) + 100.0)


def test_roofline_moe_flops_active_weights_total():
    m = RooflineModel("H100", "qwen3-30b-a3b")
    q = m.model
    decode = m.step_time_us(EMPTY, EMPTY, 1, 0)  # memory-bound: every expert is streamed
    assert decode == pytest.approx((q.total_params - q.vocab * q.hidden) * 2 / 3.35e6, rel=1e-3)
    prefill = m.step_time_us(np.array([8192]), np.array([8192]), 0, 0)  # compute-bound: routed experts only
    dense_flops = 2 * (q.total_params - 2 * q.vocab * q.hidden) * 8192
    assert prefill < dense_flops / (989.5e6 * 0.45) / 5


def test_tp_divides_roofline_work():
    t = np.array([4096])
    one = make_latency_model("roofline", tp=1).step_time_us(t, t, 0, 0)
    assert make_latency_model("roofline", tp=4).step_time_us(t, t, 0, 0) == pytest.approx(one / 4)


# --- shared contract ----------------------------------------------------------------------------
ALL_MODELS = [
    ("linear", "H100", "qwen3-14b", 1),
    ("linear", "H100", "qwen2.5-7b", 1),
    ("roofline", "H100", "qwen3-14b", 1),
    ("roofline", "A100", "qwen3-30b-a3b", 2),
    ("blis-trained-physics", "H100", "qwen3-14b", 1),
    ("blis-trained-physics", "H200", "qwen3-30b-a3b", 2),
]


@pytest.mark.parametrize("kind, hw, model, tp", ALL_MODELS)
def test_decode_run_equals_repeated_steps(kind, hw, model, tp):
    m = make_latency_model(kind, hw, model, tp)
    for n, c0, k in [(1, 1024, 5), (64, 65_536, 40), (0, 0, 3), (7, 0, 0)]:
        run = m.decode_run_us(n, c0, k)
        assert run.shape == (k,)
        np.testing.assert_allclose(run, [m.step_time_us(EMPTY, EMPTY, n, c0 + j * n) for j in range(k)], rtol=1e-12)


@pytest.mark.parametrize("kind, hw, model, tp", ALL_MODELS)
def test_empty_batches_are_accepted(kind, hw, model, tp):
    m = make_latency_model(kind, hw, model, tp)
    for args in [(EMPTY, EMPTY, 0, 0), ([], [], 3, 300), (np.array([16]), np.array([16]), 0, 0)]:
        assert np.isfinite(m.step_time_us(*args)) and m.step_time_us(*args) >= 0
        assert m.floor_us(*args) >= 0
    assert m.floor_us(EMPTY, EMPTY, 0, 0) == 0.0


# --- physical floor (docs/architecture.md) ------------------------------------------------------------------
def _batches(capacity_tokens: int):
    """Prefill-only, decode-only and mixed batches that fit ``capacity_tokens`` of KV,
    decode contexts up to 1,024 tokens per request."""
    for t in (1, 16, 512, 2048, 8192):
        for s in {t, 4 * t, 32_768}:
            if t <= s <= 32_768:
                yield np.array([t]), np.array([s]), 0, 0
    yield np.full(4, 512), np.full(4, 2048), 0, 0
    for n in (1, 8, 64, 128, 256):
        for ctx in (16, 128, 512, 1024):
            if n * (ctx + 1) + 2048 <= capacity_tokens:
                yield EMPTY, EMPTY, n, n * ctx
                yield np.array([2048 - n]), np.array([4096]), n, n * ctx


def test_linear_presets_respect_the_floor():
    for model, hw, tp in LINEAR_PRESETS:
        m = make_latency_model("linear", hw, model, tp)
        cap = kv_capacity_blocks(hw, model, tp) * 16
        for batch in _batches(cap):
            assert m.step_time_us(*batch) >= m.floor_us(*batch), (model, batch)


@pytest.mark.parametrize("hw", list(HARDWARE))
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_roofline_respects_the_floor(hw, model, tp):
    m = make_latency_model("roofline", hw, model, tp)
    if hw == "L40S" and model == "Qwen/Qwen3-30B-A3B" and tp == 1:  # 61 GB of weights on a 48 GB GPU
        with pytest.raises(ConfigError, match="does not fit"):
            kv_capacity_blocks(hw, model, tp)
        return
    for batch in _batches(kv_capacity_blocks(hw, model, tp) * 16):
        assert m.step_time_us(*batch) >= m.floor_us(*batch), batch


def test_trained_physics_breaks_the_floor_on_prefill():
    # docs/architecture.md: a 2,048-token Qwen3-14B prefill needs ~5.6e13 FLOPs (>= 56 ms at the
    # H100's dense peak) but trained-physics prices it at 21.3 ms.
    m = make_latency_model("blis-trained-physics")
    t = np.array([2048])
    floor = m.floor_us(t, t, 0, 0)
    assert floor > 55_000
    assert m.step_time_us(t, t, 0, 0) < floor / 2.5
    # Its decode terms (b2b, b3 > 1) stay above the floor.
    assert m.step_time_us(EMPTY, EMPTY, 64, 64 * 1024) > m.floor_us(EMPTY, EMPTY, 64, 64 * 1024)


def test_linear_is_context_blind_and_breaks_the_floor_on_long_decode():
    # The linear step ignores decode contexts; once the KV they read outweighs beta0's slack
    # it prices below physics. Qwen3-14B/H100: 64 requests of 3,500 tokens (224k of the
    # 254k-token KV cache) need 21 ms of HBM traffic but are priced at 15.3 ms.
    m = make_latency_model("linear")
    assert 64 * 3501 <= kv_capacity_blocks("H100", "qwen3-14b") * 16
    assert m.step_time_us(EMPTY, EMPTY, 64, 64 * 3500) < 0.8 * m.floor_us(EMPTY, EMPTY, 64, 64 * 3500)
