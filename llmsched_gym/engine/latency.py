"""Step-time models: the duration of one engine iteration (docs/architecture.md). Units: microseconds.

One iteration computes, for each prefilling request r, ``prefill_new[r]`` new (uncached)
prompt tokens of a prompt of ``prefill_len[r]`` tokens, plus one token for each of
``n_decode`` decoding requests whose contexts (tokens already in KV) sum to
``decode_context_sum``. Every model also prices the per-request overheads BLIS adds
around the engine (arrival -> schedulable, first-token and finish-time post-processing)
and exposes :meth:`StepTimeModel.floor_us`, the physical lower bound of an iteration.

Implementations: :class:`LinearModel` (BLIS "blackbox"), :class:`RooflineModel`,
:class:`TrainedPhysicsModel` (BLIS "trained-physics"); build them with
:func:`make_latency_model`.
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .hardware import Hardware, ModelConfig, get_hardware, get_model

FloatOrArray = np.ndarray | float


class StepTimeModel:
    """Interface and shared physics of the step-time models.

    Subclasses implement :meth:`_step`, which must accept ``context_sum`` as a scalar or
    an array (one entry per iteration) so that :meth:`decode_run_us` is the same
    arithmetic as :meth:`step_time_us`, vectorized.

    Attributes:
        name: the kind accepted by :func:`make_latency_model`.
        hardware, model, tp: the instance priced (tp GPUs run one model replica).
        first_token_delay_us: added to the engine's first-token time when recording TTFT.
    """

    name: str = ""
    first_token_delay_us: float = 0.0
    #: BLIS parity: price every iteration and overhead in whole microseconds, as BLIS's
    #: int64 clock does (see :meth:`_quantize`). Off by default (fractions kept).
    integer_us: bool = False
    #: Whether :meth:`_step` takes a fifth argument, the tokens already in KV of each
    #: prefilling request (the engine passes them; see ``prefill_past``).
    uses_prefill_past: bool = False

    def __init__(self, hardware: str | dict | Hardware = "H100", model: str | dict | ModelConfig = "qwen3-14b",
                 tp: int = 1):
        self.hardware = get_hardware(hardware)
        self.model = get_model(model)
        if not isinstance(tp, (int, np.integer)) or tp < 1 or self.model.heads % tp:
            raise ConfigError(f"tp={tp!r} is invalid; it must be >= 1 and divide heads={self.model.heads}")
        self.tp = int(tp)

    # --- public interface -------------------------------------------------------------
    def step_time_us(
        self, prefill_new: np.ndarray, prefill_len: np.ndarray, n_decode: int, decode_context_sum: int,
        prefill_past: np.ndarray | None = None,
    ) -> float:
        """Duration of one engine iteration, us.

        Args:
            prefill_new: per prefilling request, new (uncached) prompt tokens computed now (t_r).
            prefill_len: per prefilling request, its total prompt length in tokens (s_r).
            n_decode: decoding requests in the batch (one token each).
            decode_context_sum: sum over decoding requests of their contexts (tokens in KV), C.
            prefill_past: per prefilling request, tokens already in KV before this chunk
                (earlier chunks and prefix-cache hits). Only models that set
                ``uses_prefill_past`` read it; None means ``prefill_len - prefill_new``.
        """
        t, s = _as_tokens(prefill_new), _as_tokens(prefill_len)
        if self.uses_prefill_past:
            past = np.maximum(s - t, 0.0) if prefill_past is None else _as_tokens(prefill_past)
            step = self._step(t, s, int(n_decode), float(decode_context_sum), past)
        else:
            step = self._step(t, s, int(n_decode), float(decode_context_sum))
        return float(self._quantize(step))

    def decode_run_us(self, n_decode: int, context_sum0: int, k: int) -> np.ndarray:
        """Step times (us) of k consecutive decode-only iterations of ``n_decode`` requests
        whose context sum starts at ``context_sum0`` and grows by ``n_decode`` per iteration."""
        contexts = float(context_sum0) + float(n_decode) * np.arange(int(k), dtype=np.float64)
        empty = np.zeros(0)
        steps = np.broadcast_to(self._step(empty, empty, int(n_decode), contexts), contexts.shape)
        return np.asarray(self._quantize(steps), dtype=np.float64)

    def floor_us(
        self, prefill_new: np.ndarray, prefill_len: np.ndarray, n_decode: int, decode_context_sum: int
    ) -> float:
        """Physical lower bound of an iteration, us: FLOPs at 100% of dense peak and bytes at
        100% of HBM bandwidth, the larger of the two. Every count is a minimum: a prefill
        chunk is assumed to start the prompt (no earlier tokens to attend to or read), an MoE
        reads only the routed experts, and lm_head is read only if some token is sampled."""
        t = _as_tokens(prefill_new)  # prompt lengths do not enter: chunks start at position 0
        n, c = int(n_decode), float(decode_context_sum)
        pf_flops, dc_flops = self._flops(t, np.zeros_like(t), n, c)
        m = self.model
        weights = m.layer_active_params + (m.lm_head_params if n > 0 else 0)
        kv_bytes = m.kv_bytes_per_token * (t.sum() + c + n)
        work = t.sum() + n > 0
        if m.uniform:
            mem_bytes = work * weights * m.dtype_bytes + kv_bytes
        else:  # FP8 experts etc.: each weight at its own width
            lm = m.lm_head_params * m.dtype_bytes if n > 0 else 0
            mem_bytes = work * (m.weight_bytes(active=True) + lm) + kv_bytes
        return float(max((pf_flops + dc_flops) / self.hardware.flops_per_us, mem_bytes / self.hardware.bytes_per_us) / self.tp)

    def arrival_delay_us(self, input_tokens: np.ndarray) -> np.ndarray:
        """Delay (us) between arrival at the instance and being schedulable, per request."""
        return np.zeros(np.shape(input_tokens))

    def finish_delay_us(self, output_tokens: np.ndarray) -> np.ndarray:
        """Added (us) to the engine's finish time (end of the request's last iteration) when
        recording it, per request with ``output_tokens`` generated tokens."""
        return np.zeros(np.shape(output_tokens))

    def _quantize(self, step_us: FloatOrArray) -> FloatOrArray:
        """Step time as BLIS's clock would see it when ``integer_us`` is set: truncated to
        whole microseconds (Go's ``int64(x)``, as ``clampToInt64`` does), at least 1 us
        (``executeBatchStep`` floors every step at 1 tick). Identity otherwise."""
        if not self.integer_us:
            return step_us
        return np.maximum(np.floor(step_us), 1.0)

    # --- shared physics ---------------------------------------------------------------
    def _step(self, t: np.ndarray, s: np.ndarray, n: int, c: FloatOrArray) -> FloatOrArray:
        raise NotImplementedError

    def _flops(self, t: np.ndarray, past: np.ndarray, n: int, c: FloatOrArray) -> tuple[float, FloatOrArray]:
        """(prefill, decode) FLOPs of an iteration on the whole instance.

        Matmuls cost 2 FLOPs per active layer parameter per token (plus lm_head for each
        sampled decode token); attention costs 4 x heads x head_dim per layer per
        (query, key) pair. A chunk of t tokens after ``past`` earlier tokens has
        t x past + t (t + 1) / 2 causal pairs; a decode token attends to its c + 1 tokens.
        """
        m = self.model
        per_token = 2.0 * m.layer_active_params
        attn = 4.0 * m.heads * m.head_dim * m.layers
        pf = per_token * t.sum() + attn * float(np.sum(t * (past + (t + 1) / 2.0)))
        dc = (per_token + 2.0 * m.lm_head_params) * n + attn * (c + n)
        return pf, dc


def _as_tokens(x: np.ndarray) -> np.ndarray:
    """Token counts as a float64 vector (floats avoid int overflow in products)."""
    return np.asarray(x, dtype=np.float64).reshape(-1)


# BLIS blackbox coefficients fitted on vLLM 0.11 (docs/architecture.md):
# (model, hardware, tp) -> (alpha0, alpha1, alpha2), (beta0, beta1, beta2).
LINEAR_PRESETS: dict[tuple[str, str, int], tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    ("Qwen/Qwen3-14B", "H100", 1): ((8888.09, 0.18489, 0.0), (13578.19, 39.4447, 27.3228)),
    ("meta-llama/Llama-3.1-8B", "H100", 1): ((10326.27, 0.0, 0.0), (6472.01, 19.7972, 304.402)),
    ("Qwen/Qwen2.5-7B", "H100", 1): ((4680.30, 0.0, 0.0), (7051.80, 19.538, 25.432)),
}


class LinearModel(StepTimeModel):
    """BLIS "blackbox" model: ``step = beta0 + beta1 x sum(prefill_new) + beta2 x n_decode``.

    Overheads, as BLIS applies them (sim/latency/latency.go ``BlackboxLatencyModel``;
    sim/simulator.go): ``alpha0 + alpha1 x input_len`` from arrival at the instance to
    being queued (``QueueingTime``); ``alpha2`` per output token (``OutputTokenProcessingTime``),
    once on the first token and once on every decode step's inter-token latency, so the
    finish time carries ``alpha2 x output_tokens``; no per-request completion overhead
    (``PostDecodeFixedOverhead`` is 0). The step ignores decode contexts, so it cannot
    follow KV-read growth: see the floor tests for where that breaks the physics.

    Args:
        hardware, model, tp: the instance (used by :meth:`floor_us`).
        alpha0: fixed arrival -> schedulable delay, us.
        alpha1: arrival -> schedulable delay per input token, us.
        alpha2: post-processing per output token, us.
        beta0: fixed cost per iteration, us.
        beta1: cost per new (uncached) prefill token, us.
        beta2: cost per decoding request, us.
    """

    name = "linear"

    def __init__(
        self,
        hardware: str | Hardware = "H100",
        model: str | ModelConfig = "qwen3-14b",
        tp: int = 1,
        *,
        alpha0: float,
        alpha1: float,
        alpha2: float,
        beta0: float,
        beta1: float,
        beta2: float,
    ):
        super().__init__(hardware, model, tp)
        self.alpha0, self.alpha1, self.alpha2 = float(alpha0), float(alpha1), float(alpha2)
        self.beta0, self.beta1, self.beta2 = float(beta0), float(beta1), float(beta2)
        self.first_token_delay_us = self.alpha2

    def _step(self, t: np.ndarray, s: np.ndarray, n: int, c: FloatOrArray) -> FloatOrArray:
        return self.beta0 + self.beta1 * t.sum() + self.beta2 * n

    def arrival_delay_us(self, input_tokens: np.ndarray) -> np.ndarray:
        return self.alpha0 + self.alpha1 * np.asarray(input_tokens, dtype=np.float64)

    def finish_delay_us(self, output_tokens: np.ndarray) -> np.ndarray:
        return self.alpha2 * np.maximum(np.asarray(output_tokens, dtype=np.float64), 1.0)


class RooflineModel(StepTimeModel):
    """Analytical roofline: ``step = max(compute, memory) + overhead_us``.

    compute = prefill FLOPs / (peak x mfu_prefill) + decode FLOPs / (peak x mfu_decode);
    memory = (weights once per iteration + KV written for new tokens + KV read for every
    earlier token attended to) / bandwidth; both divided by tp. A prefill chunk of t tokens
    of an s-token prompt is assumed to follow s - t tokens already in KV (true for the
    last chunk and for a prefix-cache hit). MoE: FLOPs from the active parameters
    (routed experts), weight bytes from all parameters (at batch sizes of interest nearly
    every expert is touched). The input embedding table is gathered, not streamed, so it
    is not counted.

    BLIS's roofline (sim/latency/roofline.go ``rooflineStepTime``) is the same single
    crossover with the phase-specific MFU sum above (prefill FLOPs at MfuPrefill, decode
    FLOPs at MfuDecode; H100 0.45 / 0.30), weights loaded once per step, per-request KV
    growth + KV read of the past context + token activations; it has no overhead term
    and, unlike here, reads only the top-k experts' weights of an MoE. Here activation
    bytes are left out (they stay on chip in fused kernels) and ``overhead_us`` adds a
    fixed per-iteration cost (CPU scheduling, kernel launches; 0 = BLIS parity). BLIS
    applies no alpha overheads to its roofline by default, nor does this model. BLIS
    also counts only 2 MLP matrices (not SwiGLU's 3) and no lm_head, so for a dense
    model it prices ~27% fewer FLOPs and weight bytes than this model; see
    :class:`BlisRooflineModel` ("blis-roofline"), which reproduces it exactly, and
    docs/validation.md for what that does to a replay.

    Args:
        hardware, model, tp: the instance.
        mfu_prefill: achieved fraction of peak FLOPs on prefill tokens, in (0, 1].
        mfu_decode: achieved fraction of peak FLOPs on decode tokens, in (0, 1].
        overhead_us: fixed cost added to every iteration, us.
        integer_us: BLIS parity (off by default): truncate each step to whole microseconds
            (``clampToInt64`` in ``rooflineStepTime``), at least 1 us.
    """

    name = "roofline"

    def __init__(
        self,
        hardware: str | Hardware = "H100",
        model: str | ModelConfig = "qwen3-14b",
        tp: int = 1,
        *,
        mfu_prefill: float = 0.45,
        mfu_decode: float = 0.30,
        overhead_us: float = 0.0,
        integer_us: bool = False,
    ):
        super().__init__(hardware, model, tp)
        self.integer_us = bool(integer_us)
        if not (0 < mfu_prefill <= 1 and 0 < mfu_decode <= 1 and overhead_us >= 0):
            raise ConfigError(
                f"mfu_prefill={mfu_prefill!r}, mfu_decode={mfu_decode!r}, overhead_us={overhead_us!r}: "
                "MFUs must be in (0, 1] and overhead_us >= 0"
            )
        self.mfu_prefill, self.mfu_decode, self.overhead_us = float(mfu_prefill), float(mfu_decode), float(overhead_us)

    def _step(self, t: np.ndarray, s: np.ndarray, n: int, c: FloatOrArray) -> FloatOrArray:
        m, hw = self.model, self.hardware
        past = np.maximum(s - t, 0.0)
        pf_flops, dc_flops = self._flops(t, past, n, c)
        compute = pf_flops / (hw.flops_per_us * self.mfu_prefill) + dc_flops / (hw.flops_per_us * self.mfu_decode)
        weights = (t.sum() + n > 0) * roofline_weight_bytes(m)
        kv = m.kv_bytes_per_token * (t.sum() + past.sum() + c + n)
        memory = (weights + kv) / hw.bytes_per_us
        return np.maximum(compute, memory) / self.tp + self.overhead_us


class BlisRooflineModel(RooflineModel):
    """BLIS's roofline, term for term (sim/latency/roofline.go ``rooflineStepTime``), for
    parity runs only; :class:`RooflineModel` is the physical one.

    Per prefilling request with ``p`` tokens already in KV (BLIS's ``ProgressIndex``) and
    ``t`` new tokens, and per decoding request with context ``p`` (``t`` = 1), effective
    context e = p + (t - 1) / 2 for t > 1, else p:

        FLOPs = L [2t (d^2 + 2 d dKV) + 2t d^2 + 4 H t e dh + 2t (2 d dff)]      (GEMMs)
              + L [5 H t e + 2 t d]                                          (softmax, RoPE)
        bytes = KV (t + p) + L d 2 t                       (KV write + read, activations)
        step  = max(sum FLOPs_pf / (peak mfu_prefill) + sum FLOPs_dc / (peak mfu_decode),
                    (weights + sum bytes) / bandwidth) / tp,
        weights = L [d (d + 2 dKV) + d^2 + 2 d dff] x 2 bytes, read once per step.

    Where it departs from :class:`RooflineModel` (and from the hardware):
    - the MLP counts 2 matrices, not SwiGLU's 3 (``mlpMatrixCount`` returns 2, the
      llm-optimizer convention), so a dense token costs ~27% fewer FLOPs and the weights
      ~27% fewer bytes (Qwen3-14B: 19.3 GFLOP and 19.3 GB instead of 26.4);
    - no lm_head: neither its FLOPs on sampled tokens nor its weight bytes;
    - attention context p + (t - 1) / 2 (ours p + (t + 1) / 2; decode: p, ours p + 1),
      with head_dim = hidden / heads, plus softmax/RoPE "vector" FLOPs at the same MFU;
    - activation bytes L d 2 per token;
    - MoE: routed experts' FLOPs (2 matrices x k) and the expected distinct experts'
      weights, N (1 - ((N - k) / N)^B) for B new tokens in the step, no gate.
    With ``integer_us`` each step is truncated to whole microseconds, as BLIS does (the
    reference run's lone requests match to the microsecond). No alpha overheads.
    """

    name = "blis-roofline"
    uses_prefill_past = True

    def _step(self, t: np.ndarray, s: np.ndarray, n: int, c: FloatOrArray,
              past: np.ndarray | None = None) -> FloatOrArray:
        m, hw = self.model, self.hardware
        if past is None:
            past = np.maximum(s - t, 0.0)
        L, d, H = float(m.layers), float(m.hidden), float(m.heads)
        dh = d / H  # BLIS derives head_dim from hidden / heads
        dkv = m.kv_heads * dh
        moe = m.num_experts > 1
        mlp = 2.0 * 2.0 * d * m.ffn * (m.experts_per_token if moe else 1)  # FLOPs per token per layer
        per_token = L * (2.0 * (d * d + 2 * d * dkv) + 2.0 * d * d + mlp + 2.0 * d)  # + RoPE
        per_pair = L * (4.0 * H * dh + 5.0 * H)  # attention GEMMs + softmax per (query, context)
        eff = past + np.where(t > 1, (t - 1) / 2.0, 0.0)
        pf_flops = per_token * t.sum() + per_pair * float(np.sum(t * eff))
        dc_flops = per_token * n + per_pair * c
        compute = pf_flops / (hw.flops_per_us * self.mfu_prefill) + dc_flops / (hw.flops_per_us * self.mfu_decode)
        kv = 2.0 * L * m.kv_heads * dh * m.dtype_bytes  # bytes per token of KV
        act = L * d * m.dtype_bytes  # activation bytes per new token
        dyn = kv * (t.sum() + past.sum() + c + n) + act * (t.sum() + n)
        new_tokens = t.sum() + n
        if moe:
            N, k = float(m.num_experts), float(m.experts_per_token)
            experts = N * (1.0 - ((N - k) / N) ** new_tokens) if new_tokens > 0 else 0.0
        else:
            experts = 1.0
        weights = L * (d * (d + 2 * dkv) + d * d + 2.0 * d * m.ffn * experts) * m.dtype_bytes
        memory = (weights + dyn) / hw.bytes_per_us
        step = np.maximum(compute, memory) / self.tp
        return np.where(new_tokens > 0, step, 0.0) + self.overhead_us


class TrainedPhysicsModel(StepTimeModel):
    """BLIS "trained-physics" model (docs/architecture.md; sim/latency/trained_physics_model.go).

    With F, W the per-us peak FLOPs and bandwidth, t_r / s_r the new tokens and total
    prompt length of prefilling request r, Tp = sum t_r, Nd decoding requests with
    contexts summing to C, B = all requests, dKV = kv_heads x head_dim:

        T_pf_compute = [L 2 Tp d (2d + 2dKV) + L sum_r 4 H t_r (s_r + t_r / 2) dh + L Tp 6 d dff] / F
        T_pf_kv      = L 2 dKV Tp 2 / W
        T_dc_compute = [L 2 Nd d (2d + 2dKV) + L 4 H C dh + L Nd 6 d dff] / F
        T_dc_kv      = L 2 dKV 2 (C + Nd) / W
        T_weight     = [L d (2d + 2dKV) + L 3 d dff] 2 / W
        step = b1a T_pf_compute + b1b T_pf_kv + b2a T_dc_compute + b2b T_dc_kv + b3 T_weight
               + b4 T_tp + b5 L + b6 B + b7

    As in BLIS: with tp > 1 every FLOP and byte term is divided by tp and
    T_tp = 2L (Tp + Nd) d 2 2 (tp - 1) / tp / W is the ring all-reduce (0 at tp = 1);
    an MoE's FFN FLOPs use experts_per_token x ffn (expert size) and its weight term all
    num_experts experts. BLIS truncates each duration to whole microseconds
    (``clampToInt64``); this model keeps fractions (differences < 1 us per term).
    The prefill term prices ~6.6x below the dense peak for long chunks (b1a = 0.15), so
    it breaks :meth:`floor_us`; use it for parity with BLIS only.

    Overheads, as BLIS applies them (sim/latency/trained_physics_model.go, sim/simulator.go):
    ``a0`` (``QueueingTime``) delays every request from arrival at the instance to being
    queued; ``a2`` (``OutputTokenProcessingTime``) is added once to the first-token time
    (``FirstTokenTime = now + step + a2``, ``executeBatchStep``) AND to every decode
    step's inter-token latency (``ITL = step + a2``), and E2E = FirstTokenTime + sum(ITL)
    + ``a1`` (``PostDecodeFixedOverhead``, ``recordRequestCompletion``, only when the
    request has output tokens). So the recorded finish time is the end of the last
    iteration plus a2 x output_tokens + a1. These are metric-only: BLIS frees the KV
    blocks and reports completion to the cluster at the end of the last iteration. A lone
    request's TTFT is a0 + its prefill iteration(s) + a2.

    Args:
        hardware, model, tp: the instance.
        b1a, b1b, b2a, b2b, b3, b4: dimensionless corrections of the terms above.
        b5: overhead per layer per iteration, us.
        b6: overhead per request in the batch, us.
        b7: fixed overhead per iteration, us.
        a0: arrival -> schedulable delay, us.
        a1: per-request completion overhead, us.
        a2: per-output-token post-processing, us.
        integer_us: BLIS parity (off by default): truncate each step, a0, a1 and a2 to whole
            microseconds as BLIS does (``clampToInt64``: a0 15563, a1 777, a2 45 us), so
            a request with n output tokens carries 45 n + 777 us, not 45.91 n + 777.35 us.
            Over a 5,000-request replay the fractions otherwise add ~1-3 ms per request.
    """

    name = "blis-trained-physics"

    def __init__(
        self,
        hardware: str | Hardware = "H100",
        model: str | ModelConfig = "qwen3-14b",
        tp: int = 1,
        *,
        b1a: float = 0.152128,
        b1b: float = 0.0,
        b2a: float = 0.0,
        b2b: float = 1.94710771,
        b3: float = 1.36252915,
        b4: float = 0.752037,
        b5: float = 32.09546717,
        b6: float = 4.41684444,
        b7: float = 126.024825,
        a0: float = 15563.20,
        a1: float = 777.35,
        a2: float = 45.91,
        integer_us: bool = False,
    ):
        super().__init__(hardware, model, tp)
        self.b1a, self.b1b, self.b2a, self.b2b, self.b3, self.b4 = b1a, b1b, b2a, b2b, b3, b4
        self.b5, self.b6, self.b7 = b5, b6, b7
        self.integer_us = bool(integer_us)
        if self.integer_us:  # BLIS: QueueingTime etc. return int64(alpha)
            a0, a1, a2 = float(np.floor(a0)), float(np.floor(a1)), float(np.floor(a2))
        self.a0, self.a1, self.a2 = a0, a1, a2
        self.first_token_delay_us = float(a2)

    def _step(self, t: np.ndarray, s: np.ndarray, n: int, c: FloatOrArray) -> FloatOrArray:
        m, hw, tp = self.model, self.hardware, self.tp
        L, d, dh = m.layers, float(m.hidden), float(m.head_dim)
        dkv = float(m.kv_heads * m.head_dim)
        tp_sum = t.sum()
        proj = 2.0 * d * (2 * d + 2 * dkv)
        mlp, weight = trained_physics_mlp_weight(m, hw, tp)
        weight = self._weight_term(weight, tp_sum + n)
        attn = L * 4 * (m.heads / tp) * dh  # per (query, key) pair; heads are split over TP
        kvf = L * 2 * dkv / tp * (m.kv_bytes / 2)  # exact: a power-of-two scale (BF16 KV: 1)
        pf_compute = (L * tp_sum * (proj + mlp) / tp + attn * float(np.sum(t * (s + t / 2)))) / hw.flops_per_us
        pf_kv = kvf * tp_sum * 2 / hw.bytes_per_us
        dc_compute = (L * n * (proj + mlp) / tp + attn * c) / hw.flops_per_us
        dc_kv = kvf * 2 * (c + n) / hw.bytes_per_us
        all_reduce = 2 * L * (tp_sum + n) * d * 2 * 2 * (tp - 1) / tp / hw.bytes_per_us
        return (
            self.b1a * pf_compute + self.b1b * pf_kv + self.b2a * dc_compute + self.b2b * dc_kv
            + self.b3 * weight + self.b4 * all_reduce + self.layer_cost * L + self.b6 * (t.size + n) + self.b7
        )

    def _weight_term(self, weight: float, tokens: float) -> float:
        """T_weight of an iteration of ``tokens`` tokens: every weight, every expert."""
        return weight

    @property
    def layer_cost(self) -> float:
        """Overhead per layer per iteration, us (b5)."""
        return self.b5

    def arrival_delay_us(self, input_tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(input_tokens), float(self.a0))

    def finish_delay_us(self, output_tokens: np.ndarray) -> np.ndarray:
        out = np.asarray(output_tokens, dtype=np.float64)
        return self.a2 * np.maximum(out, 1.0) + self.a1 * (out > 0)


#: Coefficients of "vllm-calibrated": ``llmsched-gym calibrate --runs ../shared/real_vllm/runs.json
#: --start blis-trained-physics`` (a0, b2a, b2b, b3, b4, b5, b6, b7 fitted to the per-stage TTFT and
#: E2E means of the 15 measured vLLM v0.15.1 runs on H100; docs/validation.md, "Validation against
#: real vLLM"); b1a, b1b, a1, a2 keep BLIS's values (the runs' prompts hit the prefix cache: no
#: prefill signal to fit them on).
VLLM_CALIBRATED = {
    "b1a": 0.152128, "b1b": 0.0, "b2a": 0.08315347540964581, "b2b": 1.215148848693324,
    "b3": 1.4856763603115666, "b4": 31.50446584282206, "b5": 12.728985099940504, "b6": 2.9437333124162333,
    "b7": 36.892296059947476, "a0": 8205.492693573458, "a1": 777.35, "a2": 45.91,
}


class VllmCalibratedModel(TrainedPhysicsModel):
    """:class:`TrainedPhysicsModel`'s terms with coefficients fitted to measured vLLM runs under
    their real open-loop arrivals (:data:`VLLM_CALIBRATED`; docs/validation.md). BLIS's own
    coefficients stay available as ``blis-trained-physics`` for parity runs.

    One term differs: an MoE iteration reads only the routed experts its tokens touch, in
    expectation E (1 - (1 - k / E)^B) of E experts for B tokens routed to k each (BLIS's
    roofline uses the same count), besides the attention, dense-layer and shared-expert
    weights, and the lm_head's (every iteration samples). Dense models: trained-physics's
    T_weight with the attention at its real size and the lm_head added. ``b5`` applies only
    at tp > 1 (see :attr:`layer_cost`).
    """

    name = "vllm-calibrated"

    def __init__(
        self,
        hardware: str | dict | Hardware = "H100",
        model: str | dict | ModelConfig = "qwen3-14b",
        tp: int = 1,
        *,
        b1a: float = VLLM_CALIBRATED["b1a"],
        b1b: float = VLLM_CALIBRATED["b1b"],
        b2a: float = VLLM_CALIBRATED["b2a"],
        b2b: float = VLLM_CALIBRATED["b2b"],
        b3: float = VLLM_CALIBRATED["b3"],
        b4: float = VLLM_CALIBRATED["b4"],
        b5: float = VLLM_CALIBRATED["b5"],
        b6: float = VLLM_CALIBRATED["b6"],
        b7: float = VLLM_CALIBRATED["b7"],
        a0: float = VLLM_CALIBRATED["a0"],
        a1: float = VLLM_CALIBRATED["a1"],
        a2: float = VLLM_CALIBRATED["a2"],
        integer_us: bool = False,
    ):
        super().__init__(hardware, model, tp, b1a=b1a, b1b=b1b, b2a=b2a, b2b=b2b, b3=b3, b4=b4, b5=b5, b6=b6,
                         b7=b7, a0=a0, a1=a1, a2=a2, integer_us=integer_us)
        self.dense_weight, self.expert_weight, self.experts, self.routed = expert_weight_terms(
            self.model, self.hardware, self.tp)

    def _weight_term(self, weight: float, tokens: float) -> float:
        return self.dense_weight + self.expert_weight * touched_experts(self.experts, self.routed, tokens)

    @property
    def layer_cost(self) -> float:
        """b5 is the per-layer cost of tensor parallelism (two all-reduces a layer, latency-bound
        at decode batch sizes): 0 on one GPU, where CUDA graphs leave no per-layer cost."""
        return self.b5 if self.tp > 1 else 0.0


def touched_experts(E: float, k: float, tokens: float) -> float:
    """Expected distinct experts of E that ``tokens`` tokens, each routed to k, touch."""
    return E * (1.0 - ((E - k) / E) ** tokens) if E > 0 else 0.0


def expert_weight_terms(m: ModelConfig, hw: Hardware, tp: int) -> tuple[float, float, float, float]:
    """(T_weight of the weights every iteration reads, us; T_weight of one routed expert in
    every MoE layer, us; routed experts E; experts per token k) for ``vllm-calibrated``.

    Unlike trained-physics's d (2d + 2dKV), the attention projections are counted at their
    real size (q and o are d x heads x head_dim: Mistral-Nemo's 4,096 columns, not 5,120),
    and each weight at its width, the lm_head included; dense models have no expert term
    (0, 0, 0)."""
    L, d, W = m.layers, float(m.hidden), hw.bytes_per_us
    routed = m.n_moe_layers * m.num_experts * float(m.ffn)  # MLP width summed over layers
    attn = L * m.attn_params_per_layer * m.attn_bytes
    always = attn + 3.0 * d * (L * m.ffn_resident_width - routed) * m.mlp_bytes + m.lm_head_params * m.dtype_bytes
    if not m.is_moe:
        return always / tp / W, 0.0, 0.0, 0.0
    per_expert = m.n_moe_layers * 3.0 * d * m.ffn * m.mlp_bytes / tp / W
    return always / tp / W, per_expert, float(m.num_experts), float(m.experts_per_token)


def roofline_weight_bytes(m: ModelConfig) -> float:
    """Bytes of every weight the roofline streams per iteration (all experts, lm_head)."""
    if m.uniform:
        return (m.layer_total_params + m.lm_head_params) * m.dtype_bytes
    return m.weight_bytes() + m.lm_head_params * m.dtype_bytes


def trained_physics_mlp_weight(m: ModelConfig, hw: Hardware, tp: int) -> tuple[float, float]:
    """(MLP FLOPs per token per layer, T_weight in us) of the trained-physics model.

    A uniform model (every layer alike, one weight width) keeps BLIS's expressions as
    written, so its numbers stay bit-identical; otherwise the MLP width is averaged over
    layers (routed experts x expert width + shared experts in MoE layers, ``dense_ffn`` in
    dense ones) and each weight is priced at its own width (FP8 experts: 1 byte).
    """
    L, d, dff = m.layers, float(m.hidden), float(m.ffn)
    dkv = float(m.kv_heads * m.head_dim)
    if m.uniform:
        mlp = max(m.experts_per_token, 1) * 6.0 * d * dff  # routed experts each token runs
        weight = L * (d * (2 * d + 2 * dkv) + max(m.num_experts, 1) * 3 * d * dff) * m.dtype_bytes / tp / hw.bytes_per_us
        return mlp, weight
    mlp = 6.0 * d * m.ffn_active_width
    weight = (L * (d * (2 * d + 2 * dkv) * m.attn_bytes + 3 * d * m.ffn_resident_width * m.mlp_bytes)
              / tp / hw.bytes_per_us)
    return mlp, weight


_KINDS: dict[str, type[StepTimeModel]] = {
    cls.name: cls for cls in (LinearModel, RooflineModel, TrainedPhysicsModel, BlisRooflineModel, VllmCalibratedModel)
}


def load_latency_file(path: str | Path) -> tuple[str, dict]:
    """(kind, coefficients) of a latency-model file: JSON ``{"kind": ..., "params": {...}}``
    (``llmsched-gym calibrate`` writes one, with its fit report beside).

    Raises:
        ConfigError: unreadable file, unknown kind, or a coefficient the kind lacks.
    """
    try:
        d = json.loads(Path(path).expanduser().read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"latency-model file {path}: not a readable JSON file ({type(e).__name__})") from None
    if not isinstance(d, dict) or d.get("kind") not in _KINDS or not isinstance(d.get("params", {}), dict):
        got = d.get("kind") if isinstance(d, dict) else None
        raise ConfigError(f"latency-model file {path}: kind={got!r} is invalid; allowed: {', '.join(_KINDS)} "
                          "(and params: a mapping of coefficients)")
    params = d.get("params", {})
    allowed = _overridable(_KINDS[d["kind"]])
    bad = sorted(k for k, v in params.items() if k not in allowed or isinstance(v, bool)
                 or not isinstance(v, (int, float)) or not np.isfinite(v))
    if bad:
        raise ConfigError(f"latency-model file {path}: params {bad} are not finite numbers of {d['kind']}; "
                          f"allowed: {', '.join(allowed)}")
    return d["kind"], dict(params)


@functools.cache
def _overridable(cls: type[StepTimeModel]) -> tuple[str, ...]:
    """Keyword-only constructor parameters (the model's coefficients)."""
    params = inspect.signature(cls.__init__).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def make_latency_model(
    kind: str,
    hardware: str | Hardware = "H100",
    model: str | ModelConfig = "qwen3-14b",
    tp: int = 1,
    **overrides: float,
) -> StepTimeModel:
    """Build a step-time model.

    Args:
        kind: "linear", "roofline", "blis-roofline" (BLIS's roofline formula, parity only)
            or "blis-trained-physics".
        hardware: GPU preset or name.
        model: model preset or name.
        tp: tensor-parallel degree.
        **overrides: coefficients replacing the defaults (for "linear": alpha0..alpha2,
            beta0..beta2 over the fitted preset; otherwise the class's keyword arguments).

    Raises:
        ConfigError: unknown kind, unknown override, or no linear preset for the
            (model, hardware, tp) combination; messages list what is allowed.
    """
    cls = _KINDS.get(kind)
    if cls is None and isinstance(kind, str) and Path(kind).expanduser().is_file():
        kind, params = load_latency_file(kind)
        overrides = {**params, **overrides}
        cls = _KINDS[kind]
    if cls is None:
        raise ConfigError(f"latency model kind={kind!r} is not known; allowed: {', '.join(_KINDS)}, or the path "
                          "of a latency-model file (llmsched-gym calibrate)")
    allowed = _overridable(cls)
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ConfigError(f"{kind} model has no parameter {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    hw, m = get_hardware(hardware), get_model(model)
    if cls is LinearModel:
        preset = LINEAR_PRESETS.get((m.name, hw.name, tp))
        if preset is None:
            known = "; ".join(f"{name} on {h} TP{p}" for name, h, p in LINEAR_PRESETS)
            raise ConfigError(
                f"no linear preset for model={m.name!r} on {hw.name} TP{tp}; fitted presets: {known}"
            )
        overrides = {**dict(zip(allowed, (*preset[0], *preset[1]))), **overrides}
    return cls(hw, m, tp, **overrides)
