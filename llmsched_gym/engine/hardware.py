"""Hardware and model presets, and the KV-cache capacity of one instance (docs/architecture.md).

Model numbers are the real Hugging Face ``config.json`` values; parameter counts are
derived from them (embeddings, attention incl. biases and q/k norms, MLP or experts and
router, layer norms, untied ``lm_head``) and match the published sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    """

    name: str
    peak_tflops: float
    hbm_tbps: float
    memory_gib: float
    host_link_gbps: float = 64.0

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
        dtype_bytes: bytes per weight and per KV element (2 = BF16).
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

    @property
    def is_moe(self) -> bool:
        """True for mixture-of-experts models."""
        return self.num_experts > 0

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V bytes one token occupies across all layers (whole model, all TP ranks)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

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
        Hardware("H100", peak_tflops=989.5, hbm_tbps=3.35, memory_gib=80.0),
        Hardware("H200", peak_tflops=989.5, hbm_tbps=4.8, memory_gib=141.0),
        Hardware("A100", peak_tflops=312.0, hbm_tbps=2.039, memory_gib=80.0, host_link_gbps=32.0),
        Hardware("H20", peak_tflops=148.0, hbm_tbps=4.0, memory_gib=96.0),
    )
}

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


def get_hardware(name: str | Hardware) -> Hardware:
    """Hardware preset by name ("H100", "h100", "nvidia/H100-SXM"); a Hardware passes through.

    Raises:
        ConfigError: unknown name; the message lists the known presets.
    """
    if isinstance(name, Hardware):
        return name
    hw = _HARDWARE_KEYS.get(_key(name).removeprefix("nvidia"))
    if hw is None:
        raise ConfigError(f"hardware={name!r} is not known; known: {', '.join(HARDWARE)}")
    return hw


def get_model(name: str | ModelConfig) -> ModelConfig:
    """Model preset by name ("qwen3-14b", "Qwen/Qwen3-14B", "llama-3.1-8b-instruct");
    a ModelConfig passes through.

    Raises:
        ConfigError: unknown name; the message lists the known presets.
    """
    if isinstance(name, ModelConfig):
        return name
    model = _MODEL_KEYS.get(_key(name))
    if model is None:
        raise ConfigError(f"model={name!r} is not known; known: {', '.join(MODELS)}")
    return model


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
    hardware: str | Hardware,
    model: str | ModelConfig,
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
    free = budget - m.total_params * m.dtype_bytes - activation_reserve_bytes(m, tp)
    blocks = free // (m.kv_bytes_per_token * block_size)
    if blocks <= 0:
        raise ConfigError(
            f"model={m.name!r} does not fit on {tp} x {hw.name} at gpu_memory_utilization="
            f"{gpu_memory_utilization}: no memory left for the KV cache; raise tp"
        )
    return int(blocks)
