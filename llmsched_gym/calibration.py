"""Measured vLLM runs as scenarios, and step-time coefficients fitted to them (docs/validation.md).

A *measured run* is one inference-perf run against one vLLM instance, described as in
``runs.json`` of the real-vLLM set: the model's ``config.json``, the GPU, TP, vLLM's
limits (``max_num_seqs``, ``max_num_batched_tokens``, ``block_size``,
``gpu_memory_utilization``, ``total_kv_blocks``), the shared-prefix workload, the load
stages, and per stage the client's measured statistics (milliseconds). :func:`run_scenario`
turns one into a :class:`~llmsched_gym.scenarios.Scenario` (public interface only);
:func:`simulate_run` simulates it and returns per-stage statistics in the same units.

:func:`calibrate` fits the coefficients of a trained-physics step-time model to the
per-stage means of a set of runs, under the runs' own open-loop arrivals:
Levenberg-Marquardt on log errors (Huber loss), with the Jacobian taken by finite
differences (each coefficient perturbed by 5%) over simulations of the runs.
:data:`PHYSICAL_PRIOR` (``calibrate --physical-prior``) holds the terms a held-out model cannot
identify at values priced from the hardware, and :func:`decode_start` starts the overheads from
the measured decode steps (:func:`decode_steps`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .engine.hardware import get_hardware, get_kv_link
from .engine.latency import _KINDS, _overridable, load_latency_file
from .errors import ConfigError
from .scenarios import scenario_from_dict
from .validation import atomic_write_text, check_number, invalid
from .workloads.inference_perf import InferencePerfProfile

#: Statistics compared, as named in the measured runs (ms).
METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99", "itl_mean_nominal")
#: The coefficients fitted by default (the others keep the base model's values).
FIT_PARAMS = ("a0", "b2a", "b2b", "b3", "b4", "b5", "b6", "b7")


@dataclass
class MeasuredRun:
    """One measured run (see the module docstring); ``stages``: ``[(rate, duration_s,
    {metric: ms})]``; ``whole``: the whole-run statistics; ``blis``: BLIS's whole-run
    prediction (ms) where the file has it."""

    key: str
    model: dict
    hardware: str | dict
    tp: int
    vllm: dict
    workload: dict
    stages: list
    whole: dict
    blis: dict | None = None


def load_runs(path: str | Path) -> list[MeasuredRun]:
    """The runs of a ``runs.json`` (model configs resolved relative to its folder).

    Raises:
        ConfigError: unreadable file or a run missing a field (named).
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"measured runs {p}: not a readable JSON file ({type(e).__name__})") from None
    hardware = d.get("hardware", {}) if isinstance(d, dict) else {}
    runs = d.get("runs") if isinstance(d, dict) else d
    if not isinstance(runs, list) or not runs:
        raise ConfigError(f"measured runs {p}: no 'runs' list")
    out = []
    for i, r in enumerate(runs):
        where = f"{p}: runs[{i}]"
        for k in ("key", "model_config", "hardware", "tp", "vllm", "workload", "stages"):
            if k not in r:
                raise ConfigError(f"{where}: missing field {k!r}")
        cfg = (p.parent / r["model_config"]).resolve()
        model = {"config": str(cfg), "name": r.get("model", cfg.parent.name)}
        hw = r["hardware"]
        if isinstance(hw, str) and hw in hardware and not _is_preset(hw):
            hw = {"name": hw, "peak_tflops": hardware[hw]["TFlopsPeak"], "hbm_tbps": hardware[hw]["BwPeakTBs"],
                  "memory_gib": hardware[hw]["MemoryGiB"]}
        stages = [(float(s["rate"]), float(s["duration_s"]), dict(s.get("measured", {}))) for s in r["stages"]]
        out.append(MeasuredRun(r["key"], model, hw, int(r["tp"]), dict(r["vllm"]), dict(r["workload"]), stages,
                               dict(r.get("whole_run_measured", {})), r.get("blis_trained_physics_prediction")))
    return out


def _is_preset(name: str) -> bool:
    try:
        get_hardware(name)
        return True
    except ConfigError:
        return False


