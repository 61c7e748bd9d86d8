"""Compiled step-time models: the same arithmetic as :mod:`llmsched_gym.engine.latency`, term for term.

Each :class:`~llmsched_gym.engine.latency.StepTimeModel` is lowered to a kind code and a float
vector of constants (:func:`lower`), folded in the same order of operations as the numpy
model, so a compiled iteration costs exactly what the Python model prices, bit for bit.
The kernels receive the per-iteration sums the models need (prefill token sums and the
attention-pair sums, all exact in float64: every product is a multiple of 0.5).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import ConfigError
from .latency import (
    BlisRooflineModel,
    LinearModel,
    RooflineModel,
    StepTimeModel,
    TrainedPhysicsModel,
    VllmCalibratedModel,
    expert_weight_terms,
    roofline_weight_bytes,
    trained_physics_mlp_weight,
)

LINEAR, ROOFLINE, BLIS_ROOFLINE, TRAINED_PHYSICS, VLLM_CALIBRATED = 0, 1, 2, 3, 4
N_PARAMS = 22


def lower(model: StepTimeModel) -> tuple[int, np.ndarray]:
    """(kind, constants) of a built-in step-time model for the compiled engine."""
    p = np.zeros(N_PARAMS)
    m, hw = model.model, model.hardware
    if isinstance(model, LinearModel):
        p[:3] = model.beta0, model.beta1, model.beta2
        return LINEAR, p
    if isinstance(model, BlisRooflineModel):
        L, d, H = float(m.layers), float(m.hidden), float(m.heads)
        dh = d / H
        dkv = m.kv_heads * dh
        moe = m.num_experts > 1
        mlp = 2.0 * 2.0 * d * m.ffn * (m.experts_per_token if moe else 1)
        p[0] = L * (2.0 * (d * d + 2 * d * dkv) + 2.0 * d * d + mlp + 2.0 * d)  # per token
        p[1] = L * (4.0 * H * dh + 5.0 * H)  # per (query, context) pair
        p[2] = hw.flops_per_us * model.mfu_prefill
        p[3] = hw.flops_per_us * model.mfu_decode
        p[4] = 2.0 * L * m.kv_heads * dh * m.dtype_bytes  # KV bytes per token
        p[5] = L * d * m.dtype_bytes  # activation bytes per token
        p[6] = 1.0 if moe else 0.0
        p[7], p[8] = float(m.num_experts), float(m.experts_per_token)
        p[9] = d * (d + 2 * dkv) + d * d
        p[10] = 2.0 * d * m.ffn
        p[11] = L
        p[12] = float(m.dtype_bytes)
        p[13] = hw.bytes_per_us
        p[14] = float(model.tp)
        p[15] = model.overhead_us
        return BLIS_ROOFLINE, p
    if isinstance(model, RooflineModel):
        p[0] = 2.0 * m.layer_active_params  # per token
        p[1] = 4.0 * m.heads * m.head_dim * m.layers  # per (query, key) pair
        p[2] = 2.0 * m.lm_head_params
        p[3] = hw.flops_per_us * model.mfu_prefill
        p[4] = hw.flops_per_us * model.mfu_decode
        p[5] = float(True * roofline_weight_bytes(m))
        p[6] = float(m.kv_bytes_per_token)
        p[7] = hw.bytes_per_us
        p[8] = float(model.tp)
        p[9] = model.overhead_us
        return ROOFLINE, p
    if isinstance(model, TrainedPhysicsModel):
        tp = model.tp
        L, d, dh = m.layers, float(m.hidden), float(m.head_dim)
        dkv = float(m.kv_heads * m.head_dim)
        proj = 2.0 * d * (2 * d + 2 * dkv)
        mlp, weight = trained_physics_mlp_weight(m, hw, tp)
        p[0] = float(L)
        p[1] = proj + mlp
        p[2] = L * 4 * (m.heads / tp) * dh  # attention per pair
        p[3] = L * 2 * dkv / tp * (m.kv_bytes / 2)  # KV bytes factor (the kernel's x 2: BF16)
        p[4] = weight
        p[5] = float(tp)
        p[6] = hw.flops_per_us
        p[7] = hw.bytes_per_us
        p[8] = d
        p[9:13] = model.b1a, model.b1b, model.b2a, model.b2b
        p[13] = model.b3
        p[14] = model.b4
        p[15] = model.layer_cost * L
        p[16], p[17] = model.b6, model.b7
        if isinstance(model, VllmCalibratedModel):  # T_weight from the experts a step touches
            p[18:22] = expert_weight_terms(m, hw, tp)
            return VLLM_CALIBRATED, p
        return TRAINED_PHYSICS, p
    raise ConfigError(f"step-time model {type(model).__name__!r} has no compiled form; "
                      "use one of linear, roofline, blis-roofline, blis-trained-physics")


@njit(cache=True)
def step_us(kind, p, integer_us, n_pf, sum_t, pairs_pf, past_pf, n_dec, ctx):
    """Duration (us) of one iteration.

    Args:
        n_pf, sum_t: prefilling requests and their new tokens.
        pairs_pf: the model's prefill attention-pair sum (see :func:`prefill_sums`).
        past_pf: the model's sum of tokens already in KV of the prefilling requests.
        n_dec, ctx: decoding requests and their context sum (float).
    """
    if kind == LINEAR:
        s = p[0] + p[1] * sum_t + p[2] * n_dec
    elif kind == ROOFLINE:
        pf = p[0] * sum_t + p[1] * pairs_pf
        dc = (p[0] + p[2]) * n_dec + p[1] * (ctx + n_dec)
        compute = pf / p[3] + dc / p[4]
        weights = p[5] if sum_t + n_dec > 0 else 0.0
        kv = p[6] * (sum_t + past_pf + ctx + n_dec)
        memory = (weights + kv) / p[7]
        s = max(compute, memory) / p[8] + p[9]
    elif kind == BLIS_ROOFLINE:
        pf = p[0] * sum_t + p[1] * pairs_pf
        dc = p[0] * n_dec + p[1] * ctx
        compute = pf / p[2] + dc / p[3]
        dyn = p[4] * (sum_t + past_pf + ctx + n_dec) + p[5] * (sum_t + n_dec)
        new_tokens = sum_t + n_dec
        if p[6] > 0.0:
            N, k = p[7], p[8]
            experts = N * (1.0 - ((N - k) / N) ** new_tokens) if new_tokens > 0 else 0.0
        else:
            experts = 1.0
        weights = p[11] * (p[9] + p[10] * experts) * p[12]
        memory = (weights + dyn) / p[13]
        step = max(compute, memory) / p[14]
        s = (step if new_tokens > 0 else 0.0) + p[15]
    else:  # TRAINED_PHYSICS, VLLM_CALIBRATED (T_weight: the experts the step's tokens touch)
        weight = p[4]
        if kind == VLLM_CALIBRATED:
            E, k, B = p[20], p[21], sum_t + n_dec
            weight = p[18] + p[19] * (E * (1.0 - ((E - k) / E) ** B) if E > 0 else 0.0)
        L, tp, F, W = p[0], p[5], p[6], p[7]
        pf_compute = (L * sum_t * p[1] / tp + p[2] * pairs_pf) / F
        pf_kv = p[3] * sum_t * 2 / W
        dc_compute = (L * n_dec * p[1] / tp + p[2] * ctx) / F
        dc_kv = p[3] * 2 * (ctx + n_dec) / W
        all_reduce = 2 * L * (sum_t + n_dec) * p[8] * 2 * 2 * (tp - 1) / tp / W
        s = (p[9] * pf_compute + p[10] * pf_kv + p[11] * dc_compute + p[12] * dc_kv + p[13] * weight
             + p[14] * all_reduce + p[15] + p[16] * (n_pf + n_dec) + p[17])
    if integer_us:
        return max(np.floor(s), 1.0)
    return s


@njit(cache=True)
def prefill_terms(kind, t, s, past):
    """(attention-pair term, past-token term) of one prefilling request for ``kind``.

    ``t`` new tokens of a prompt whose computed length will be ``s``; ``past`` tokens
    already in KV (BLIS's roofline reads it; the others derive it as ``s - t``).
    """
    if kind == TRAINED_PHYSICS or kind == VLLM_CALIBRATED:
        return t * (s + t / 2), 0.0
    if kind == ROOFLINE:
        pst = max(s - t, 0.0)
        return t * (pst + (t + 1) / 2.0), pst
    if kind == BLIS_ROOFLINE:
        return t * (past + ((t - 1) / 2.0 if t > 1 else 0.0)), past
    return 0.0, 0.0
