"""Hardware and model presets, and the KV-cache capacity of one instance (docs/architecture.md).

Model numbers are the real Hugging Face ``config.json`` values; parameter counts are
derived from them (embeddings, attention incl. biases and q/k norms, MLP or experts and
router, layer norms, untied ``lm_head``) and match the published sizes.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

GIB = 1 << 30


@dataclass(frozen=True)
class Hardware:
    """One accelerator.

    Attributes:
        name: canonical preset name, e.g. ``"H100"``.
        peak_tflops: dense BF16 peak, TFLOP/s (no sparsity).
        hbm_tbps: HBM bandwidth, TB/s (1e12 bytes/s).
        memory_gib: device memory in GiB (2**30 bytes); BLIS's ``MemoryGiB`` convention.
        host_link_gbps: host-to-device bandwidth, GB/s (1e9 bytes/s) per direction: the
            PCIe link a CPU KV tier loads over (Gen5 x16: 64, Gen4 x16: 32).
        peak_tflops_fp8: dense FP8 peak, TFLOP/s; 0 where the GPU has no FP8 tensor cores
            (A100): FP8 weights then run at the BF16 peak (vLLM's Marlin W8A16 path).
    """

    name: str
    peak_tflops: float
    hbm_tbps: float
    memory_gib: float
    host_link_gbps: float = 64.0
    peak_tflops_fp8: float = 0.0

    @property
    def flops_per_us(self) -> float:
        """Peak FLOPs per microsecond."""
        return self.peak_tflops * 1e6

    @property
    def bytes_per_us(self) -> float:
        """HBM bytes per microsecond."""
        return self.hbm_tbps * 1e6


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one decoder-only transformer.

    Attributes:
        name: canonical Hugging Face id, e.g. ``"Qwen/Qwen3-14B"``.
        layers: transformer blocks (L).
        hidden: model width (d).
        heads: query heads (H).
        kv_heads: key/value heads (GQA groups).
        head_dim: per-head dimension (dh); not always hidden / heads (Qwen3-30B-A3B).
        ffn: MLP intermediate size; for MoE the size of ONE expert.
        vocab: vocabulary size (embedding and lm_head rows).
        total_params: all parameters (every expert).
        active_params: parameters used per token (MoE: only the routed experts).
        num_experts: routed experts per layer (0 for dense models).
        experts_per_token: experts each token is routed to (0 for dense models).
        tie_word_embeddings: lm_head shares the embedding matrix.
        dtype_bytes: bytes per activation, and per weight and KV element unless the two
            fields below say otherwise (2 = BF16).
        moe_layers: MoE layers of an MoE model (-1: every layer); the others are dense
            with ``dense_ffn`` (Llama-4's ``interleave_moe_layer_step``, Qwen's
            ``decoder_sparse_step``).
        dense_ffn: MLP width of an MoE model's dense layers (0: ``ffn``).
        shared_ffn: summed width of the shared experts of each MoE layer, run by every
            token (0: none).
        mlp_weight_bytes: bytes per MLP / expert weight (1 = FP8); 0: ``dtype_bytes``.
        attn_weight_bytes: bytes per attention-projection weight; 0: ``dtype_bytes``
            (FP8 checkpoints often leave attention in BF16).
        kv_dtype_bytes: bytes per KV-cache element (vLLM's ``kv_cache_dtype``); 0:
            ``dtype_bytes``.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    total_params: int
    active_params: int
    num_experts: int = 0
    experts_per_token: int = 0
    tie_word_embeddings: bool = False
    dtype_bytes: int = 2
    moe_layers: int = -1
    dense_ffn: int = 0
    shared_ffn: int = 0
    mlp_weight_bytes: float = 0
    attn_weight_bytes: float = 0
    kv_dtype_bytes: int = 0

    @property
    def is_moe(self) -> bool:
        """True for mixture-of-experts models."""
        return self.num_experts > 0

    @property
    def kv_bytes(self) -> int:
        """Bytes per KV-cache element."""
        return self.kv_dtype_bytes or self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V bytes one token occupies across all layers (whole model, all TP ranks)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes

    @property
    def uniform(self) -> bool:
        """Every layer has the same MLP (all MoE with no shared expert, or all dense) and
        every weight has ``dtype_bytes``: the step-time models keep their original
        arithmetic (bit-identical results for the presets)."""
        return (self.n_moe_layers in (0, self.layers) and not self.shared_ffn
                and self.mlp_weight_bytes in (0, self.dtype_bytes)
                and self.attn_weight_bytes in (0, self.dtype_bytes))

    @property
    def n_moe_layers(self) -> int:
        """Number of MoE layers (0 for a dense model)."""
        if not self.is_moe:
            return 0
        return self.layers if self.moe_layers < 0 else self.moe_layers

    @property
    def ffn_active_width(self) -> float:
        """MLP width each token runs, averaged over layers (routed experts x expert size
        + shared experts in MoE layers, ``dense_ffn`` in dense ones)."""
        moe, dense = self.n_moe_layers, self.layers - self.n_moe_layers
        per_moe = max(self.experts_per_token, 1) * self.ffn + self.shared_ffn
        return (moe * per_moe + dense * (self.dense_ffn or self.ffn)) / self.layers

    @property
    def ffn_resident_width(self) -> float:
        """MLP width resident in memory per layer, averaged (every expert)."""
        moe, dense = self.n_moe_layers, self.layers - self.n_moe_layers
        per_moe = max(self.num_experts, 1) * self.ffn + self.shared_ffn
        return (moe * per_moe + dense * (self.dense_ffn or self.ffn)) / self.layers

    @property
    def mlp_bytes(self) -> float:
        """Bytes per MLP weight."""
        return self.mlp_weight_bytes or self.dtype_bytes

    @property
    def attn_bytes(self) -> float:
        """Bytes per attention-projection weight."""
        return self.attn_weight_bytes or self.dtype_bytes

    @property
    def attn_params_per_layer(self) -> int:
        """Q, K, V, O projection weights of one layer (biases and norms excluded)."""
        q = self.heads * self.head_dim
        return self.hidden * q * 2 + 2 * self.hidden * self.kv_heads * self.head_dim

    def weight_bytes(self, active: bool = False) -> float:
        """Bytes of the transformer-block weights (no embedding, no lm_head): attention
        at ``attn_bytes``, MLPs at ``mlp_bytes``, the rest (norms, biases, routers) at
        ``dtype_bytes``; ``active``: only the experts a token runs."""
        attn = self.layers * self.attn_params_per_layer
        mlp = 3.0 * self.hidden * self.layers * (self.ffn_active_width if active else self.ffn_resident_width)
        rest = (self.layer_active_params if active else self.layer_total_params) - attn - mlp
        return attn * self.attn_bytes + mlp * self.mlp_bytes + max(rest, 0.0) * self.dtype_bytes

    @property
    def lm_head_params(self) -> int:
        """Parameters of the output projection (shared with the embedding when tied)."""
        return self.vocab * self.hidden

    @property
    def embedding_params(self) -> int:
        """Parameters of the input embedding table(s): gathered by row, never streamed."""
        return self.vocab * self.hidden * (1 if self.tie_word_embeddings else 2)

    @property
    def layer_active_params(self) -> int:
        """Active parameters inside the transformer blocks (each one costs 2 FLOPs per token)."""
        return self.active_params - self.embedding_params

    @property
    def layer_total_params(self) -> int:
        """All parameters inside the transformer blocks (every expert)."""
        return self.total_params - self.embedding_params


HARDWARE: dict[str, Hardware] = {
    hw.name: hw
    for hw in (
        Hardware("H100", peak_tflops=989.5, hbm_tbps=3.35, memory_gib=80.0, peak_tflops_fp8=1979.0),
        Hardware("H200", peak_tflops=989.5, hbm_tbps=4.8, memory_gib=141.0, peak_tflops_fp8=1979.0),
        Hardware("A100", peak_tflops=312.0, hbm_tbps=2.039, memory_gib=80.0, host_link_gbps=32.0),
        Hardware("H20", peak_tflops=148.0, hbm_tbps=4.0, memory_gib=96.0, peak_tflops_fp8=296.0),
        # NVIDIA L40S datasheet: BF16 362.05 / FP8 733 dense TFLOP/s, 48 GB GDDR6 at 864 GB/s, PCIe Gen4 x16.
        Hardware("L40S", peak_tflops=362.05, hbm_tbps=0.864, memory_gib=48.0, host_link_gbps=32.0,
                 peak_tflops_fp8=733.0),
    )
}

#: Fields of a GPU description (``get_hardware`` of a mapping): required, then optional.
HARDWARE_FIELDS_REQUIRED = ("peak_tflops", "hbm_tbps", "memory_gib")
HARDWARE_FIELDS_OPTIONAL = ("name", "host_link_gbps", "peak_tflops_fp8", "preset")

@dataclass(frozen=True)
class KVLink:
    """The link a P/D cluster moves a prompt's KV over, prefill GPU to decode GPU.

    Attributes:
        name: preset name.
        gbps: bandwidth per GPU and direction, GB/s (1e9 bytes/s); each GPU of a TP group
            sends its own shard.
        latency_s: fixed time per transfer (the decode side's read request and its
            completion notice), seconds.
    """

    name: str
    gbps: float
    latency_s: float


#: KV transfer links. Bandwidths: NVLink 4 on H100 / H200, 900 GB/s bidirectional = 450 GB/s
#: per direction (NVIDIA's H100 datasheet); a 400 Gb/s InfiniBand / RoCE NIC per GPU
#: (ConnectX-7), 50 GB/s; 100 Gb Ethernet, 12.5 GB/s; TCP without RDMA, 2 GB/s (llm-d's
#: P/D guide measures 1-3 GB/s for NIXL's TCP fallback). The latencies are this
#: package's order-of-magnitude assumptions for one NIXL read and its notification, not
#: measurements: set ``kv_link_latency_s`` for a fabric you know.
KV_LINKS: dict[str, KVLink] = {
    link.name: link
    for link in (
        KVLink("nvlink", gbps=450.0, latency_s=10e-6),
        KVLink("rdma", gbps=50.0, latency_s=20e-6),
        KVLink("infiniband", gbps=50.0, latency_s=20e-6),
        KVLink("ethernet", gbps=12.5, latency_s=50e-6),
        KVLink("tcp", gbps=2.0, latency_s=200e-6),
    )
}


def get_kv_link(name: str) -> KVLink:
    """KV link preset by name (case-insensitive).

    Raises:
        ConfigError: unknown name; the message lists the known presets.
    """
    link = KV_LINKS.get(str(name).strip().lower())
    if link is None:
        raise ConfigError(f"kv_link={name!r} is not known; known: {', '.join(KV_LINKS)}")
    return link


MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        ModelConfig(
            "Qwen/Qwen3-14B", layers=40, hidden=5120, heads=40, kv_heads=8, head_dim=128,
            ffn=17408, vocab=151936, total_params=14_768_307_200, active_params=14_768_307_200,
        ),
        ModelConfig(
            "Qwen/Qwen3-30B-A3B", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
            ffn=768, vocab=151936, total_params=30_532_122_624, active_params=3_353_032_704,
            num_experts=128, experts_per_token=8,
        ),
        ModelConfig(
            "Qwen/Qwen2-7B", layers=28, hidden=3584, heads=28, kv_heads=4, head_dim=128,
            ffn=18944, vocab=152064, total_params=7_615_616_512, active_params=7_615_616_512,
        ),
        ModelConfig(
            "Qwen/Qwen2.5-7B", layers=28, hidden=3584, heads=28, kv_heads=4, head_dim=128,
            ffn=18944, vocab=152064, total_params=7_615_616_512, active_params=7_615_616_512,
        ),
        ModelConfig(
            "meta-llama/Llama-3.1-8B", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
            ffn=14336, vocab=128256, total_params=8_030_261_248, active_params=8_030_261_248,
        ),
    )
}


def _key(name: str) -> str:
    """Spelling-insensitive lookup key: last path part, lower case, alphanumerics only,
    without an ``-Instruct...`` suffix (instruct variants share the base architecture)."""
    base = name.strip().rsplit("/", 1)[-1].lower()
    base = re.sub(r"-?instruct.*$", "", base)
    return re.sub(r"[^a-z0-9]", "", base)


_HARDWARE_KEYS = {_key(n): hw for n, hw in HARDWARE.items()}
_HARDWARE_KEYS.update(
    {_key(n) + suffix: hw for n, hw in HARDWARE.items() for suffix in ("sxm", f"{hw.memory_gib:.0f}gb")}
)
_MODEL_KEYS = {_key(n): m for n, m in MODELS.items()}
_MODEL_KEYS[_key("Meta-Llama-3.1-8B")] = MODELS["meta-llama/Llama-3.1-8B"]


def get_hardware(name: str | dict | Hardware) -> Hardware:
    """Hardware preset by name ("H100", "h100", "nvidia/H100-SXM", "L40S"), or a GPU
    described by a mapping of :class:`Hardware`'s fields (``peak_tflops``, ``hbm_tbps``,
    ``memory_gib`` required; ``name``, ``host_link_gbps``, ``peak_tflops_fp8`` optional;
    ``preset``: a preset whose fields the others override); a Hardware passes through.

    Raises:
        ConfigError: unknown name, or a bad description; the message names the field.
    """
    if isinstance(name, Hardware):
        return name
    if isinstance(name, dict):
        return _hardware_from_spec(name)
    if not isinstance(name, str):
        raise ConfigError(f"hardware={name!r} is invalid; give a preset name ({', '.join(HARDWARE)}) or a mapping")
    hw = _HARDWARE_KEYS.get(_key(name).removeprefix("nvidia"))
    if hw is None:
        raise ConfigError(f"hardware={name!r} is not known; known: {', '.join(HARDWARE)} "
                          f"(or a mapping with {', '.join(HARDWARE_FIELDS_REQUIRED)})")
    return hw


def _hardware_from_spec(spec: dict) -> Hardware:
    unknown = sorted(set(spec) - set(HARDWARE_FIELDS_REQUIRED) - set(HARDWARE_FIELDS_OPTIONAL))
    if unknown:
        raise ConfigError(f"hardware field(s) {unknown} are not known; allowed: "
                          f"{', '.join(HARDWARE_FIELDS_REQUIRED + HARDWARE_FIELDS_OPTIONAL)}")
    base = get_hardware(spec["preset"]) if "preset" in spec else None
    values = {} if base is None else {f: getattr(base, f) for f in Hardware.__dataclass_fields__}
    values.update({k: v for k, v in spec.items() if k != "preset"})
    for f in HARDWARE_FIELDS_REQUIRED:
        if f not in values:
            raise ConfigError(f"hardware.{f} is missing; a GPU description needs {', '.join(HARDWARE_FIELDS_REQUIRED)}")
    for f in ("peak_tflops", "hbm_tbps", "memory_gib", "host_link_gbps", "peak_tflops_fp8"):
        v = values.get(f, 0.0)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v != float("inf")
        if not ok or v < 0 or (f in HARDWARE_FIELDS_REQUIRED and v <= 0):
            raise ConfigError(f"hardware.{f}={v!r} is invalid; it must be a finite number > 0"
                              + (" (>= 0 for peak_tflops_fp8)" if f == "peak_tflops_fp8" else ""))
    values.setdefault("name", "custom-gpu")
    return Hardware(**{k: (str(v) if k == "name" else float(v)) for k, v in values.items()})


# ---------------------------------------------------------------- HuggingFace config.json
#: Keys of a model description mapping (``get_model`` of a mapping).
MODEL_SPEC_FIELDS = ("config", "name", "weight_dtype", "kv_cache_dtype")
DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4,
               "float": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8": 1, "int8": 1}


def _cfg_int(cfg: dict, key: str, path: str, default=None) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{path}: {key}={v!r} is invalid; it must be an integer >= 0")
    return v


def _find_config(name: str) -> Path | None:
    """A config.json for ``name``: the file itself, a folder holding one, or a model id
    in the local HuggingFace cache (``$HF_HOME`` or ~/.cache/huggingface/hub)."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    if p.is_dir() and (p / "config.json").is_file():
        return p / "config.json"
    if "/" in name and not p.exists():
        hub = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
        snaps = sorted((hub / ("models--" + name.replace("/", "--")) / "snapshots").glob("*/config.json"))
        if snaps:
            return snaps[-1]
    return None


