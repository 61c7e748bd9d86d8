"""Train an RL agent on an llmsched environment (CleanRL-style: one readable file).

    python -m agents.train --env llmsched/Routing-v0 --scenario chatbot --algo maskable-ppo \
        --timesteps 100000 --seed 1 --out runs/routing-chatbot-s1
    llmsched-gym train ...            # the same, through the package CLI

What happens, top to bottom (:func:`train`):

1. Hyperparameters come from ``agents/hyperparams/<env>.yaml`` (RL-Zoo style: one
   entry per algorithm with ``n_envs``, ``policy``, ``policy_kwargs``, ``normalize``,
   ``env_kwargs`` and the algorithm's own keywords); command-line values override them.
2. The training environment is the package's *native* vector env
   (``gymnasium.make_vec``) adapted to SB3 with :func:`agents.sb3.to_sb3_vec_env`.
   A curriculum (several scenarios and/or a load range, ``--scenario chatbot,agent
   --load 0.3:0.7``) gives every (scenario, load) point its own native vector env; they
   are concatenated (:class:`ConcatVecEnv`) so one rollout mixes them.
3. ``VecMonitor`` + ``VecNormalize`` (statistics saved next to the model as
   ``vecnormalize.pkl``).
4. Callbacks: ``EvalCallback`` (``MaskableEvalCallback`` for MaskablePPO) on *held-out
   workload seeds* (``EVAL_SEED_BASE + k``; training draws its workload seeds from a
   31-bit generator seeded by ``--seed``), writing ``eval/evaluations.npz`` (the learning
   curve) and ``best/best_model.zip`` with ``best/vecnormalize.pkl``, the statistics of
   the moment that model was saved (:class:`agents.vec.SaveBestStats`). The best model
   is the one with the best *harness metric* (``--select METRIC:CLASS``, default per
   environment, :mod:`agents.selection`), each evaluation's metrics in
   ``eval/evaluations_metrics.json``;
   ``CheckpointCallback`` (``checkpoints/model_N_steps.zip`` with
   ``model_vecnormalize_N_steps.pkl``);
   TensorBoard logs in ``tb/``.
5. Output directory: ``model.zip``, ``vecnormalize.pkl``, ``agent.json`` (environment,
   scenario, rates, hyperparameters, seed, wall time, the command): everything
   ``agents.policy`` (``--policies agent:DIR``) needs to act in the simulator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel

import llmsched_gym  # noqa: F401  (registers the environments)
from agents.selection import default_select, eval_callback_class, parse_select
from llmsched_gym.cli import OneLineParser
from llmsched_gym.envs.core import make_setup
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import make_scenario
from llmsched_gym.validation import (
    STRICT,
    Duration,
    Instances,
    Seed,
    check_name,
    check_output_dir,
    check_typed,
    describe_type,
    ranged,
    signature_params,
    type_ok,
    validate_model,
)

ENV_FILES = {"llmsched/Routing-v0": "routing", "llmsched/FlowControl-v0": "flow_control",
             "llmsched/Admission-v0": "admission", "llmsched/Gateway-v0": "gateway"}
ALGOS = ("ppo", "maskable-ppo", "sac", "bc", "dagger", "cmaes")  # cmaes: agents.es (no SB3 model)
#: Imitation of the lookahead planner (agents/imitation): a MaskablePPO model with the scorer policy.
IMITATION = ("bc", "dagger")
HYPERPARAMS_DIR = Path(__file__).resolve().parent / "hyperparams"
#: first workload seed of the held-out evaluation episodes (EvalCallback)
EVAL_SEED_BASE = 1_000_000


# ====================================================================== hyperparameters
def load_hyperparams(env_id: str, algo: str, path: "str | os.PathLike | None" = None) -> dict:
    """The YAML entry for ``algo`` in the environment's hyperparameter file."""
    import yaml

    if env_id not in ENV_FILES:
        raise ConfigError(f"--env {env_id!r} is unknown; choose one of {', '.join(ENV_FILES)}")
    if algo not in ALGOS:
        raise ConfigError(f"--algo {algo!r} is unknown; choose one of {', '.join(ALGOS)}")
    path = Path(path) if path else HYPERPARAMS_DIR / f"{ENV_FILES[env_id]}.yaml"
    if not path.is_file():
        raise ConfigError(f"hyperparameter file {path} not found")
    data = yaml.safe_load(path.read_text()) or {}
    if algo not in data:
        raise ConfigError(f"{path}: no entry for algorithm {algo!r} (entries: {', '.join(data)})")
    return dict(data[algo])


