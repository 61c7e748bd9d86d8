"""Environment steps per second and peak memory: single env against native vector envs.

    python benchmarks/speed/env_speed.py [--configs codegen,chatbot,chatbot-lmetric,chatbot-overload]
                                   [--sizes 16,64,256] [--episodes 2] [--seconds 3] [--sync]
                                   [--env routing|flow_control|admission] [--profile CONFIG]

Configurations (Routing-v0 unless ``--env``):

* ``codegen``: 2 instances at 12 req/s, random actions;
* ``chatbot``: 16 instances (prefix caching) at the scenario's default load (0.5), random
  actions, as early RL training acts;
* ``chatbot-lmetric``: the same with LMetric-like actions (the instance of least
  ``(prefill tokens + 1) x (running + waiting + 1)`` in the observation, i.e. a good router);
* ``chatbot-overload``: load 2 (twice what the cluster serves) with LMetric-like actions,
  20-s episodes; ``chatbot-overload-random`` the same with random actions.

A *step* is one sub-environment transition (a vector step of N envs counts N). Each row
runs in a fresh process, so its peak memory (``ru_maxrss``: the whole process, imports
included) is its own. Vector envs run until their clusters have ended ``--episodes``
episodes each on average (and at least ``--seconds``), so the next episodes' setup and the
memory they take are counted as in training. Ratios are to the single env made with
``gymnasium.make`` (with its default wrappers), measured in the same run. ``--profile``
prints where the native vector env of 64 spends its time on one configuration.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import resource
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np

import llmsched_gym  # noqa: F401

IDS = {"routing": "llmsched/Routing-v0", "flow_control": "llmsched/FlowControl-v0",
       "admission": "llmsched/Admission-v0"}
CONFIGS = {
    "codegen": (dict(scenario="codegen", qps=12.0, horizon=60.0), "random"),
    "chatbot": (dict(scenario="chatbot"), "random"),
    "chatbot-lmetric": (dict(scenario="chatbot"), "lmetric"),
    "chatbot-overload": (dict(scenario="chatbot", load=2.0, horizon=20.0), "lmetric"),
    "chatbot-overload-random": (dict(scenario="chatbot", load=2.0, horizon=20.0), "random"),
}


class Actor:
    """Random valid actions (drawn beforehand) or, on Routing, LMetric-like ones from the
    observation; ``batch``: one action per cluster of a vector env."""

    def __init__(self, space, kind: str, n: int | None):
        self.kind, self.n, self.k = kind, n, 0
        rng = np.random.default_rng(0)
        shape = (4096,) if n is None else (64, n)
        if isinstance(space, gym.spaces.Discrete):
            self.table = rng.integers(space.n, size=shape)
        else:
            self.table = rng.random((*shape, *space.shape)).astype(np.float32)

    def __call__(self, obs):
        if self.kind == "lmetric":
            score = (obs["prefill_tokens"] + 1.0) * (obs["running"] + obs["waiting"] + 1.0)
            return np.argmin(score, axis=-1) if self.n is not None else int(np.argmin(score))
        self.k += 1
        return self.table[self.k % len(self.table)]


def bench_single(env_id, kwargs, kind, seconds):
    env = gym.make(env_id, **kwargs)
    act = Actor(env.action_space, kind, None)
    obs, _ = env.reset(seed=0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(256):
            obs, _, te, tr, _ = env.step(act(obs))
            steps += 1
            if te or tr:
                obs, _ = env.reset()
    return steps / (time.perf_counter() - t0)


def bench_vector(env_id, kwargs, kind, n, seconds, episodes, mode="vector_entry_point"):
    """Steps/s over at least ``seconds`` and until every cluster has ended ``episodes``
    episodes on average: the clusters start together, so a shorter run would leave out
    (or bunch up) the next episodes' setup."""
    venv = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, **kwargs)
    act = Actor(venv.single_action_space, kind, n)
    obs, _ = venv.reset(seed=0)
    steps, ended, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or ended < episodes * n:
        obs, _, te, tr, _ = venv.step(act(obs))
        ended += int(np.count_nonzero(te | tr))
        steps += n
    return steps / (time.perf_counter() - t0)


def profile_native(env_id, kwargs, kind, n=64, steps=300):
    venv = gym.make_vec(env_id, num_envs=n, **kwargs)
    act = Actor(venv.single_action_space, kind, n)
    obs, _ = venv.reset(seed=0)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        obs, *_ = venv.step(act(obs))
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    return s.getvalue()


def one(args) -> dict:
    """One measurement in this process: steps/s and peak memory."""
    kwargs, kind = CONFIGS[args.config]
    env_id = IDS[args.env]
    if args.n == 0:
        sps = bench_single(env_id, kwargs, kind, args.seconds)
    else:
        sps = bench_vector(env_id, kwargs, kind, args.n, args.seconds, args.episodes,
                           "sync" if args.sync_one else "vector_entry_point")
    return {"steps_per_s": sps, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="codegen,chatbot,chatbot-lmetric,chatbot-overload")
    p.add_argument("--env", default="routing", choices=list(IDS))
    p.add_argument("--sizes", default="16,64,256")
    p.add_argument("--episodes", type=float, default=2.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--sync", action="store_true", help="also gymnasium's SyncVectorEnv of 16")
    p.add_argument("--profile", metavar="CONFIG", help="profile the native vector env of 64 on CONFIG")
    p.add_argument("--config", help=argparse.SUPPRESS)  # one measurement (a child process)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--sync-one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(one(args)))
        return
    if args.profile:
        kwargs, kind = CONFIGS[args.profile]
        print(profile_native(IDS[args.env], kwargs, kind))
        return
    common = [sys.executable, __file__, "--env", args.env, "--episodes", str(args.episodes),
              "--seconds", str(args.seconds)]
    for config in args.configs.split(","):
        runs = [("single (gym.make)", ["--n", "0"])]
        if args.sync:
            runs.append(("SyncVectorEnv x16", ["--n", "16", "--sync-one"]))
        runs += [(f"native vector x{n}", ["--n", str(n)]) for n in map(int, args.sizes.split(","))]
        kwargs = CONFIGS[config][0]
        print(f"\n{IDS[args.env]}  {config}: {kwargs}, {CONFIGS[config][1]} actions")
        print(f"  {'env':22s} {'steps/s':>10s} {'ratio':>7s} {'peak MB':>8s}")
        base = None
        for name, extra in runs:
            out = subprocess.run([*common, "--config", config, *extra], capture_output=True, text=True)
            if out.returncode:
                print(f"  {name:22s} failed: {out.stderr.strip().splitlines()[-1]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            base = base or r["steps_per_s"]
            print(f"  {name:22s} {r['steps_per_s']:10.0f} {r['steps_per_s'] / base:7.2f}x {r['peak_mb']:8.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