def async_scheduling_of(vllm: dict) -> bool:
    """Whether a run's vLLM scheduled asynchronously: ``async_scheduling`` if the run says,
    else vLLM's default, on from v0.14 (January 2026) and off before."""
    if "async_scheduling" in vllm:
        return bool(vllm["async_scheduling"])
    try:
        major, minor = (int(x) for x in str(vllm.get("version", "0.0")).split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (0, 14)


def run_scenario(run: MeasuredRun, latency_model: str = "vllm-calibrated", latency_params: dict | None = None):
    """The :class:`~llmsched_gym.scenarios.Scenario` of a measured run: one instance with the
    run's limits, KV blocks (the server's log; else from ``gpu_memory_utilization``) and
    scheduling mode (:func:`async_scheduling_of`), the inference-perf profile as the workload."""
    v, w = run.vllm, run.workload
    cluster = {"instances": 1, "hardware": run.hardware, "model": run.model, "tp": run.tp,
               "latency_model": latency_model, "latency_params": dict(latency_params or {}),
               "gpu_memory_utilization": float(v.get("gpu_memory_utilization", 0.9)),
               "engine": {"max_num_seqs": int(v["max_num_seqs"]), "max_num_batched_tokens": int(v["max_num_batched_tokens"]),
                          "block_size": int(v.get("block_size", 16)), "max_model_len": v.get("max_model_len"),
                          "async_scheduling": async_scheduling_of(v)}}
    if v.get("total_kv_blocks"):
        cluster["kv_blocks"] = int(v["total_kv_blocks"])
    profile = {"num_unique_system_prompts": w["num_unique_system_prompts"],
               "num_users_per_system_prompt": w["num_users_per_system_prompt"],
               "system_prompt_len": w["system_prompt_len"], "question_len": w["question_len"],
               "output_len": w["output_len"], "enable_multi_turn_chat": bool(w.get("enable_multi_turn_chat", False)),
               "load_type": w.get("load_type", "constant"), "name": run.key,
               "stages": [{"rate": r, "duration": t} for r, t, _ in run.stages]}
    return scenario_from_dict({"name": "measured-run", "cluster": cluster, "workload": {"inference_perf": profile},
                               "gateway": {"router": "round-robin"}}, f"run {run.key}")


def stage_stats(sim, windows: list[tuple[float, float]]) -> list[dict]:
    """Per arrival window: requests, finished, and the client-side statistics of
    :data:`METRICS` over its finished requests (ms); ``itl_mean_nominal`` as the measured
    runs define it, (E2E mean - TTFT mean) / (output tokens mean - 1)."""
    t = sim.table
    fin = t.outcome == 1  # FINISHED
    ttft = (t.first_token_t - t.arrival) * 1e3
    e2e = (t.finish_t - t.arrival) * 1e3
    out = []
    for k, (lo, hi) in enumerate(windows):  # [lo, hi), the last one closed
        m = (t.arrival >= lo) & ((t.arrival < hi) | ((t.arrival == hi) & (k == len(windows) - 1)))
        f = m & fin
        row = {"requests": int(m.sum()), "finished": int(f.sum())}
        if f.any():
            for name, x in (("ttft", ttft[f]), ("e2e", e2e[f])):
                p90, p99 = np.percentile(x, [90, 99])
                row.update({f"{name}_mean": float(x.mean()), f"{name}_p90": float(p90), f"{name}_p99": float(p99)})
            out_mean = float(t.output[f].mean())
            row["itl_mean_nominal"] = (row["e2e_mean"] - row["ttft_mean"]) / max(out_mean - 1, 1.0)
        else:
            row.update({k: float("nan") for k in METRICS})
        out.append(row)
    return out


def simulate_run(run: MeasuredRun, latency_model: str = "vllm-calibrated", latency_params: dict | None = None,
                 seed: int = 0, max_stage_s: float | None = None) -> dict:
    """Simulate a measured run: ``{"stages": [per-stage stats], "whole": stats}`` (ms).

    ``max_stage_s`` keeps only each stage's first seconds (faster fits; a stage's means
    settle within a minute when the server keeps up).
    """
    sc = run_scenario(run, latency_model, latency_params)
    prof: InferencePerfProfile = sc.profile
    if max_stage_s is not None:
        prof = InferencePerfProfile.from_dict({**prof.to_dict(), "stages": [
            {"rate": r, "duration": min(t, max_stage_s)} for r, t in prof.stages]})
        sc.workload = prof
    sim = sc.simulator(seed)
    sim.run()
    windows = prof.stage_bounds(sim.workload.arrival_s)
    return {"stages": stage_stats(sim, windows), "whole": stage_stats(sim, [(-np.inf, np.inf)])[0]}


def _targets(run: MeasuredRun, metrics) -> list[tuple[int, str, float]]:
    return [(k, m, float(st[m])) for k, (_, _, st) in enumerate(run.stages) for m in metrics
            if m in st and st[m] and np.isfinite(st[m])]


def ape(sim: float, real: float) -> float:
    """Absolute percentage error, %."""
    return abs(sim - real) / abs(real) * 100.0


#: Step-time coefficients of the trained-physics models (a0, a1, a2 delay requests, not steps).
STEP_PARAMS = ("b1a", "b1b", "b2a", "b2b", "b3", "b4", "b5", "b6", "b7")
#: ``calibrate --physical-prior``: what a held-out model cannot identify is priced from the hardware,
#: not fitted: weights and KV read at the GPU's peak HBM bandwidth (b3 = b2b = 1, the roofline), the
#: TP all-reduce at NVLink's (b4 = HBM / NVLink bandwidth, H100: 3.35 TB/s over 450 GB/s a
#: direction; the term is written over HBM bandwidth), the per-request cost through the decode
#: FLOPs only (b6 = 0). The overheads a0, b2a, b5, b7 are fitted, the last three started from the
#: measured decode steps (:func:`decode_start`).
PHYSICAL_PRIOR = {"b2b": 1.0, "b3": 1.0, "b4": get_hardware("H100").hbm_tbps * 1e3 / get_kv_link("nvlink").gbps,
                  "b6": 0.0}
PHYSICAL_PRIOR_FIT = ("a0", "b2a", "b5", "b7")
PHYSICAL_PRIOR_DECODE = ("b2a", "b5", "b7")


def decode_steps(runs: list[MeasuredRun], a1: float, a2: float) -> list[tuple[MeasuredRun, float, float, float, float]]:
    """The measured decode step of every stage: ``(run, rate, n, ctx, step_us)`` with ``n`` the
    concurrency rate x E2E mean (Little's law), ``ctx`` the tokens each sequence holds on average
    (prompt + output / 2) and the step (ITL nominal - a2 - a1 / (output - 1)); stages without
    ``itl_mean_nominal`` or ``e2e_mean`` are skipped.

    Args:
        runs: measured runs.
        a1, a2: the completion and per-token overheads (us) the ITL carries besides the steps.
    """
    out = []
    for run in runs:
        w = run.workload
        length, ctx = float(w["output_len"]), float(w["system_prompt_len"] + w["question_len"]) + w["output_len"] / 2
        for rate, _, st in run.stages:
            if st.get("itl_mean_nominal") and st.get("e2e_mean"):
                step = st["itl_mean_nominal"] * 1e3 - a2 - a1 / max(length - 1, 1.0)
                out.append((run, rate, rate * st["e2e_mean"] * 1e-3, ctx, step))
    return out


def decode_start(runs: list[MeasuredRun], base: str, params: dict, solve: tuple[str, ...]) -> dict:
    """``params`` with the ``solve`` step coefficients solved, by linear least squares, from the
    measured decode steps (:func:`decode_steps`): a starting point for :func:`calibrate` that does
    not depend on the base's overheads (the fit has several minima along the overheads; BLIS's
    126 us fixed cost can lead it into one that prices a held-out model's steps 30% short).

    The model is linear in its step coefficients, so each solved one's column is the step with it
    alone at 1; rows are relative errors, each run weighted equally. A coefficient that solves
    negative (or whose column is zero: the prefill terms, as every row is decode-only) keeps
    ``params``' value, floored at 1e-3 so that its logarithm can be fitted.

    Args:
        runs: measured runs.
        base: the trained-physics kind whose terms price the steps.
        params: every coefficient (the others price the part the solved ones do not).
        solve: the coefficients solved; only those in :data:`STEP_PARAMS` are.
    """
    cols = [p for p in solve if p in STEP_PARAMS]
    zero = {p: 0.0 for p in STEP_PARAMS}
    fixed = {p: v for p, v in params.items() if p in STEP_PARAMS and p not in cols}
    rows, targets = [], []
    steps = decode_steps(runs, params["a1"], params["a2"])
    per_run = {run.key: sum(r.key == run.key for r, *_ in steps) for run, *_ in steps}
    for run, _, n, ctx, step in steps:
        k = math.sqrt(per_run[run.key])
        rows.append([decode_step_us(run, base, {**params, **zero, p: 1.0}, n, ctx) / step / k for p in cols])
        targets.append((step - decode_step_us(run, base, {**params, **zero, **fixed}, n, ctx)) / step / k)
    if not rows or not cols:
        return dict(params)
    A = np.array(rows)
    solved = np.linalg.lstsq(A, np.array(targets), rcond=None)[0]
    use = np.abs(A).sum(axis=0) > 0
    return {**params, **{p: float(max(x if ok and x > 0 else params[p], 1e-3)) for p, x, ok in zip(cols, solved, use)}}


def decode_step_us(run: MeasuredRun, base: str, params: dict, n: float, ctx: float) -> float:
    """Step time (us) of ``n`` decoding sequences of ``ctx`` tokens each under ``params``."""
    from .engine.latency import make_latency_model

    m = make_latency_model(base, run.hardware, run.model, run.tp, **params)
    return float(m.step_time_us(np.zeros(0), np.zeros(0), n, n * ctx))


def calibrate(runs: list[MeasuredRun], base: str = "vllm-calibrated", base_params: dict | None = None,
              fit: tuple[str, ...] = FIT_PARAMS, metrics: tuple[str, ...] = ("ttft_mean", "e2e_mean"),
              iterations: int = 12, max_stage_s: float | None = None, seed: int = 0, huber: float = 0.1,
              from_decode: tuple[str, ...] = (), log=None) -> dict:
    """Fit ``fit`` coefficients of the ``base`` trained-physics model to the per-stage
    ``metrics`` of ``runs``; returns the coefficients (all of the model's, as ``{name: value}``).

    Each coefficient is fitted as the log of its ratio to the base value (so it stays positive);
    residuals are log(sim / measured) per (run, stage, metric), each run
    weighted equally, under a Huber loss (quadratic up to ``huber``, 0.1 = ~10%, linear
    beyond: one run the model cannot explain does not drag every other). A step that does
    not lower the cost is retried with more damping (Levenberg-Marquardt). ``from_decode``: step
    coefficients whose starting values are solved from the measured decode steps
    (:func:`decode_start`) instead of taken from ``base_params``.
    """
    cls = _KINDS.get(base)
    if cls is None or not issubclass(cls, _KINDS["blis-trained-physics"]):
        raise ConfigError(f"calibrate: base={base!r} is invalid; allowed: blis-trained-physics, vllm-calibrated")
    import inspect

    defaults = {p.name: p.default for p in inspect.signature(cls.__init__).parameters.values()
                if p.name in _overridable(cls) and p.name != "integer_us"}
    start = {**defaults, **(base_params or {})}
    bad = [p for p in fit if p not in defaults] + [p for p in from_decode if p not in STEP_PARAMS or p not in fit]
    if bad:
        raise ConfigError(f"calibrate: coefficients {bad} are not known or not fitted; allowed: {', '.join(defaults)}"
                          f" (from_decode: fitted ones of {', '.join(STEP_PARAMS)})")
    if from_decode:
        start = decode_start(runs, base, start, tuple(from_decode))
        if log:
            log("decode start: " + ", ".join(f"{p}={start[p]:.4g}" for p in from_decode))
    ref = {p: (start[p] if start[p] > 0 else 1.0) for p in fit}
    theta = np.array([math.log(start[p] / ref[p]) if start[p] > 0 else 0.0 for p in fit])

    def params_of(th):
        return {**start, **{p: ref[p] * math.exp(x) for p, x in zip(fit, th)}}

    def residuals(th):
        res, weights = [], []
        params = params_of(th)
        for run in runs:
            got = simulate_run(run, base, params, seed=seed, max_stage_s=max_stage_s)["stages"]
            tg = _targets(run, metrics)
            w = 1.0 / math.sqrt(max(len(tg), 1))
            for k, m, real in tg:
                sim = got[k].get(m, float("nan"))
                res.append(math.log(sim / real) if sim > 0 and np.isfinite(sim) else 5.0)
                weights.append(w)
        res = np.array(res)
        big = np.abs(res) > huber  # Huber's pseudo-residual: same loss, least-squares form
        res[big] = np.sign(res[big]) * np.sqrt(2 * huber * np.abs(res[big]) - huber ** 2)
        return np.array(weights) * res

    r = residuals(theta)
    cost = float(r @ r)
    lam = None
    for it in range(iterations):
        h = 0.05  # above the noise of a mean over a few hundred requests
        J = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            th = theta.copy()
            th[j] += h
            J[:, j] = (residuals(th) - r) / h
        JtJ, g = J.T @ J, J.T @ r
        scale = np.diag(JtJ) + 1e-12  # Marquardt: damping scaled per coefficient
        lam = 1e-2 if lam is None else lam
        for _ in range(8):  # Levenberg-Marquardt: shrink the step (raise the damping) until it helps
            step = np.clip(-np.linalg.solve(JtJ + lam * np.diag(scale), g), -1.0, 1.0)  # at most x e
            r_new = residuals(theta + step)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                lam = max(lam / 4, 1e-6)
                break
            lam *= 4
        else:
            break
        theta, r, cost = theta + step, r_new, c_new
        if log:
            log(f"iteration {it + 1}: cost {cost:.6f}, " + ", ".join(f"{p}={v:.4g}" for p, v in params_of(theta).items() if p in fit))
        if np.abs(step).max() < 1e-4:
            break
    return params_of(theta)


def errors(runs: list[MeasuredRun], latency_model: str, params: dict | None = None, seed: int = 0,
           max_stage_s: float | None = None) -> list[dict]:
    """Per run: the simulated whole-run statistics and the absolute percentage error of
    each of :data:`METRICS` against the measured ones."""
    out = []
    for run in runs:
        got = simulate_run(run, latency_model, params, seed=seed, max_stage_s=max_stage_s)
        row = {"key": run.key, "sim": got["whole"], "stages": got["stages"], "ape": {}}
        for m in METRICS:
            real = run.whole.get(m)
            if real and np.isfinite(got["whole"].get(m, float("nan"))):
                row["ape"][m] = ape(got["whole"][m], real)
        out.append(row)
    return out


def write_latency_file(path: str | Path, kind: str, params: dict, report: dict) -> None:
    """A latency-model file (``--latency-model FILE``): kind, coefficients, and the fit's report."""
    atomic_write_text(path, json.dumps({"kind": kind, "params": params, "fit": report}, indent=2, default=float))



# ====================================================================== command line
def start_params(spec: str | None) -> dict:
    """Initial coefficients of a fit: a trained-physics kind's defaults (``blis-trained-physics``,
    ``vllm-calibrated``) or a latency-model file's; None: none (the base's defaults)."""
    import inspect
    from pathlib import Path as _P

    if spec is None:
        return {}
    if spec in _KINDS and issubclass(_KINDS[spec], _KINDS["blis-trained-physics"]):
        return {p.name: p.default for p in inspect.signature(_KINDS[spec].__init__).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "integer_us"}
    if _P(spec).is_file():
        return load_latency_file(spec)[1]
    raise ConfigError(f"--start {spec!r} is invalid; give blis-trained-physics, vllm-calibrated or a latency-model file")


def parse_coefficients(option: str, spec: str | None, allowed) -> dict:
    """``NAME=VALUE,...`` (e.g. ``--set b7=2000,b6=0``) as ``{name: value}``.

    Raises:
        ConfigError: an item without ``=``, a name not in ``allowed`` or a value that is not a
            finite number >= 0; the message names the item.
    """
    out = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        name, sep, value = (x.strip() for x in item.partition("="))
        if not sep or name not in allowed:
            raise invalid(option, item.strip(), f"give NAME=VALUE with NAME one of {', '.join(allowed)}")
        try:
            number = float(value)
        except ValueError:
            raise invalid(f"{option} {name}", value, "it must be a finite number >= 0") from None
        out[name] = check_number(f"{option} {name}", number, ge=0.0)
    return out


def model_of(run: MeasuredRun) -> str:
    """The name of the model a measured run served."""
    return str(run.model.get("name", run.model.get("config")))


def error_rows(rows: list[dict], held: set[str]) -> list[dict]:
    """Per run: its key, whether it was held out of the fit, and its error per metric (%)."""
    return [{"key": r["key"], "held_out": r["key"] in held, **{m: r["ape"].get(m) for m in METRICS}} for r in rows]
