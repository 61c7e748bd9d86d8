"""Environment steps per second: single env, SyncVectorEnv(16), native vector env(16/64/256).

    python benchmarks/env_speed.py [--env routing|flow_control|admission|all] [--seconds 3]
                                   [--scenario codegen --qps 12 --horizon 60] [--profile]

A *step* is one sub-environment transition (a vector step of N envs counts N). Actions
are random valid actions drawn beforehand. Vector envs run until their clusters have
ended two episodes each on average (and at least ``--seconds``), so the next episodes'
setup is counted as it is in training. Ratios are to the single env made with
``gymnasium.make`` (with its default wrappers). ``--profile`` prints where the native
vector env of 64 spends its time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import gymnasium as gym
import numpy as np

import llmsched_gym  # noqa: F401

IDS = {"routing": "llmsched/Routing-v0", "flow_control": "llmsched/FlowControl-v0",
       "admission": "llmsched/Admission-v0"}


def _actions(space, n, rng):
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(space.n, size=n)
    return rng.random((n, *space.shape)).astype(np.float32)


def bench_single(env_id, kwargs, seconds, unwrapped=False):
    env = gym.make(env_id, **kwargs)
    if unwrapped:
        env = env.unwrapped
    rng = np.random.default_rng(0)
    acts = _actions(env.action_space, 4096, rng)
    env.reset(seed=0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(256):
            _, _, te, tr, _ = env.step(acts[steps % 4096])
            steps += 1
            if te or tr:
                env.reset()
    return steps / (time.perf_counter() - t0)


def bench_vector(env_id, kwargs, n, seconds, mode, episodes=2):
    """Steps/s over at least ``seconds`` and until every cluster has ended ``episodes``
    episodes on average: the clusters start together, so a shorter run would leave out
    (or bunch up) the next episodes' setup, which costs as much as a few hundred steps."""
    venv = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, **kwargs)
    rng = np.random.default_rng(0)
    acts = [_actions(venv.single_action_space, n, rng) for _ in range(64)]
    venv.reset(seed=0)
    steps, k, ended, t0 = 0, 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or ended < episodes * n:
        _, _, te, tr, _ = venv.step(acts[k % 64])
        ended += int(np.count_nonzero(te | tr))
        k += 1
        steps += n
    return steps / (time.perf_counter() - t0)


def profile_native(env_id, kwargs, n=64, steps=200):
    venv = gym.make_vec(env_id, num_envs=n, **kwargs)
    rng = np.random.default_rng(0)
    acts = [_actions(venv.single_action_space, n, rng) for _ in range(64)]
    venv.reset(seed=0)
    pr = cProfile.Profile()
    pr.enable()
    for k in range(steps):
        venv.step(acts[k % 64])
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    return s.getvalue()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="all", choices=[*IDS, "all"])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--scenario", default="codegen")
    p.add_argument("--qps", type=float, default=12.0)
    p.add_argument("--horizon", type=float, default=60.0)
    p.add_argument("--sizes", default="16,64,256")
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    kwargs = dict(scenario=args.scenario, qps=args.qps, horizon=args.horizon)
    kinds = list(IDS) if args.env == "all" else [args.env]
    sizes = [int(s) for s in args.sizes.split(",")]
    for kind in kinds:
        env_id = IDS[kind]
        base = bench_single(env_id, kwargs, args.seconds)
        rows = [("single (gym.make)", base),
                ("single (unwrapped)", bench_single(env_id, kwargs, args.seconds, unwrapped=True)),
                ("SyncVectorEnv x16", bench_vector(env_id, kwargs, 16, args.seconds, "sync"))]
        for n in sizes:
            rows.append((f"native vector x{n}", bench_vector(env_id, kwargs, n, args.seconds, "vector_entry_point")))
        print(f"\n{env_id}  ({args.scenario} @ {args.qps} req/s, horizon {args.horizon} s)")
        print(f"  {'env':24s} {'steps/s':>10s} {'ratio':>7s}")
        for name, sps in rows:
            print(f"  {name:24s} {sps:10.0f} {sps / base:7.2f}x")
        if args.profile:
            print(profile_native(env_id, kwargs))


if __name__ == "__main__":
    main()