#: Keys of a hyperparameter entry that the training script reads itself (the rest go to
#: the algorithm's constructor).
SCRIPT_KEYS = ("policy", "policy_kwargs", "n_envs", "normalize", "env_kwargs", "eval_freq", "n_eval_episodes",
               "eval_duration_s", "checkpoint_freq")
#: Constructor keywords the script sets itself (not hyperparameters).
FIXED_KEYS = ("policy", "env", "seed", "verbose", "tensorboard_log", "device", "_init_setup_model")


#: Ranges of the numeric hyperparameters (a schedule, a tuple or "auto" is the library's
#: to check), so a bad value is one line here and not torch's or numpy's traceback.
_FRACTION = ranged(float, ge=0, le=1)
HYPERPARAM_RANGES = {
    "learning_rate": _FRACTION,  # 0: a frozen policy (the residual's starting point)
    "n_steps": ranged(int, ge=1, le=2**20), "batch_size": ranged(int, ge=1, le=2**20),
    "n_epochs": ranged(int, ge=1, le=1000), "gamma": _FRACTION, "gae_lambda": _FRACTION,
    "clip_range": ranged(float, gt=0, le=10), "clip_range_vf": ranged(float, gt=0, le=10),
    "ent_coef": ranged(float, ge=0, le=100), "vf_coef": ranged(float, ge=0, le=100),
    "max_grad_norm": ranged(float, gt=0, le=1e6), "target_kl": ranged(float, gt=0, le=100),
    "buffer_size": ranged(int, ge=1, le=10**8), "learning_starts": ranged(int, ge=0, le=10**9), "tau": _FRACTION,
    "train_freq": ranged(int, ge=1), "gradient_steps": ranged(int, ge=-1, le=10**4),
    "target_update_interval": ranged(int, ge=1), "sde_sample_freq": ranged(int, ge=-1),
    "stats_window_size": ranged(int, ge=1, le=10**6), "n_envs": ranged(int, ge=1, le=256),
    "eval_freq": ranged(int, ge=1), "n_eval_episodes": ranged(int, ge=1, le=10**4),
    "eval_duration_s": ranged(float, gt=0, le=86400), "checkpoint_freq": ranged(int, ge=1),
}
EnvCount = HYPERPARAM_RANGES["n_envs"]
EvalEpisodes = HYPERPARAM_RANGES["n_eval_episodes"]


def check_hyperparams(algo: str, hp: dict, overrides: dict | None = None) -> None:
    """Every hyperparameter name against the algorithm's constructor (and the script's own
    keys), its value against the keyword's annotation and a number against its range
    (:data:`HYPERPARAM_RANGES`), before anything is built."""
    import numbers

    params = {name: tp for name, tp, _ in signature_params(_algo_class(algo)) if name not in FIXED_KEYS}
    allowed = sorted(set(params) | set(SCRIPT_KEYS))
    overrides = overrides or {}
    for k, v in hp.items():
        where = f"--set {k}={overrides[k]!r}" if k in overrides else f"hyperparameter {k}={v!r}"
        if k not in allowed:
            raise ConfigError(f"{where}: {k!r} is not a {algo} hyperparameter; allowed: {', '.join(allowed)}")
        if k in params and k not in SCRIPT_KEYS and not type_ok(v, params[k])[0]:
            raise ConfigError(f"{where} is invalid; it must be {describe_type(params[k])}")
        if k in HYPERPARAM_RANGES and isinstance(v, numbers.Real) and not isinstance(v, bool):
            try:
                check_typed(k, v, HYPERPARAM_RANGES[k])
            except ConfigError as e:
                raise ConfigError(f"{where} is invalid; {str(e).split('; ', 1)[1]}") from None


