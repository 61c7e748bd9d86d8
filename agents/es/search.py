"""CMA-ES over a residual policy's ``theta``, on paired workload seeds.

Each generation draws ``seeds_per_generation`` workload seeds from the training pool
(inside the declared training range, ``agents/declared_seeds.yaml``); the heuristic
(``theta = 0``) and every candidate CMA-ES asks for run exactly those seeds (common random
numbers, :mod:`agents.es.paired`). A candidate's fitness is its paired relative change of
the environment's episode cost against the heuristic, ``mean_s(cost_s / heuristic_s) - 1``
(lower is better), so seeds with a large cost do not drown the others. The candidates are
split over ``workers`` tasks of an evaluation backend (``llmsched_gym.evaluation.backends``:
a process pool or Ray); with one worker the whole generation is one batched vector env.

At the end, the heuristic, the CMA-ES mean of the last generations and the final mean are
run on the selection seeds (training range, disjoint from the pool); the lowest paired cost
is the agent. If that is the heuristic, ``theta`` is 0 and ``agent.json`` says so.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from agents.declared import DECLARED, training_seeds
from agents.es.paired import evaluate_task
from agents.es.residual import KINDS, RESIDUAL_ENV_KWARGS, RESIDUALS, make_residual
from llmsched_gym.envs.core import make_setup
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.backends import BACKENDS, make_backend
from llmsched_gym.validation import STRICT, ranged, validate_model

#: CMA-ES means of this many last generations compete in the final selection.
LAST_MEANS = 4


def parse_seed_range(flag: str, text: str) -> list[int]:
    """``"LO:HI"`` (inclusive) or a comma list -> seeds, all inside the declared training range."""
    allowed = training_seeds()
    lo_ok, hi_ok = allowed.start, allowed.stop - 1
    try:
        if ":" in text:
            lo, hi = (int(x) for x in text.split(":"))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is invalid; give LO:HI or a comma list of integers") from None
    if not seeds:
        raise ConfigError(f"{flag} {text!r} is empty")
    bad = [s for s in seeds if not lo_ok <= s <= hi_ok]
    if bad:
        raise ConfigError(f"{flag} {text!r}: seed {bad[0]} is outside the declared training seeds "
                          f"{lo_ok}-{hi_ok} ({DECLARED.name}); evaluation seeds are never trained on")
    return seeds


class EsSettings(BaseModel):
    """The CMA-ES flags of ``llmsched-gym train --algo cmaes`` and what they allow."""

    model_config = STRICT
    generations: ranged(int, ge=1, le=10_000) = 20
    popsize: ranged(int, ge=2, le=512) = 8
    seeds_per_gen: ranged(int, ge=1, le=100) = 4
    sigma: ranged(float, gt=0, le=100) = 0.3
    workers: ranged(int, ge=1, le=1024) = 1
    seed: ranged(int, ge=0, le=2**31 - 1) = 0


def es_env_kwargs(env_id: str, scenario: str, rate: dict, env_kwargs: dict) -> dict:
    """The environment keywords of a run (the residual's own, a conflicting value an
    error), validated by building the environment's setup."""
    if env_id not in RESIDUALS:
        raise ConfigError(f"--algo cmaes: --env {env_id!r} has no residual policy; choose one of "
                          f"{', '.join(RESIDUALS)}")
    out = {"scenario": scenario, **rate, **env_kwargs}
    for k, v in RESIDUAL_ENV_KWARGS.get(env_id, {}).items():
        if out.setdefault(k, v) != v:
            raise ConfigError(f"--algo cmaes on {env_id} needs {k}={v!r}, got {k}={out[k]!r}")
    make_setup(KINDS[env_id], **out)  # every keyword checked before a simulation starts
    return out


