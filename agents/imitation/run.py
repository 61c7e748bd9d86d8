"""Imitation of the lookahead planner into the Routing scorer: ``llmsched-gym train --algo bc``
(behaviour cloning) or ``--algo dagger`` (then DAgger rounds on the student's own states).

1. A Routing-v0 native vector env of ``n_envs`` clusters; the teacher
   (:class:`agents.imitation.labeller.RoutingLabeller`, a ``lookahead:`` spec) labels every
   decision of every cluster in one batched call per step.
2. Round 0 (``bc``): the teacher acts; ``episodes`` batches of ``n_envs`` episodes are
   labelled; the scorer is fitted by cross-entropy (:func:`agents.imitation.fit.fit`).
3. DAgger rounds 1..R: the student acts, the teacher's label replaces its action with
   probability ``beta0 x decay^r``; every state visited is labelled, added to the data, and
   the scorer is fitted again (from where it stood) on all of it.

Workload seeds come from the declared training range only (``agents/declared_seeds.yaml``:
0-99), drawn without repetition by ``seed``; 10% of the episodes (at least one batch's
worth of rows, whole episodes) are held out to report the accuracy on unseen states.

Output (``out``): ``model.zip`` (a MaskablePPO with the scorer policy: it loads as
``agent:OUT`` in ``compare`` like the PPO agents), ``labels.npz`` (every labelled state, to
refit without labelling again) and ``agent.json`` (the teacher, its base heuristic, data sizes, rounds, the
workload seeds used, accuracies, labels per second, wall time, the command).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from agents.declared import training_seeds
from agents.imitation.collect import Dataset, rollout
from agents.imitation.fit import accuracy, act, fit
from agents.imitation.labeller import RoutingLabeller
from llmsched_gym.errors import ConfigError
from llmsched_gym.validation import STRICT, ranged, validate_model

ENV_ID = "llmsched/Routing-v0"


class ImitationConfig(BaseModel):
    """The imitation run's settings (``--set KEY=VALUE`` with ``--algo bc|dagger``).

    Args:
        episodes: batches of ``n_envs`` episodes labelled per round.
        rounds: DAgger rounds after behaviour cloning (0 with ``--algo bc``).
        beta0: DAgger: probability that the teacher acts at a decision in round 1.
        decay: DAgger: factor of that probability per later round.
        epochs: passes over the data per fit.
        batch_size: rows per gradient step.
        learning_rate: Adam's.
        target: ``hard`` (the planner's choice) or ``soft`` (a softmax of the candidates' costs).
        temperature: the soft target's sharpness (a fraction of each row's cost spread).
        holdout: share of the episodes held out for the accuracy.
    """

    model_config = STRICT
    episodes: ranged(int, ge=1, le=100) = 2
    rounds: ranged(int, ge=0, le=50) = 0
    beta0: ranged(float, ge=0, le=1) = 0.5
    decay: ranged(float, ge=0, le=1) = 0.5
    epochs: ranged(int, ge=1, le=1000) = 30
    batch_size: ranged(int, ge=1, le=2**20) = 256
    learning_rate: ranged(float, gt=0, le=1) = 1e-3
    target: Literal["hard", "soft"] = "hard"
    temperature: ranged(float, gt=0, le=100) = 0.1
    holdout: ranged(float, ge=0, lt=1) = 0.1


def imitation_config(algo: str, overrides: dict) -> ImitationConfig:
    """The settings of ``--algo bc|dagger`` with ``--set`` overrides (one clear error per bad key or value)."""
    allowed = sorted(ImitationConfig.model_fields)
    for k in overrides:
        if k not in allowed:
            raise ConfigError(f"--set {k}={overrides[k]!r}: {k!r} is not a {algo} setting; allowed: "
                              f"{', '.join(allowed)}")
    cfg = validate_model(ImitationConfig, {"rounds": 3 if algo == "dagger" else 0, **overrides},
                         names={k: f"--set {k}" for k in allowed})
    if algo == "bc" and cfg.rounds:
        raise ConfigError(f"--set rounds={cfg.rounds} needs --algo dagger (bc is behaviour cloning only)")
    if algo == "dagger" and not cfg.rounds:
        raise ConfigError("--algo dagger needs --set rounds >= 1 (rounds=0 is --algo bc)")
    return cfg


def workload_seeds(seed: int, count: int) -> list[int]:
    """``count`` distinct workload seeds of the declared training range, in an order drawn by ``seed``."""
    train_seeds = training_seeds()
    if count > len(train_seeds):
        raise ConfigError(f"the run needs {count} episodes but the declared training seeds are "
                          f"{train_seeds.start}-{train_seeds.stop - 1} ({len(train_seeds)}; agents/declared_seeds.yaml); "
                          "lower --n-envs, --set episodes or --set rounds")
    return [int(s) for s in np.random.default_rng(seed).permutation(np.array(train_seeds))[:count]]


def build_model(vec, policy: str, policy_kwargs: dict, seed: int):
    """A MaskablePPO model with the scorer ``policy`` on the env's spaces (what ``agent:PATH`` loads)."""
    from sb3_contrib import MaskablePPO

    from agents.sb3 import to_sb3_vec_env
    from agents.train import _policy_ref

    return MaskablePPO(_policy_ref(policy), to_sb3_vec_env(vec), seed=seed, policy_kwargs=policy_kwargs,
                       device="cpu")