def rounded_timesteps(algo: str, timesteps: int, n_envs: int, hp: dict) -> tuple[int, str]:
    """The steps ``learn`` will really take (whole PPO rollouts of ``n_steps x n_envs``,
    whole SAC vector steps), and a note when that is more than asked."""
    if algo in ("ppo", "maskable-ppo"):
        unit = int(hp.get("n_steps", 2048)) * n_envs
        what = f"rollouts of {unit:,} steps (n_steps {int(hp.get('n_steps', 2048))} x {n_envs} envs)"
    else:
        unit, what = n_envs, f"vector steps of {n_envs} envs"
    total = -(-int(timesteps) // unit) * unit
    note = f"--timesteps {timesteps:,} rounded up to {total:,}: whole {what}" if total != timesteps else ""
    return total, note


#: ``--policy``: policy classes that start at the strongest baseline (residual learning).
POLICY_VARIANTS = {
    ("llmsched/Routing-v0", "maskable-ppo", "residual"): "agents.networks:MaskableResidualScorerPolicy",
    ("llmsched/Routing-v0", "ppo", "residual"): "agents.networks:ResidualScorerPolicy",
    ("llmsched/FlowControl-v0", "ppo", "residual"): "agents.networks:ResidualSoftReflectivePolicy",
    ("llmsched/Gateway-v0", "ppo", "residual"): "agents.networks:ResidualGatewayPolicy",
}
#: further hyperparameters of a variant (``--set`` still overrides them). Routing: the
#: base gain 10 makes the *stochastic* policy follow LMetric closely while exploring
#: (sampling from the plain softmax of LMetric's logits, gain 1, is ~40% worse on chatbot
#: TTFT; gain 10 ~4%); the deterministic policy is LMetric at any gain. FlowControl: the
#: Gaussian's mean starts at 0.5 (the soft-reflective ceiling's own ramp and period);
#: log-std -2 (std 0.135: ramp +-0.27, period scale times or divided by 1.45 per standard
#: deviation). Its ``env_kwargs`` are merged over the YAML's (docs/agents.md, "FlowControl
#: residual"): one decision per second (the engine runs the duty cycle every 1 ms; ramp and
#: period are slow parameters), full 180 s episodes (the sheddable class's cost of a longer
#: period only shows late), critical weighted 150x (at 30x the reward's best constant
#: parameters are the published ones) and gamma 0.95 (a 20 s horizon: an action's effect on
#: waiting; 0.995 spans the episode and only adds variance).
POLICY_VARIANT_HYPERPARAMS = {
    ("llmsched/Routing-v0", "residual"): {
        "policy_kwargs": "dict(features_extractor_kwargs=dict(hidden=64, critic_hidden=64, base_gain=10.0))"},
    ("llmsched/FlowControl-v0", "residual"): {
        "policy_kwargs": "dict(net_arch=[64, 64], log_std_init=-2.0, action_bias=0.5)", "gamma": 0.95,
        "eval_duration_s": 180.0,
        "env_kwargs": {"control_interval": 1.0, "duration_s": 180.0, "priority_weights": {0: 150.0, -1: 1.0}}},
    ("llmsched/Gateway-v0", "residual"): {
        "policy_kwargs": "dict(net_arch=[64, 64], log_std_init=-2.0, action_bias=0.5)"},
}
#: environment keywords a variant needs (merged into the YAML's ``env_kwargs``; a
#: conflicting value is an error). FlowControl residual: the action sets the engine's
#: soft-reflective ceiling's (ramp, period scale) instead of fixed ceilings. (Gateway's residual
#: starts at the centre action of whatever modes env_kwargs choose: see ResidualGatewayPolicy.)
POLICY_VARIANT_ENV_KWARGS = {
    ("llmsched/FlowControl-v0", "residual"): {"action": "soft-reflective"},
}


def policy_variant_hyperparams(env_id: str, algo: str, variant: str) -> dict:
    """The hyperparameter changes of ``--policy VARIANT`` (``default``: none)."""
    if variant in ("default", ""):
        return {}
    cls = POLICY_VARIANTS.get((env_id, algo, variant))
    if cls is None:
        have = sorted({v for (e, a, v) in POLICY_VARIANTS if e == env_id and a == algo})
        algos = sorted({a for (e, a, v) in POLICY_VARIANTS if e == env_id and v == variant})
        hint = f" (it exists for {', '.join(algos)})" if algos else ""
        raise ConfigError(f"--policy {variant!r} is not available for {env_id} with {algo}{hint}; "
                          f"choose default{''.join(', ' + h for h in have)}")
    return {"policy": cls, **POLICY_VARIANT_HYPERPARAMS.get((env_id, variant), {})}


def policy_variant_env_kwargs(env_id: str, variant: "str | None", env_kwargs: dict) -> dict:
    """``env_kwargs`` with the keywords ``--policy VARIANT`` needs (one clear error when
    ``env_kwargs`` sets one of them differently)."""
    need = POLICY_VARIANT_ENV_KWARGS.get((env_id, variant or "default"), {})
    out = dict(env_kwargs)
    for k, v in need.items():
        if k in out and out[k] != v:
            raise ConfigError(f"--policy {variant} on {env_id} needs env_kwargs {k}={v!r}, "
                              f"but the hyperparameters set {k}={out[k]!r}")
        out[k] = v
    return out


# ====================================================================== curriculum
def parse_rates(text: "str | None") -> list[float]:
    """``"0.5"`` -> [0.5]; ``"0.3,0.5"`` -> [0.3, 0.5]; ``"0.3:0.7"`` -> 5 points from 0.3 to
    0.7; ``"0.3:0.7:3"`` -> 3 points."""
    if text is None or str(text).strip() == "":
        return []
    out: list[float] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if ":" in part:
                bits = part.split(":")
                lo, hi = float(bits[0]), float(bits[1])
                n = int(bits[2]) if len(bits) > 2 else 5
                if n < 1 or hi < lo:
                    raise ValueError
                out += list(np.linspace(lo, hi, n)) if n > 1 else [lo]
            else:
                out.append(float(part))
        except (ValueError, IndexError):
            raise ConfigError(f"rate {part!r} is invalid; use a number, a comma list or LO:HI[:N]") from None
    if any(not v > 0 for v in out):
        raise ConfigError(f"rates must be > 0, got {text!r}")
    return [float(v) for v in out]


def curriculum(scenarios: list[str], rate_kind: str | None, rates: list[float]) -> list[tuple[str, dict]]:
    """Every (scenario, {rate_kind: rate}) point of the training mixture."""
    pts = []
    for sc in scenarios:
        for r in (rates or [None]):
            pts.append((sc, {} if r is None else {rate_kind: r}))
    return pts


# ====================================================================== environments
def make_venv(env_id: str, points: list[tuple[str, dict]], n_envs: int, env_kwargs: dict, seed: int):
    """A SB3 VecEnv over native vector envs, ``n_envs`` sub-envs spread over ``points``."""
    import gymnasium as gym

    from agents.sb3 import to_sb3_vec_env

    n_envs = max(n_envs, len(points))
    counts = [n_envs // len(points) + (1 if k < n_envs % len(points) else 0) for k in range(len(points))]
    parts = []
    offset = 0
    late = {k: env_kwargs[k] for k in ("duration_s", "num_requests", "horizon_s") if k in env_kwargs}
    early = {k: v for k, v in env_kwargs.items() if k in ("instances", "hardware", "model", "latency_model",
                                                          "kv_blocks", "scrape_interval_s")}
    for (scenario, rate), n in zip(points, counts):
        if rate and late:
            # As the evaluation harness does: a load refers to the unshortened scenario's
            # capacity (and a shortened window does not trigger a new capacity measurement).
            rate = {"qps": make_scenario(scenario, **rate, **early).target_qps()}
        venv = to_sb3_vec_env(gym.make_vec(env_id, num_envs=n, scenario=scenario, **rate, **env_kwargs))
        venv.seed(seed + offset)
        offset += n
        parts.append(venv)
    from agents.vec import ConcatVecEnv

    return parts[0] if len(parts) == 1 else ConcatVecEnv(parts)


# ====================================================================== training
def _algo_class(algo: str):
    if algo in ("maskable-ppo",) + IMITATION:
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO
    from stable_baselines3 import SAC

    return SAC


def _policy_ref(name: str):
    """A policy name from the YAML: an SB3 alias (``MultiInputPolicy``) or ``module:Class``."""
    if ":" in name:
        import importlib

        mod, _, cls = name.partition(":")
        return getattr(importlib.import_module(mod), cls)
    return name


def _eval_points(points, eval_scenarios, rate_kind, eval_rates):
    if not eval_scenarios and not eval_rates:
        return points
    scs = eval_scenarios or sorted({p[0] for p in points})
    rates = eval_rates or sorted({v for _, r in points for v in r.values()})
    return curriculum(scs, rate_kind, rates)


def train(env_id: str = "llmsched/Routing-v0", scenarios=("chatbot",), algo: str = "maskable-ppo",
          timesteps: int = 100_000, seed: int = 0, out: "str | os.PathLike" = "runs/agent", *,
          rate_kind: str | None = None, rates=(), eval_scenarios=(), eval_rates=(), instances: int | None = None,
          duration_s: float | None = None, n_envs: int | None = None, hyperparams: "str | None" = None,
          overrides: dict | None = None, eval_freq: int | None = None, eval_episodes: int | None = None,
          checkpoint_freq: int | None = None, progress: bool = True, verbose: int = 0, command: str | None = None,
          torch_threads: int | None = 1, policy_variant: str | None = None, select: str | None = None,
          env_overrides: dict | None = None) -> dict:
    """Train one agent; returns the run's metadata (also written to ``out/agent.json``).

    ``select``: how ``best/`` is chosen, ``METRIC[:CLASS]`` of the harness or ``reward``
    (default :data:`agents.selection.DEFAULT_SELECT` of the environment). ``env_overrides``:
    environment keywords set over the YAML's ``env_kwargs`` (``--router``, ``--flow-control``,
    ``--admission``: the baselines of the decisions the agent does not take, or Gateway-v0's
    base combination)."""
    import torch
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    if torch_threads:
        torch.set_num_threads(int(torch_threads))
    if timesteps < 1:
        raise ConfigError(f"--timesteps={timesteps} is invalid; it must be >= 1")
    if algo == "maskable-ppo" and env_id != "llmsched/Routing-v0":
        raise ConfigError("maskable-ppo needs a discrete action space: use it with llmsched/Routing-v0")
    if algo == "sac" and env_id == "llmsched/Routing-v0":
        raise ConfigError("sac needs a continuous action space: use ppo or maskable-ppo with llmsched/Routing-v0")
    hp = load_hyperparams(env_id, algo, hyperparams)

    selection = parse_select(select if select is not None else default_select(env_id))
    if policy_variant:
        variant = policy_variant_hyperparams(env_id, algo, policy_variant)
        if "env_kwargs" in variant:  # a variant changes some environment keywords, not all
            variant["env_kwargs"] = {**dict(hp.get("env_kwargs") or {}), **variant["env_kwargs"]}
        hp.update(variant)
    hp.update(overrides or {})
    check_hyperparams(algo, hp, overrides)

    out = check_output_dir("out", out)  # before training: a bad path must not cost the run

    env_kwargs = policy_variant_env_kwargs(env_id, policy_variant,
                                           {**dict(hp.pop("env_kwargs", {}) or {}), **(env_overrides or {})})
    if instances is not None:
        env_kwargs["instances"] = int(instances)
    if duration_s is not None:
        env_kwargs["duration_s"] = float(duration_s)
    n = int(n_envs or hp.pop("n_envs", 8))
    hp.pop("n_envs", None)
    normalize = dict(hp.pop("normalize", {}) or {})
    policy = _policy_ref(hp.pop("policy", "MultiInputPolicy"))
    policy_kwargs = hp.pop("policy_kwargs", None) or {}
    if isinstance(policy_kwargs, str):
        policy_kwargs = eval(policy_kwargs, {"dict": dict})  # RL-Zoo convention: "dict(net_arch=[64, 64])"
    if env_id == "llmsched/Gateway-v0" and policy_variant == "residual" and "action_centre" not in policy_kwargs:
        # the residual starts at the environment's centre action (its base combination)
        policy_kwargs["action_centre"] = make_setup("gateway", scenario=scenarios[0], **env_kwargs).centre.tolist()
    e_freq = int(eval_freq or hp.pop("eval_freq", 20_000))
    e_eps = int(eval_episodes or hp.pop("n_eval_episodes", 4))
    e_dur = hp.pop("eval_duration_s", None)
    hp.pop("eval_freq", None)
    hp.pop("n_eval_episodes", None)
    c_freq = int(checkpoint_freq or hp.pop("checkpoint_freq", 50_000))
    hp.pop("checkpoint_freq", None)

    scenarios = list(scenarios)
    rates = list(rates)
    if rates and rate_kind is None:
        raise ConfigError("rates given without a rate kind (qps, load or paper_qps)")
    points = curriculum(scenarios, rate_kind, rates)
    epoints = _eval_points(points, list(eval_scenarios), rate_kind, list(eval_rates))

    venv = VecMonitor(make_venv(env_id, points, n, env_kwargs, seed))
    n = venv.num_envs  # at least one env per curriculum point: rollouts and callback periods count these
    venv = VecNormalize(venv, gamma=hp.get("gamma", 0.99), **normalize)
    ekw = dict(env_kwargs)
    if e_dur is not None:
        ekw["duration_s"] = float(e_dur)
    n_eval_envs = max(len(epoints), min(e_eps, 8))
    from agents.vec import SaveBestStats, fixed_seed_venv

    eval_venv = VecMonitor(fixed_seed_venv(make_venv(env_id, epoints, n_eval_envs, ekw, seed + 10_000),
                                            EVAL_SEED_BASE))
    eval_venv = VecNormalize(eval_venv, training=False, norm_reward=False, gamma=hp.get("gamma", 0.99),
                             **{k: v for k, v in normalize.items() if k != "norm_reward"})
    out.mkdir(parents=True, exist_ok=True)  # only now: a bad scenario or rate leaves nothing behind

    Algo = _algo_class(algo)
    try:
        model = Algo(policy, venv, seed=seed, verbose=verbose, tensorboard_log=str(out / "tb"),
                     policy_kwargs=policy_kwargs, device="cpu", **hp)
    except (ValueError, AssertionError, TypeError) as e:  # a combination the library refuses
        raise ConfigError(f"{algo}: stable-baselines3 refused the hyperparameters "
                          f"({' '.join(str(e).split()) or type(e).__name__})") from None
    EvalCB = eval_callback_class(maskable=algo == "maskable-ppo")
    per_env = max(1, e_freq // n)  # callbacks count calls (one per vector step)
    eval_cb = EvalCB(eval_venv, n_eval_episodes=max(e_eps, n_eval_envs), eval_freq=per_env,
                     log_path=str(out / "eval"), best_model_save_path=str(out / "best"), deterministic=True,
                     verbose=verbose, callback_on_new_best=SaveBestStats(out / "best"), select=selection,
                     evaluate_start=policy_variant == "residual")
    ckpt = CheckpointCallback(save_freq=max(1, c_freq // n), save_path=str(out / "checkpoints"),
                              name_prefix="model", save_vecnormalize=True)
    # learn() runs whole rollouts: ask for what it will run, so the progress bar's total is right.
    steps, note = rounded_timesteps(algo, int(timesteps), n, hp)
    if note and verbose >= 0:
        print(note)
    meta = {
        "env_id": env_id, "algo": algo, "seed": seed, "timesteps": steps, "timesteps_requested": int(timesteps),
        "n_envs": n,
        "scenarios": scenarios, "rate_kind": rate_kind, "rates": rates,
        "eval_points": [[s, r] for s, r in epoints], "eval_workload_seeds_from": EVAL_SEED_BASE,
        "eval_env_kwargs": ekw, "eval_episodes": max(e_eps, n_eval_envs),
        "env_kwargs": env_kwargs, "normalize": normalize, "hyperparams": {k: v for k, v in hp.items()},
        "policy": policy if isinstance(policy, str) else f"{policy.__module__}:{policy.__qualname__}",
        "policy_kwargs": {k: repr(v) for k, v in policy_kwargs.items()},
        "wall_seconds": None, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "command": command or " ".join(sys.argv), "complete": False, "policy_variant": policy_variant or "default",
        "select": selection.text, "select_higher_is_better": selection.higher_is_better,
    }
    # Written before training too, so the checkpoints of an interrupted run load (agent:OUT/checkpoints/...).
    (out / "agent.json").write_text(json.dumps(meta, indent=1, default=str))
    t0 = time.time()
    model.learn(total_timesteps=steps, callback=CallbackList([eval_cb, ckpt]), progress_bar=progress,
                tb_log_name=f"{algo}_s{seed}")
    wall = time.time() - t0
    model.save(out / "model.zip")
    venv.save(str(out / "vecnormalize.pkl"))
    # best/vecnormalize.pkl was written by SaveBestStats when best_model.zip was (the statistics the
    # held-out evaluation of that model used), not here: the final statistics belong to the final model.
    meta.update(wall_seconds=round(wall, 1), complete=True,
                best_mean_reward=float(eval_cb.best_mean_reward) if np.isfinite(eval_cb.best_mean_reward) else None,
                best_metric=eval_cb.best_metric())
    (out / "agent.json").write_text(json.dumps(meta, indent=1, default=str))
    venv.close()
    eval_venv.close()
    return meta


# ====================================================================== command line
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="llmsched/Routing-v0", choices=list(ENV_FILES), help="environment id")
    p.add_argument("--scenario", default=None,
                   help="scenario(s), comma-separated for a training mixture (default: chatbot for Routing, "
                        "codegen otherwise)")
    p.add_argument("--algo", default=None, choices=ALGOS,
                   help="algorithm (default: maskable-ppo for Routing, sac otherwise; ppo with --policy residual); "
                        "cmaes: CMA-ES over a residual of the best heuristic on paired seeds (agents/es)")
    p.add_argument("--policy", default=None, choices=("default", "residual"),
                   help="policy class: default (the YAML's) or residual (Routing: LMetric's logits plus a learned "
                        "correction that starts at zero, so training starts at LMetric; FlowControl with ppo: "
                        "action=\"soft-reflective\", a learned adjustment of the soft-reflective ceiling's ramp "
                        "and period that starts at the published ceiling; Gateway with ppo: a learned adjustment "
                        "that starts exactly at the environment's centre action, its base combination)")
    for flag, role in (("--router", "routing"), ("--flow-control", "usage-limit"), ("--admission", "admission")):
        p.add_argument(flag, help=f"the {role} policy of the environment (a spec such as lmetric or "
                                  "probabilistic:k=30): the baseline of a decision the agent does not take, or "
                                  "Gateway-v0's base policy")
    p.add_argument("--env-set", action="append", default=[], metavar="KEY=VALUE",
                   help="set one environment keyword over the YAML's env_kwargs (YAML value), e.g. "
                        "--env-set flow_action=none (repeatable)")
    p.add_argument("--teacher", metavar="SPEC",
                   help="--algo bc|dagger: the lookahead planner to imitate, e.g. "
                        "'lookahead:mode=mpc,samples=2,horizon_s=1,base=preble' (or mode=oracle)")
    p.add_argument("--timesteps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="output directory (default runs/<env>-<scenario>-<algo>-s<seed>)")
    p.add_argument("--force", action="store_true", help="train into an --out that holds an earlier run's files")
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--qps", help="request rate(s): a number, a comma list or a range LO:HI[:N]")
    rate.add_argument("--load", help="fraction(s) of measured capacity: 0.5, 0.3,0.5 or 0.3:0.7[:N]")
    rate.add_argument("--paper-qps", help="published QPS point(s) (codegen, chat, reasoning)")
    p.add_argument("--eval-scenario", help="held-out evaluation scenario(s) for EvalCallback (default: training's)")
    p.add_argument("--eval-rates", help="held-out evaluation rate(s), same kind as the training rates")
    p.add_argument("--instances", type=int, help="cluster size override for training")
    p.add_argument("--duration", type=float, help="workload arrival window (s) per episode (shorter episodes)")
    p.add_argument("--n-envs", type=int, help="parallel simulated clusters (default from the YAML)")
    p.add_argument("--hyperparams", help="YAML file (default agents/hyperparams/<env>.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one hyperparameter, e.g. --set learning_rate=1e-3 (repeatable)")
    p.add_argument("--eval-freq", type=int, help="evaluate every N environment steps")
    p.add_argument("--eval-episodes", type=int, help="held-out evaluation episodes")
    p.add_argument("--select", metavar="METRIC[:CLASS]",
                   help="how best/ is chosen: a harness metric of the held-out episodes (median over them), e.g. "
                        "ttft_mean:all, ttft_p99:critical, slo_attainment:critical (lower is better for latencies, "
                        "higher for slo_attainment/goodput_rps/throughput_rps), or reward (SB3's mean reward); "
                        "default ttft_mean:all for Routing, ttft_p99:critical for FlowControl, "
                        "slo_attainment:all for Admission and Gateway")
    es = p.add_argument_group("--algo cmaes (evolution strategies on paired seeds, agents/es)")
    es.add_argument("--generations", type=int, help="CMA-ES generations (default 20)")
    es.add_argument("--popsize", type=int, help="candidates per generation (default 8; at least 2)")
    es.add_argument("--seeds-per-gen", type=int,
                    help="workload seeds per generation, run by every candidate and the heuristic (default 4)")
    es.add_argument("--sigma", type=float, help="initial CMA-ES step size (default 0.3)")
    es.add_argument("--train-seeds", help="pool the generations draw their seeds from (default 0:79)")
    es.add_argument("--select-seeds", help="seeds of the final selection (default 80:99)")
    es.add_argument("--workers", type=int, help="evaluation workers the population is split over (default 1)")
    es.add_argument("--backend", choices=("local", "ray"),
                    help="evaluation backend of --workers: local (process pool) or ray")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--verbose", type=int, default=0)


def _set_overrides(items: list[str]) -> dict:
    import yaml

    out = {}
    for it in items:
        k, eq, v = it.partition("=")
        if not eq or not k.strip():
            raise ConfigError(f"--set {it!r}: expected KEY=VALUE")
        try:
            value = yaml.safe_load(v)
        except yaml.YAMLError:
            raise ConfigError(f"--set {it!r}: the value is not valid YAML") from None
        if isinstance(value, str):  # YAML reads 1e-3 as a string
            try:
                value = float(value)
            except ValueError:
                pass
        out[k.strip()] = value
    return out


class TrainFlags(BaseModel):
    """The numeric flags of ``train`` and what they allow (a flag sets the field its ``dest`` names)."""

    model_config = STRICT
    timesteps: ranged(int, ge=1, le=10**10) | None = None
    seed: Seed | None = None
    instances: Instances | None = None
    duration: Duration | None = None
    n_envs: EnvCount | None = None
    eval_freq: ranged(int, ge=1) | None = None
    eval_episodes: EvalEpisodes | None = None
    verbose: ranged(int, ge=0, le=2) | None = None


def check_args(args) -> None:
    """The flags' values (one clear error before anything is built)."""
    values = {k: getattr(args, k, None) for k in TrainFlags.model_fields}
    validate_model(TrainFlags, {k: v for k, v in values.items() if v is not None},
                   names={k: "--" + k.replace("_", "-") for k in values})
    for flag in ("--scenario", "--eval-scenario", "--hyperparams", "--qps", "--load", "--paper-qps", "--eval-rates"):
        check_name(flag, getattr(args, flag[2:].replace("-", "_"), None), none_ok=True, what="a value")
    if args.out is not None:
        check_output_dir("--out", args.out)
    if args.select is not None:
        parse_select(args.select)


ES_FLAGS = ("generations", "popsize", "seeds_per_gen", "sigma", "train_seeds", "select_seeds", "workers", "backend")


def run_es_from_args(args) -> dict:
    """``--algo cmaes``: CMA-ES over a residual policy (:mod:`agents.es.search`)."""
    from agents.es.search import train_es

    scenario = args.scenario or ("chatbot" if args.env == "llmsched/Routing-v0" else "codegen")
    kind, text = next(((k, getattr(args, k)) for k in ("qps", "load", "paper_qps") if getattr(args, k)), (None, None))
    rates = parse_rates(text)
    if len(rates) > 1 or "," in scenario:
        raise ConfigError("--algo cmaes trains on one scenario and one rate (no curriculum)")
    out = args.out or f"runs/{ENV_FILES[args.env]}-{scenario}-cmaes-s{args.seed}"
    check_output_dir("--out", out, force=args.force)
    env_kwargs = {**{k: getattr(args, k) for k in ("router", "flow_control", "admission")
                     if getattr(args, k) is not None}, **_set_overrides(args.env_set)}
    if args.instances is not None:
        env_kwargs["instances"] = args.instances
    if args.duration is not None:
        env_kwargs["duration_s"] = args.duration
    settings = {k: getattr(args, k) for k in ("generations", "popsize", "seeds_per_gen", "sigma", "workers", "seed")
                if getattr(args, k) is not None}
    rec = train_es(args.env, scenario, {kind: rates[0]} if rates else {}, env_kwargs, settings, out,
                   train_seeds=args.train_seeds or "0:79", select_seeds=args.select_seeds or "80:99",
                   backend=args.backend or "local", command="llmsched-gym train " + " ".join(sys.argv[2:])
                   if sys.argv[1:2] == ["train"] else "python -m agents.train " + " ".join(sys.argv[1:]))
    print(f"trained cmaes on {args.env} ({scenario}) in {rec['wall_seconds']:.0f} s, {rec['env_steps']:,} env steps "
          f"-> {out}/agent.json ({rec['chosen']}); evaluate with --policies 'agent:{out}'")
    return rec


def run_from_args(args) -> dict:
    check_args(args)
    if args.algo == "cmaes":
        return run_es_from_args(args)
    given = [f"--{k.replace('_', '-')}" for k in ES_FLAGS if getattr(args, k, None) is not None]
    if given:
        raise ConfigError(f"{', '.join(given)} applies to --algo cmaes only")
    env_id = args.env
    algo = args.algo or ("maskable-ppo" if env_id == "llmsched/Routing-v0"
                         else "ppo" if args.policy == "residual" else "sac")
    scen = args.scenario or ("chatbot" if env_id == "llmsched/Routing-v0" else "codegen")
    scenarios = [s.strip() for s in scen.split(",") if s.strip()]
    kind, text = next(((k, getattr(args, k)) for k in ("qps", "load", "paper_qps") if getattr(args, k)), (None, None))
    rates = parse_rates(text)
    eval_rates = parse_rates(args.eval_rates)
    if eval_rates and kind is None:
        raise ConfigError("--eval-rates needs a training rate kind (--qps, --load or --paper-qps)")
    out = args.out or f"runs/{ENV_FILES[env_id]}-{'+'.join(scenarios)}-{algo}-s{args.seed}"
    command = (("llmsched-gym train " + " ".join(sys.argv[2:])) if sys.argv[1:2] == ["train"]
               else "python -m agents.train " + " ".join(sys.argv[1:]))
    if algo in IMITATION or args.teacher is not None:
        from agents.imitation.run import imitation_from_args

        return imitation_from_args(args, algo, scenarios, kind, rates, out, command)

    check_output_dir("--out", out, force=args.force)  # an earlier run's model is not replaced silently
    meta = train(env_id, scenarios, algo, args.timesteps, args.seed, out, rate_kind=kind, rates=rates,
                 eval_scenarios=[s for s in (args.eval_scenario or "").split(",") if s], eval_rates=eval_rates,
                 instances=args.instances, duration_s=args.duration, n_envs=args.n_envs,
                 hyperparams=args.hyperparams, overrides=_set_overrides(args.set), eval_freq=args.eval_freq,
                 eval_episodes=args.eval_episodes, progress=not args.no_progress, verbose=args.verbose,
                 policy_variant=args.policy, select=args.select,
                 env_overrides={**{k: getattr(args, k) for k in ("router", "flow_control", "admission")
                                   if getattr(args, k) is not None}, **_set_overrides(args.env_set)},
                 command=command)
    print(f"trained {algo} on {env_id} ({', '.join(scenarios)}) in {meta['wall_seconds']:.0f} s -> {out}/model.zip "
          f"(+ vecnormalize.pkl, agent.json); evaluate with --policies 'agent:{out}'")
    return meta


def main(argv=None) -> int:
    p = OneLineParser(prog="python -m agents.train", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)

    try:
        run_from_args(args)
    except ConfigError as e:
        print(f"agents.train: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