def _relative(costs: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Paired relative change per candidate: ``mean_s(costs[p, s] / ref[s]) - 1``."""
    return (costs / ref[None]).mean(axis=1) - 1.0


class PopulationRunner:
    """Costs of candidate rows on seeds, split over a backend's workers."""

    def __init__(self, env_id: str, env_kwargs: dict, workers: int, backend: str):
        self.env_id, self.env_kwargs, self.workers = env_id, env_kwargs, workers
        self.backend = make_backend(backend, workers=workers)
        self.steps = 0

    def costs(self, thetas: np.ndarray, seeds: list[int]) -> np.ndarray:
        chunks = [c for c in np.array_split(thetas, min(self.workers, len(thetas))) if len(c)]
        tasks = [(self.env_id, self.env_kwargs, c, seeds) for c in chunks]
        results = self.backend.map(evaluate_task, tasks)
        self.steps += sum(r[1] for r in results)
        return np.concatenate([r[0] for r in results])

    def close(self) -> None:
        self.backend.close()


def search(env_id: str, env_kwargs: dict, settings: EsSettings, train_pool: list[int], select_seeds: list[int],
           backend: str = "local", log=print) -> dict:
    """Run CMA-ES; returns the record of ``agent.json`` (without the command)."""
    from cmaes import CMA

    if settings.seeds_per_gen > len(train_pool):
        raise ConfigError(f"--seeds-per-gen {settings.seeds_per_gen} is more than the {len(train_pool)} seeds of "
                          f"--train-seeds")
    if set(train_pool) & set(select_seeds):
        raise ConfigError("--train-seeds and --select-seeds overlap; selection needs seeds of its own")
    residual = make_residual(env_id, env_kwargs)
    rng = np.random.default_rng(settings.seed)
    opt = CMA(mean=np.zeros(residual.dim), sigma=settings.sigma, population_size=settings.popsize,
              seed=settings.seed)
    runner = PopulationRunner(env_id, env_kwargs, settings.workers, backend)
    history, gen_seeds, means = [], [], []
    t_start = time.perf_counter()
    try:
        for g in range(settings.generations):
            t0 = time.perf_counter()
            seeds = sorted(int(s) for s in rng.choice(train_pool, settings.seeds_per_gen, replace=False))
            xs = np.array([opt.ask() for _ in range(opt.population_size)])
            costs = runner.costs(np.vstack([np.zeros(residual.dim), xs]), seeds)
            fit = _relative(costs[1:], costs[0])
            opt.tell(list(zip(xs, fit.tolist())))
            means.append(opt.mean.copy())
            gen_seeds.append(seeds)
            # opt._sigma: the step size (cmaes 0.10-0.13 has no public accessor)
            row = {"generation": g + 1, "best": float(fit.min()), "mean": float(fit.mean()),
                   "sigma": float(opt._sigma), "wall_s": round(time.perf_counter() - t0, 2), "seeds": seeds}
            history.append(row)
            log(f"gen {g + 1}/{settings.generations}  best {row['best']:+.2%}  mean {row['mean']:+.2%}  "
                f"sigma {row['sigma']:.3f}  wall {row['wall_s']:.1f} s", flush=True)
        # selection on seeds of its own: the heuristic, the last generations' means
        names = ["heuristic"] + [f"mean@{settings.generations - k}" for k in range(min(LAST_MEANS, len(means)))]
        cands = np.vstack([np.zeros(residual.dim)] + [means[-1 - k] for k in range(len(names) - 1)])
        costs = runner.costs(cands, select_seeds)
    finally:
        runner.close()
    change = _relative(costs, costs[0])
    best = int(np.argmin(change))
    log(f"selection on seeds {select_seeds[0]}-{select_seeds[-1]}: " +
        ", ".join(f"{n} {c:+.2%}" for n, c in zip(names, change)) + f" -> {names[best]}", flush=True)
    return {"env_id": env_id, "algo": "cmaes", "heuristic": residual.heuristic,
            "residual": type(residual).__name__, "feature_names": list(residual.feature_names),
            "theta": cands[best].tolist(), "theta_dim": residual.dim, "chosen": names[best],
            "selection": {"seeds": select_seeds, "change_vs_heuristic": dict(zip(names, change.tolist()))},
            "settings": settings.model_dump(), "backend": backend, "training_seeds": gen_seeds,
            "train_pool": [min(train_pool), max(train_pool)], "env_steps": runner.steps,
            "wall_seconds": round(time.perf_counter() - t_start, 1), "cpu_count": os.cpu_count(),
            "history": history}


def train_es(env_id: str, scenario: str, rate: dict, env_kwargs: dict, settings: "EsSettings | dict", out,
             train_seeds: str = "0:79", select_seeds: str = "80:99", backend: str = "local",
             command: str = "", log=print) -> dict:
    """Validate, run :func:`search` and write ``OUT/agent.json``.

    Args:
        env_id: the environment (Routing-v0, FlowControl-v0 or Gateway-v0).
        scenario: scenario name; ``rate``: ``{}`` or one of ``{"qps"|"load"|"paper_qps": x}``.
        env_kwargs: further environment keywords (horizon, control_interval, ...).
        settings: :class:`EsSettings` (or its fields as a dict).
        out: output directory (created after validation).
        train_seeds / select_seeds: ``LO:HI`` or comma lists inside the declared training range.
        backend: ``local`` (process pool) or ``ray``, with ``settings.workers`` workers.
    """
    if isinstance(settings, dict):
        settings = validate_model(EsSettings, settings, names={k: "--" + k.replace("_", "-") for k in settings})
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r} is invalid; choose one of {', '.join(BACKENDS)}")
    pool, select = parse_seed_range("--train-seeds", train_seeds), parse_seed_range("--select-seeds", select_seeds)
    kwargs = es_env_kwargs(env_id, scenario, rate, env_kwargs)
    out = Path(out)
    record = search(env_id, kwargs, settings, pool, select, backend=backend, log=log)
    rate_kind = next(iter(rate), None)
    record.update(scenario=scenario, rate_kind=rate_kind, rates=list(rate.values()),
                  env_kwargs={k: v for k, v in kwargs.items() if k not in ("scenario", *rate)},
                  command=command, complete=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "agent.json").write_text(json.dumps(record, indent=1))
    return record