def train_imitation(algo: str, scenario: str, teacher: str, seed: int, out: Path, *, rate: dict, env_kwargs: dict,
                    n_envs: int, cfg: ImitationConfig, policy: str, policy_kwargs: dict, progress: bool = True,
                    command: str = "") -> dict:
    """Run behaviour cloning (and DAgger rounds); write ``out/model.zip`` and ``out/agent.json``;
    return the metadata (see the module docstring)."""
    import gymnasium as gym
    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    batches = cfg.episodes * (1 + cfg.rounds)
    seeds = workload_seeds(seed, batches * n_envs)
    vec = gym.make_vec(ENV_ID, num_envs=n_envs, scenario=scenario, **rate, **env_kwargs).unwrapped
    labeller = RoutingLabeller(teacher, vec)
    model = build_model(vec, policy, policy_kwargs, seed)
    pol = model.policy
    held = set(seeds[:max(1, round(cfg.holdout * len(seeds)))]) if cfg.holdout > 0 else set()
    rng = np.random.default_rng([seed, 0xDA66E])
    out.mkdir(parents=True, exist_ok=True)
    meta = {"env_id": ENV_ID, "algo": algo, "teacher": teacher, "base": labeller.planner.base,
            "teacher_mode": labeller.planner.mode, "seed": seed, "scenarios": [scenario],
            "rate_kind": next(iter(rate), None), "rates": list(rate.values()), "env_kwargs": env_kwargs,
            "n_envs": n_envs, "normalize": {"norm_obs": False, "norm_reward": False}, "imitation": cfg.model_dump(),
            "policy": policy, "policy_kwargs": {k: repr(v) for k, v in policy_kwargs.items()},
            "training_workload_seeds": seeds, "holdout_workload_seeds": sorted(held), "rounds": [],
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "command": command or " ".join(sys.argv), "complete": False}
    t0 = time.time()
    data = Dataset()
    bar = tqdm(total=batches, desc=f"{algo}: episode batches", disable=not progress, unit="batch")

    def show(_: int) -> None:
        bar.set_postfix(round=r, labels=labeller.labels,
                        labels_per_s=f"{labeller.labels / max(labeller.seconds, 1e-9):.1f}", refresh=True)

    for r in range(1 + cfg.rounds):
        beta = 1.0 if r == 0 else cfg.beta0 * cfg.decay ** (r - 1)
        start_labels, start_s = labeller.labels, labeller.seconds
        new = []
        for b in range(cfg.episodes):
            k = (r * cfg.episodes + b) * n_envs
            new.append(rollout(labeller, seeds[k:k + n_envs], student=None if r == 0 else
                               (lambda o, m: act(pol, o, m)), beta=beta, rng=rng, progress=show))
            bar.update(1)
        data = Dataset.concat([data] + new)
        hold = np.isin(data.seeds, list(held))
        train, test = data.subset(np.flatnonzero(~hold)), data.subset(np.flatnonzero(hold))
        losses = fit(pol, train, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.learning_rate,
                     seed=seed + r, target=cfg.target, temperature=cfg.temperature)
        meta["rounds"].append({"round": r, "beta": beta, "labels": labeller.labels - start_labels,
                               "labels_per_s": round((labeller.labels - start_labels)
                                                     / max(labeller.seconds - start_s, 1e-9), 2),
                               "data_rows": len(data), "train_rows": len(train), "holdout_rows": len(test),
                               "final_loss": round(losses[-1], 5), "train_accuracy": round(accuracy(pol, train), 4),
                               "holdout_accuracy": round(accuracy(pol, test), 4),
                               "teacher_departs_from_base": round(float(np.mean(data.label != data.own)), 4)})
        (out / "agent.json").write_text(json.dumps(meta, indent=1, default=str))
    bar.close()
    data.save(out / "labels.npz")
    model.save(out / "model.zip")
    meta.update(wall_seconds=round(time.time() - t0, 1), complete=True, labels=labeller.labels,
                label_seconds=round(labeller.seconds, 1), data_rows=len(data))
    (out / "agent.json").write_text(json.dumps(meta, indent=1, default=str))
    vec.close()
    return meta


