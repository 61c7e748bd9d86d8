"""Models from a HuggingFace config.json, GPUs from a spec, weight and KV dtypes (docs/validation.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.engine.hardware import get_hardware, get_model, kv_capacity_blocks
from llmsched_gym.engine.latency import make_latency_model
from llmsched_gym.errors import ConfigError
from llmsched_gym.simulator import ClusterConfig

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real_vllm" / "model_configs"
F, W = 989.5e6, 3.35e6  # H100: FLOPs and bytes per microsecond

DENSE = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 2, "intermediate_size": 4096, "vocab_size": 1000, "torch_dtype": "bfloat16"}
# Llama-4-like: one MoE layer in two (interleave step 2), 4 experts, top-1, a shared expert,
# dense layers of width 3072, FP8 experts with BF16 attention.
MOE = {"model_type": "llama4_text", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
       "num_key_value_heads": 1, "head_dim": 128, "intermediate_size": 1024, "intermediate_size_mlp": 3072,
       "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 500,
       "quantization_config": {"quant_method": "compressed-tensors", "ignore": ["model.layers.0.self_attn.q_proj"],
                               "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}}


def _write(tmp_path, cfg, name="config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


def test_dense_config_params_and_blis_step_by_hand(tmp_path):
    m = get_model(_write(tmp_path, DENSE))
    d, L, dkv = 1024, 4, 2 * 128
    attn = 2 * d * d + 2 * d * dkv
    assert m.head_dim == 128 and m.total_params == L * (attn + 3 * d * 4096 + 2 * d) + d + 2 * 1000 * d
    step = make_latency_model("blis-trained-physics", "H100", _write(tmp_path, DENSE)).step_time_us(
        np.array([100]), np.array([100]), 3, 300)
    proj, mlp = 2 * d * (2 * d + 2 * dkv), 6 * d * 4096
    pf_compute = (L * 100 * (proj + mlp) + L * 4 * 8 * 128 * 100 * (100 + 50)) / F
    dc_kv = L * 2 * dkv * 2 * (300 + 3) / W
    weight = L * (d * (2 * d + 2 * dkv) + 3 * d * 4096) * 2 / W
    want = (0.152128 * pf_compute + 1.94710771 * dc_kv + 1.36252915 * weight + 32.09546717 * L
            + 4.41684444 * 4 + 126.024825)  # b1b = b2a = 0, no all-reduce at TP1
    assert step == pytest.approx(want, rel=1e-12)


def test_moe_config_shared_expert_interleaved_fp8_by_hand(tmp_path):
    m = get_model(_write(tmp_path, MOE))
    d, L = 512, 4
    assert (m.n_moe_layers, m.shared_ffn, m.dense_ffn, m.mlp_bytes, m.attn_bytes) == (2, 1024, 3072, 1.0, 2)
    assert m.ffn_active_width == (2 * (1024 + 1024) + 2 * 3072) / 4  # routed + shared; dense layers
    assert m.ffn_resident_width == (2 * (4 * 1024 + 1024) + 2 * 3072) / 4
    attn = 2 * d * 512 + 2 * d * 128
    moe_total = 3 * d * 1024 * 4 + 3 * d * 1024 + d * 4
    assert m.total_params == L * (attn + 2 * d) + d + 2 * 500 * d + 2 * 3 * d * 3072 + 2 * moe_total
    assert m.active_params == m.total_params - 2 * 3 * 3 * d * 1024  # 3 of 4 experts idle per MoE layer
    # vllm-calibrated prices the experts a step touches: 1 token -> 1 expert, 3 tokens -> 4 (1 - (3/4)^3).
    lat = make_latency_model("vllm-calibrated", "H100", m, b2a=0, b2b=0, b4=0, b5=0, b6=0, b7=0)
    always = (L * attn * 2 + 3 * d * (2 * 3072 + 2 * 1024) * 1 + 500 * d * 2) / W
    expert = 2 * 3 * d * 1024 * 1 / W
    for n, touched in ((1, 1.0), (3, 4 * (1 - 0.75 ** 3))):
        got = lat.step_time_us(np.zeros(0), np.zeros(0), n, 0)
        assert got == pytest.approx(lat.b3 * (always + expert * touched), rel=1e-12)


@pytest.mark.skipif(not REAL.is_dir(), reason="the real-vLLM model configs are not beside the repo (../shared/real_vllm)")
def test_real_configs(tmp_path):
    scout = get_model(str(REAL / "Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"))  # a folder holding config.json
    assert round(scout.total_params / 1e9, 1) == 107.8 and round(scout.active_params / 1e9, 1) == 17.2
    assert (scout.mlp_bytes, scout.attn_bytes, scout.kv_bytes) == (1.0, 2, 2)
    for name, billions in (("Llama-2-7b-hf", 6.7), ("Llama-3.1-70B-Instruct", 70.6), ("Yi-34B", 34.4),
                           ("Mistral-Nemo-Instruct-2407", 12.2), ("Qwen2.5-7B-Instruct", 7.6)):
        assert round(get_model(str(REAL / name / "config.json")).total_params / 1e9, 1) == billions
    # the Qwen2.5 config reproduces the preset's count (q/k/v biases included)
    assert get_model(str(REAL / "Qwen2.5-7B-Instruct")).total_params == get_model("qwen2.5-7b").total_params


def test_qwen3_moe_config_matches_preset():
    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
           "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
           "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "decoder_sparse_step": 1,
           "mlp_only_layers": []}
    m, preset = _mem(cfg), get_model("qwen3-30b-a3b")
    assert (m.total_params, m.active_params) == (preset.total_params, preset.active_params)


def _mem(cfg):
    from llmsched_gym.engine.hardware import model_from_hf_config

    return model_from_hf_config(cfg, "qwen3-moe")


def test_kv_dtype_and_capacity(tmp_path):
    path = _write(tmp_path, DENSE)
    bf16 = get_model({"config": path})
    fp8 = get_model({"config": path, "kv_cache_dtype": "fp8"})
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    b, f = kv_capacity_blocks("H100", bf16), kv_capacity_blocks("H100", fp8)
    assert f in (2 * b, 2 * b + 1)
    fp8w = get_model({"config": path, "weight_dtype": "fp8"})
    assert kv_capacity_blocks("L40S", fp8w) > kv_capacity_blocks("L40S", bf16)


def test_gpu_spec_and_cluster(tmp_path):
    gpu = {"name": "my-gpu", "peak_tflops": 100.0, "hbm_tbps": 1.0, "memory_gib": 24.0}
    hw = get_hardware(gpu)
    assert (hw.flops_per_us, hw.bytes_per_us) == (100e6, 1e6)
    assert get_hardware({"preset": "H100", "hbm_tbps": 4.0}).peak_tflops == 989.5
    c = ClusterConfig(instances=1, hardware=gpu, model={"config": _write(tmp_path, DENSE)},
                      latency_model="roofline")
    assert c.total_blocks() > 0 and c.make_latency().hardware.name == "my-gpu"


@pytest.mark.parametrize("bad, match", [
    ({"hardware": "B300"}, "hardware='B300' is not known"),
    ({"hardware": {"peak_tflops": 1.0, "hbm_tbps": 1.0}}, "memory_gib is missing"),
    ({"hardware": {"peak_tflops": -1.0, "hbm_tbps": 1.0, "memory_gib": 8}}, "peak_tflops=-1.0 is invalid"),
    ({"model": "no-such-model"}, "model='no-such-model' is not known"),
    ({"model": {"config": "x.json", "kv_cache_dtype": "fp4"}}, "no config.json"),
])
def test_bad_cluster_input(bad, match):
    with pytest.raises(ConfigError, match=match) as e:
        ClusterConfig(**bad)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, match", [
    ("{not json", "not a readable JSON file"),
    (json.dumps({**DENSE, "hidden_size": -4}), "hidden_size=-4 is invalid"),
    (json.dumps({k: v for k, v in DENSE.items() if k != "num_hidden_layers"}), "missing field 'num_hidden_layers'"),
    (json.dumps({**DENSE, "num_key_value_heads": 3}), "divide the heads"),
    (json.dumps({**MOE, "num_experts_per_tok": 9}), "num_experts_per_tok=9 is invalid"),
    (json.dumps({**DENSE, "kv_lora_rank": 512}), "multi-head latent attention"),
    (json.dumps({**DENSE, "quantization_config": {"quant_method": "gptq"}}), "quant_method='gptq' is not supported"),
])
def test_malformed_config_json(tmp_path, text, match):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        get_model(str(p))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=match):
        get_model({"config": str(p), "kv_cache_dtype": "fp8"})  # the mapping form too (its own cache entry)