def _weight_bytes_of(cfg: dict, path: str, dtype_bytes: int) -> tuple[float, float]:
    """(MLP, attention) bytes per weight from ``quantization_config`` (vLLM's FP8 paths:
    ``fp8``, ``compressed-tensors`` float8, ``modelopt`` FP8); unquantized: dtype_bytes."""
    q = cfg.get("quantization_config")
    if not q:
        return dtype_bytes, dtype_bytes
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" or (method == "modelopt" and "fp8" in str(q.get("quant_algo", "")).lower()):
        bits = 8
    elif method == "compressed-tensors":
        groups = [g.get("weights") or {} for g in (q.get("config_groups") or {}).values()]
        bits_set = {int(w.get("num_bits", 16)) for w in groups}
        if len(bits_set) != 1:
            raise ConfigError(f"{path}: quantization_config.config_groups mixes weight widths {sorted(bits_set)}; "
                              "give weight_dtype explicitly")
        bits = bits_set.pop()
    else:
        raise ConfigError(f"{path}: quantization_config.quant_method={method!r} is not supported; allowed: fp8, "
                          "compressed-tensors, modelopt (FP8); or give weight_dtype explicitly")
    ignore = [str(x) for x in q.get("ignore") or q.get("ignored_layers") or q.get("modules_to_not_convert") or []]
    # attention projections left unquantized (listed per layer, outside the vision tower)
    attn_kept = any(x.endswith(("self_attn.q_proj", "self_attn.qkv_proj")) and "vision" not in x for x in ignore)
    return bits / 8, (dtype_bytes if attn_kept else bits / 8)