def imitation_from_args(args, algo: str, scenarios: list[str], rate_kind: str | None, rates: list[float], out: str,
                        command: str) -> dict:
    """``llmsched-gym train --algo bc|dagger --teacher SPEC``: every flag checked before any
    simulation starts, then :func:`train_imitation`. The environment is the scenario as it is
    (not the YAML's shortened PPO episodes): ``--env-set horizon=S`` and ``--duration`` shorten
    it; the network is the YAML's ``maskable-ppo`` scorer (``--policy residual``: its residual
    on LMetric). ``--timesteps`` does not apply (the data size is ``--n-envs`` x ``--set
    episodes`` per round)."""
    from agents.imitation.labeller import make_teacher
    from agents.train import (
        IMITATION,
        _set_overrides,
        load_hyperparams,
        policy_variant_hyperparams,
    )
    from llmsched_gym.validation import check_output_dir

    if algo not in IMITATION:
        raise ConfigError(f"--teacher is for --algo {' or '.join(IMITATION)} (imitation of the lookahead planner), "
                          f"not --algo {algo}")
    if args.env != ENV_ID:
        raise ConfigError(f"--algo {algo} imitates the lookahead planner's routing: use --env {ENV_ID}, not {args.env}")
    if not args.teacher:
        raise ConfigError(f"--algo {algo} needs --teacher, e.g. 'lookahead:mode=mpc,samples=2,horizon_s=1,base=preble'")
    make_teacher(args.teacher)
    if len(scenarios) != 1 or len(rates) > 1:
        raise ConfigError(f"--algo {algo} trains on one scenario at one rate; got --scenario {','.join(scenarios)} "
                          f"and {len(rates)} rates")
    if args.eval_scenario or args.eval_rates:
        raise ConfigError(f"--algo {algo} reports the accuracy on held-out training seeds; evaluate the agent with "
                          "compare (--eval-scenario and --eval-rates are for PPO's EvalCallback)")
    cfg = imitation_config(algo, _set_overrides(args.set))
    hp = load_hyperparams(ENV_ID, "maskable-ppo", args.hyperparams)
    if args.policy not in (None, "default"):
        hp.update(policy_variant_hyperparams(ENV_ID, "maskable-ppo", args.policy))
    policy_kwargs = hp.get("policy_kwargs") or {}
    if isinstance(policy_kwargs, str):
        policy_kwargs = eval(policy_kwargs, {"dict": dict})  # RL-Zoo convention, as agents.train
    env_kwargs = {**_set_overrides(args.env_set)}
    if args.router is not None or args.flow_control is not None or args.admission is not None:
        env_kwargs.update({k: getattr(args, k) for k in ("flow_control", "admission") if getattr(args, k)})
        if args.router is not None:
            raise ConfigError(f"--router does not apply to --algo {algo}: the agent is the router (the teacher's "
                              "base= is the heuristic its copies continue with)")
    if args.instances is not None:
        env_kwargs["instances"] = int(args.instances)
    if args.duration is not None:
        env_kwargs["duration_s"] = float(args.duration)
    n_envs = int(args.n_envs or 4)
    workload_seeds(args.seed, cfg.episodes * (1 + cfg.rounds) * n_envs)  # enough declared seeds, before building
    out = check_output_dir("--out", out, force=args.force)
    meta = train_imitation(algo, scenarios[0], args.teacher, int(args.seed), out,
                           rate={rate_kind: rates[0]} if rates else {}, env_kwargs=env_kwargs, n_envs=n_envs, cfg=cfg,
                           policy=hp.get("policy", "agents.networks:MaskableScorerPolicy"),
                           policy_kwargs=policy_kwargs, progress=not args.no_progress, command=command)
    last = meta["rounds"][-1]
    print(f"trained {algo} ({meta['labels']:,} labels, {len(meta['rounds']) - 1} DAgger rounds) on {ENV_ID} "
          f"({scenarios[0]}) in {meta['wall_seconds']:.0f} s: held-out accuracy {last['holdout_accuracy']:.3f} -> "
          f"{out}/model.zip (+ agent.json); evaluate with --policies 'agent:{out}'")
    return meta