def model_from_hf_config(cfg: dict, name: str = "custom-model", path: str = "config.json",
                         weight_dtype: str | None = None, kv_cache_dtype: str | None = None) -> ModelConfig:
    """A :class:`ModelConfig` from a HuggingFace ``config.json`` (already parsed).

    Dense and MoE decoders (Llama, Mistral, Qwen2/3, Yi, Mixtral, Qwen-MoE, Llama-4 incl.
    its ``text_config``): GQA from ``num_key_value_heads``; MoE from
    ``num_local_experts`` / ``num_experts`` with ``num_experts_per_tok``, expert width
    ``moe_intermediate_size`` (else ``intermediate_size``), shared experts
    (``shared_expert_intermediate_size``, ``n_shared_experts``, Llama-4's one), dense
    layers (``interleave_moe_layer_step``, ``decoder_sparse_step``, ``mlp_only_layers``,
    ``first_k_dense_replace``). Weight bytes from ``quantization_config`` (or
    ``weight_dtype``), KV bytes from ``kv_cache_dtype`` ("auto": the model dtype).
    Parameter counts: embeddings, attention (+ biases, q/k norms), MLPs / experts,
    routers, layer norms, untied lm_head.

    Raises:
        ConfigError: a missing or invalid field (named), or an unsupported architecture
            (multi-head latent attention).
    """
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: a config.json must hold a JSON object, got {type(cfg).__name__}")
    top = cfg
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers (Llama-4, ...): the text decoder
        cfg = {**cfg["text_config"], **{k: top[k] for k in ("quantization_config", "tie_word_embeddings")
                                          if k in top and k not in cfg["text_config"]}}
    if "kv_lora_rank" in cfg:
        raise ConfigError(f"{path}: multi-head latent attention (kv_lora_rank) is not supported; "
                          "supported: dense and MoE decoders with MHA/GQA")
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if k not in cfg:
            raise ConfigError(f"{path}: missing field {k!r} (needed: hidden_size, num_hidden_layers, "
                              "num_attention_heads, vocab_size, intermediate_size)")
    d, L = _cfg_int(cfg, "hidden_size", path), _cfg_int(cfg, "num_hidden_layers", path)
    H, vocab = _cfg_int(cfg, "num_attention_heads", path), _cfg_int(cfg, "vocab_size", path)
    kv = _cfg_int(cfg, "num_key_value_heads", path, H)
    if not (d and L and H and vocab and kv) or H % kv:
        raise ConfigError(f"{path}: hidden_size={d}, num_hidden_layers={L}, num_attention_heads={H}, "
                          f"num_key_value_heads={kv}, vocab_size={vocab}: all must be > 0 and the KV heads "
                          "divide the heads")
    dh = _cfg_int({"head_dim": cfg.get("head_dim") or d // H}, "head_dim", path)
    mtype = str(cfg.get("model_type", top.get("model_type", ""))).lower()
    E = _cfg_int({"num_experts": cfg.get("num_local_experts") or cfg.get("num_experts")
                  or cfg.get("n_routed_experts") or 0}, "num_experts", path)
    k = _cfg_int(cfg, "num_experts_per_tok", path, 0) if E else 0
    if E and not 1 <= k <= E:
        raise ConfigError(f"{path}: num_experts_per_tok={k} is invalid for {E} experts; it must be in [1, {E}]")
    if "intermediate_size" not in cfg and "moe_intermediate_size" not in cfg:
        raise ConfigError(f"{path}: missing field 'intermediate_size'")
    ffn_dense = _cfg_int(cfg, "intermediate_size", path, 0)
    ffn = _cfg_int(cfg, "moe_intermediate_size", path, ffn_dense) if E else ffn_dense
    shared, dense_ffn, moe_layers = 0, 0, L if E else 0
    if E:
        if mtype.startswith("llama4"):
            step = _cfg_int(cfg, "interleave_moe_layer_step", path, 1) or 1
            moe_layers = len([i for i in range(L) if (i + 1) % step == 0])
            dense_ffn = _cfg_int(cfg, "intermediate_size_mlp", path, ffn_dense)
            shared = ffn  # Llama-4: one shared expert of the expert width
        else:
            step = _cfg_int(cfg, "decoder_sparse_step", path, 1) or 1
            only = set(cfg.get("mlp_only_layers") or [])
            first = _cfg_int(cfg, "first_k_dense_replace", path, 0)
            moe_layers = len([i for i in range(L) if i not in only and i >= first and (i + 1) % step == 0])
            dense_ffn = ffn_dense
            shared = (_cfg_int(cfg, "shared_expert_intermediate_size", path, 0)
                      or _cfg_int(cfg, "n_shared_experts", path, 0) * ffn)
    if not ffn:
        raise ConfigError(f"{path}: intermediate_size={ffn} is invalid; it must be > 0")
    tied = bool(cfg.get("tie_word_embeddings", False))
    dtype_name = str(cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or "bfloat16").lower()
    dtype_bytes = DTYPE_BYTES.get(dtype_name.removeprefix("torch."), 2)
    if weight_dtype is not None:
        if str(weight_dtype).lower() not in DTYPE_BYTES:
            raise ConfigError(f"weight_dtype={weight_dtype!r} is not known; allowed: {', '.join(DTYPE_BYTES)}")
        mlp_b = attn_b = DTYPE_BYTES[str(weight_dtype).lower()]
    else:
        mlp_b, attn_b = _weight_bytes_of(cfg, path, dtype_bytes)
    kv_name = "auto" if kv_cache_dtype is None else str(kv_cache_dtype).lower()
    if kv_name != "auto" and kv_name not in DTYPE_BYTES:
        raise ConfigError(f"kv_cache_dtype={kv_cache_dtype!r} is not known; allowed: auto, {', '.join(DTYPE_BYTES)}")
    kv_b = dtype_bytes if kv_name == "auto" else DTYPE_BYTES[kv_name]
    # parameters
    q = H * dh
    attn = 2 * d * q + 2 * d * kv * dh
    if cfg.get("attention_bias") is True:
        attn += q + 2 * kv * dh + d
    elif mtype in ("qwen2", "qwen2_moe"):  # q, k, v biases
        attn += q + 2 * kv * dh
    if mtype in ("qwen3", "qwen3_moe"):  # per-head RMSNorm of q and k
        attn += 2 * dh
    dense_layers = L - moe_layers
    gate = d if mtype == "qwen2_moe" and shared else 0  # the shared expert's sigmoid gate
    moe_total = 3 * d * ffn * E + 3 * d * shared + d * E + gate
    moe_active = 3 * d * ffn * k + 3 * d * shared + d * E + gate
    embed = vocab * d * (1 if tied else 2)
    base = L * (attn + 2 * d) + d + embed + dense_layers * 3 * d * (dense_ffn or ffn)
    return ModelConfig(
        name, layers=L, hidden=d, heads=H, kv_heads=kv, head_dim=dh, ffn=ffn, vocab=vocab,
        total_params=int(base + moe_layers * moe_total), active_params=int(base + moe_layers * moe_active),
        num_experts=E, experts_per_token=k, tie_word_embeddings=tied, dtype_bytes=dtype_bytes,
        moe_layers=-1 if moe_layers == L else moe_layers, dense_ffn=dense_ffn if dense_layers else 0,
        shared_ffn=shared, mlp_weight_bytes=0 if mlp_b == dtype_bytes else mlp_b,
        attn_weight_bytes=0 if attn_b == dtype_bytes else attn_b, kv_dtype_bytes=0 if kv_b == dtype_bytes else kv_b,
    )


@functools.lru_cache(maxsize=64)
def _load_config(path: str, mtime: int, weight_dtype, kv_cache_dtype, name) -> ModelConfig:
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"model config {path}: not a readable JSON file ({type(e).__name__}: {e})") from None
    if name is None:
        name = cfg.get("_name_or_path") or Path(path).parent.name or "custom-model"
    return model_from_hf_config(cfg, str(name), path, weight_dtype, kv_cache_dtype)


def get_model(name: str | dict | ModelConfig) -> ModelConfig:
    """Model preset by name ("qwen3-14b", "Qwen/Qwen3-14B", "llama-3.1-8b-instruct"); a
    HuggingFace ``config.json`` (its path, a folder holding it, or a model id in the
    local HuggingFace cache); or a mapping ``{config: PATH, name, weight_dtype,
    kv_cache_dtype}``; a ModelConfig passes through.

    Raises:
        ConfigError: unknown name, unreadable or invalid config; the message says what.
    """
    if isinstance(name, ModelConfig):
        return name
    if isinstance(name, dict):
        unknown = sorted(set(name) - set(MODEL_SPEC_FIELDS))
        if unknown or "config" not in name:
            raise ConfigError(f"model description: unknown field(s) {unknown} or no 'config'; allowed: "
                              f"{', '.join(MODEL_SPEC_FIELDS)} (config: a config.json path)")
        found = _find_config(str(name["config"]))
        if found is None:
            raise ConfigError(f"model.config={name['config']!r}: no config.json found there")
        return _load_config(str(found), found.stat().st_mtime_ns, name.get("weight_dtype"),
                            name.get("kv_cache_dtype"), name.get("name"))
    if not isinstance(name, str):
        raise ConfigError(f"model={name!r} is invalid; give a preset name, a config.json path or a mapping")
    model = _MODEL_KEYS.get(_key(name))
    if model is not None:
        return model
    found = _find_config(name)
    if found is not None:
        return _load_config(str(found), found.stat().st_mtime_ns, None, None, None)
    raise ConfigError(f"model={name!r} is not known; known: {', '.join(MODELS)}, or a path to a "
                      "HuggingFace config.json")


# Activation reserve rule of BLIS (sim/latency/kv_capacity.go, constants taken from the
# llm-d-benchmark capacity planner): a per-replica activation peak, charged once whatever
# the TP degree, plus non-PyTorch memory (CUDA context, NCCL buffers) charged per GPU.
ACTIVATION_GIB_DENSE = 5.5
ACTIVATION_GIB_MOE = 8.0
NON_TORCH_GIB_TP1 = 0.15
NON_TORCH_GIB_PER_GPU_TP = 0.6


def activation_reserve_bytes(model: ModelConfig, tp: int = 1) -> int:
    """Memory held back for activations and runtime buffers, bytes (BLIS's rule).

    Args:
        model: model served (MoE models reserve more for expert dispatch buffers).
        tp: tensor-parallel degree (GPUs per instance).
    """
    activation = ACTIVATION_GIB_MOE if model.is_moe else ACTIVATION_GIB_DENSE
    non_torch = NON_TORCH_GIB_TP1 if tp == 1 else NON_TORCH_GIB_PER_GPU_TP * tp
    return int((activation + non_torch) * GIB)


def kv_capacity_blocks(
    hardware: str | dict | Hardware,
    model: str | dict | ModelConfig,
    tp: int = 1,
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
) -> int:
    """KV-cache blocks of one instance (docs/architecture.md).

    blocks = floor((memory x util x tp - weight bytes - activation reserve)
                   / (kv_bytes_per_token x block_size)),
    with weight bytes = total params x dtype bytes and the activation reserve of
    :func:`activation_reserve_bytes`. Reproduces BLIS's 15,909 blocks for Qwen3-14B on
    one H100 and its 281,980 for Llama-3.1-8B on 8 x H100.

    Args:
        hardware: GPU preset or name; memory is per GPU.
        model: model preset or name.
        tp: tensor-parallel degree (GPUs per instance, >= 1).
        gpu_memory_utilization: fraction of each GPU's memory vLLM may use, in (0, 1].
        block_size: tokens per KV block (vLLM: 16).

    Raises:
        ConfigError: invalid arguments, or the weights and reserve do not fit.
    """
    hw, m = get_hardware(hardware), get_model(model)
    if tp < 1 or block_size < 1 or not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(
            f"tp={tp!r}, block_size={block_size!r}, gpu_memory_utilization={gpu_memory_utilization!r}: "
            "tp and block_size must be >= 1 and gpu_memory_utilization in (0, 1]"
        )
    budget = int(hw.memory_gib * gpu_memory_utilization * tp * GIB)
    weights = m.total_params * m.dtype_bytes if m.uniform else int(m.weight_bytes() + (
        m.total_params - m.layer_total_params) * m.dtype_bytes)  # embeddings and lm_head unquantized
    free = budget - weights - activation_reserve_bytes(m, tp)
    blocks = free // (m.kv_bytes_per_token * block_size)
    if blocks <= 0:
        raise ConfigError(
            f"model={m.name!r} does not fit on {tp} x {hw.name} at gpu_memory_utilization="
            f"{gpu_memory_utilization}: no memory left for the KV cache; raise tp"
        )
    return int(blocks)
