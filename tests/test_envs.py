"""Gymnasium environments (docs/environments.md): API conformance, vector parity, reward accounting."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import warnings
import weakref

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym  # noqa: F401  (registers the environments)
from llmsched_gym.engine.requests import DROPPED, EXPIRED, FINISHED, IN_FLIGHT, REJECTED
from llmsched_gym.envs import BaselineAgent, episode_cost, run_episode
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.scenarios import make_scenario

IDS = ["llmsched/Routing-v0", "llmsched/FlowControl-v0", "llmsched/Admission-v0"]
SMALL = dict(scenario="codegen", qps=10, horizon=4)


def _act(env, rng):
    """A seeded random valid action (masked for routing)."""
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        return int(rng.integers(space.n))
    return rng.random(space.shape).astype(np.float32)


# ============================================================================ registration, checkers
def test_make_without_import_in_fresh_interpreter():
    code = ("import gymnasium as gym\n"
            "env = gym.make('llmsched_gym:llmsched/Routing-v0', scenario='codegen', qps=10, horizon=2)\n"
            "obs, info = env.reset(seed=1)\n"
            "print(sorted(obs), env.action_space)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Discrete(2)" in out.stdout


@pytest.mark.parametrize("env_id,kwargs", [
    (IDS[0], dict(scenario="codegen", qps=10, horizon=3)),
    (IDS[0], dict(scenario="chat", qps=40, horizon=1)),
    (IDS[0], dict(scenario="chatbot", qps=20, horizon=1, instances=4)),
    (IDS[1], dict(scenario="codegen", qps=16, horizon=3)),
    (IDS[1], dict(scenario="chat", qps=60, horizon=1.5, reward="e2e")),
    (IDS[1], dict(scenario="chatbot", qps=20, horizon=1, instances=4)),
    (IDS[1], dict(scenario="codegen", qps=16, horizon=3, action="soft-reflective")),
    (IDS[2], dict(scenario="codegen", qps=16, horizon=3, reward="slo")),
    (IDS[2], dict(scenario="chat", qps=60, horizon=1.5)),
    (IDS[2], dict(scenario="reasoning", qps=0.6, horizon=3, observation={"normalize": False})),
])
def test_env_checkers(env_id, kwargs):
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = gym.make(env_id, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check(env.unwrapped, skip_render_check=True)
        sb3_check(env.unwrapped, warn=False)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    for key, box in env.observation_space.spaces.items():
        assert box.dtype == np.float32 and np.isfinite(box.low).all(), key


def test_make_with_load_and_scenario_overrides_signature():
    env = gym.make("llmsched/Routing-v0", scenario="chat", qps=33, horizon=2)
    env.reset(seed=0)
    assert env.unwrapped.setup.scenario.target_qps() == pytest.approx(33.0)
    assert env.unwrapped.simulator.horizon == 2.0
    env = gym.make("llmsched/FlowControl-v0", scenario="codegen", qps=8, duration_s=5, horizon=None, instances=1)
    assert env.action_space.shape == (2,)
    assert env.observation_space["running"].shape == (1,)


# ============================================================================ errors
def test_bad_scenario_lists_registered():
    with pytest.raises(ConfigError, match="registered: .*codegen"):
        gym.make("llmsched/Routing-v0", scenario="nope")
    with pytest.raises(ConfigError, match="reward"):
        gym.make("llmsched/Routing-v0", reward="latency", **{k: v for k, v in SMALL.items()})
    with pytest.raises(ConfigError, match="sheddable"):
        gym.make("llmsched/Admission-v0", scenario="chatbot", qps=10, horizon=1)
    with pytest.raises(ConfigError, match="agent's decision"):
        gym.make("llmsched/Routing-v0", router="jsq", **SMALL)


@pytest.mark.parametrize("bad", [2, -1, 1.0, "0", np.array([0, 1]), True, np.nan])
def test_bad_routing_actions(bad):
    env = gym.make("llmsched/Routing-v0", **SMALL).unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match="Routing"):
        env.step(bad)


@pytest.mark.parametrize("env_id", IDS[1:])
@pytest.mark.parametrize("bad", [[0.5], [0.5, np.nan], [1.5, 0.2], [-0.5, 0.2], [[0.1, 0.2]]])
def test_bad_box_actions(env_id, bad):
    env = gym.make(env_id, **SMALL).unwrapped
    env.reset(seed=0)
    if env_id.endswith("Admission-v0") and len(bad) == 1 and np.ndim(bad) == 1 and np.isfinite(bad[0]):
        bad = [0.5, 0.5]  # wrong shape for admission (one sheddable band)
    with pytest.raises(ValueError):
        env.step(np.array(bad, dtype=np.float32))


def test_step_after_episode_end_raises():
    env = gym.make("llmsched/FlowControl-v0", scenario="codegen", qps=10, horizon=0.3).unwrapped
    env.reset(seed=0)
    for _ in range(3):
        *_, term, trunc, _ = env.step(np.ones(2, np.float32))
    assert trunc
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.ones(2, np.float32))


# ============================================================================ seeding, vector parity
def test_reset_seeds_reproducible_and_distinct():
    env = gym.make("llmsched/Routing-v0", **SMALL).unwrapped
    env.reset(seed=5)
    s1 = env.simulator.seed
    env.reset()
    s2 = env.simulator.seed
    env.reset(seed=5)
    assert env.simulator.seed == s1 != s2
    env.reset(options={"workload_seed": 7})
    assert env.simulator.seed == 7
    ref = make_scenario("codegen", qps=10).build_workload(7)
    np.testing.assert_array_equal(env.simulator.workload.arrival_s, ref.arrival_s)


@pytest.mark.parametrize("env_id", IDS)
def test_native_vector_matches_single_envs(env_id):
    kwargs = dict(scenario="codegen", qps=10, horizon=1.5)
    n, steps, seed = 3, 60, 11
    venv = gym.make_vec(env_id, num_envs=n, **kwargs)
    assert type(venv).__name__.endswith("VectorEnv") and venv.metadata["autoreset_mode"].value == "SameStep"
    singles = [gym.make(env_id, **kwargs) for _ in range(n)]
    vobs, vinfo = venv.reset(seed=seed)
    for i, e in enumerate(singles):
        e.reset(seed=seed + i)
    rng = np.random.default_rng(0)
    episodes_ended = 0
    for _ in range(steps):
        acts = [_act(singles[0], rng) for _ in range(n)]
        vobs, vrew, vterm, vtrunc, vinfo = venv.step(np.array(acts))
        for i, e in enumerate(singles):
            o, r, te, tr, info = e.step(acts[i])
            assert r == vrew[i]  # bit for bit: the batched step does the drivers' arithmetic
            assert (te, tr) == (vterm[i], vtrunc[i])
            if te or tr:
                assert info["sim_time"] == vinfo["final_info"]["sim_time"][i]
                episodes_ended += 1
                assert vinfo["_final_obs"][i]
                for k in o:
                    np.testing.assert_array_equal(vinfo["final_obs"][i][k], o[k])
                assert vinfo["final_info"]["episode"]["return"][i] == info["episode"]["return"]
                o, info = e.reset()
            assert info["sim_time"] == vinfo["sim_time"][i]
            for k in o:
                np.testing.assert_array_equal(vobs[k][i], o[k])
            for k in ("arrivals", "open_requests", "episode_cost"):
                assert info[k] == vinfo[k][i]
            if env_id.endswith("Routing-v0"):
                np.testing.assert_array_equal(vinfo["action_mask"][i], info["action_mask"])
    assert episodes_ended >= n  # autoreset exercised
    assert venv.observation_space.contains(vobs)


# ============================================================================ reward accounting
def _weighted_ttft_sum(sim, penalty: float, t_end: float) -> float:
    """Independent closed form: sum over arrived requests of w * T (docs/environments.md / env docs)."""
    tb = sim.table
    n = sim.arrived
    total = 0.0
    for r in range(n):
        w = 2.0 ** np.clip(int(tb.priority[r]), -4, 4)
        a = tb.arrival[r]
        if not np.isnan(tb.first_token_t[r]):
            T = tb.first_token_t[r] - a
        elif tb.outcome[r] in (REJECTED, EXPIRED, DROPPED):
            T = tb.end_t[r] - a + penalty
        else:
            assert tb.outcome[r] == IN_FLIGHT
            T = t_end - a
        total += w * T
    return total


def _short_ttl_codegen(ttl=0.5):
    sc = make_scenario("codegen", qps=14, duration_s=4)
    sc.gateway.ttl_s = ttl
    return sc


@pytest.mark.parametrize("env_id,kwargs,policy", [
    (IDS[0], dict(scenario="codegen", qps=12, horizon=5), "random"),                    # truncated
    (IDS[0], dict(scenario="codegen", qps=12, duration_s=3, horizon=None), "random"),   # terminated
    (IDS[1], dict(scenario=_short_ttl_codegen(), horizon=None), "shed"),                 # expirations
    (IDS[2], dict(scenario="codegen", qps=14, horizon=4), "shed"),                       # rejections
    (IDS[2], dict(scenario="codegen", qps=14, horizon=4, unserved_penalty_s=0.0), "shed"),
])
def test_return_is_minus_weighted_ttft_sum(env_id, kwargs, policy):
    env = gym.make(env_id, **kwargs).unwrapped
    rng = np.random.default_rng(1)
    obs, info = env.reset(seed=4)
    total = 0.0
    while True:
        if policy == "random":
            a = _act(env, rng)
        elif env.kind == "flow_control":
            a = np.array([1.0, 0.0], np.float32)  # hold the sheddable band: it expires
        else:
            a = np.array([0.6], np.float32)  # reject 60% of sheddable
        obs, r, term, trunc, info = env.step(a)
        total += r
        if term or trunc:
            break
    sim = env.simulator
    counts = sim.table.counts()
    if policy == "shed":
        assert counts["expired" if env.kind == "flow_control" else "rejected"] > 0
    if term:
        assert sim.done and counts["in_flight"] == 0
    else:
        assert counts["in_flight"] > 0
    expected = _weighted_ttft_sum(sim, env.setup.unserved_penalty_s, sim.now)
    assert total == pytest.approx(-expected, rel=1e-9, abs=1e-9)
    assert -total == pytest.approx(episode_cost(sim, env.setup), rel=1e-9)
    assert info["episode"]["return"] == pytest.approx(total, rel=1e-9)
    fin = sim.table.outcome == FINISHED
    assert fin.sum() > 0


@pytest.mark.parametrize("reward", ["e2e", "slo"])
def test_other_rewards_are_consistent(reward):
    env = gym.make("llmsched/Routing-v0", scenario="codegen", qps=14, duration_s=3, horizon=None,
                   reward=reward, reward_scale=2.0).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    total = 0.0
    while True:
        _, r, term, trunc, info = env.step(_act(env, rng))
        assert r <= 0
        total += r
        if term or trunc:
            break
    sim = env.simulator
    if reward == "e2e":
        assert -total / 2 == pytest.approx(episode_cost(sim, env.setup), rel=1e-9)
    else:
        s = summarize(sim)
        miss = sum((1.0 - c["slo_attainment"]) * c["requests"] * (1.0 if name == "critical" else 0.5)
                   for name, c in s["classes"].items() if name != "all")
        assert -total / 2 == pytest.approx(miss, abs=1e-6)


# ============================================================================ baselines through the env
def test_jsq_through_env_matches_cli(tmp_path):
    from llmsched_gym.cli import main

    seed = 3
    out = tmp_path / "run.json"
    assert main(["run", "--scenario", "codegen", "--qps", "12", "--horizon", "20", "--router", "jsq",
                 "--seed", str(seed), "--json", str(out)]) == 0
    cli = json.loads(out.read_text())[0]  # --json writes a list, one summary per seed
    env = gym.make("llmsched/Routing-v0", scenario="codegen", qps=12, horizon=20,
                   flow_control="static-usage-limit")  # the scenario's default, which the CLI keeps
    agent = BaselineAgent("jsq", env)
    ret, steps, info = run_episode(env, agent, options={"workload_seed": seed})
    got = info["episode"]["metrics"]
    for d in (cli, got):
        d.pop("wall_seconds", None)
    for k in ("scenario", "seed", "qps", "rate", "router", "admission", "flow_control", "policy_specs"):
        cli.pop(k, None)
    assert json.loads(json.dumps(got, default=float)) == cli
    assert steps == int((~np.isnan(env.unwrapped.simulator.table.dispatch_t)).sum())


@pytest.mark.parametrize("router", ["llm-d", "lmetric"])
def test_stateful_router_through_env_matches_simulator(router):
    sc = make_scenario("chatbot", qps=20, instances=4, horizon_s=4)
    sim = sc.simulator(2, router=router, flow_control=None, admission="always-admit")
    sim.run()
    env = gym.make("llmsched/Routing-v0", scenario="chatbot", qps=20, instances=4, horizon=4)
    _, _, info = run_episode(env, BaselineAgent(router, env), options={"workload_seed": 2})
    ref = summarize(sim)
    got = info["episode"]["metrics"]
    assert got["classes"] == ref["classes"]


@pytest.mark.parametrize("env_id,policy", [(IDS[1], "soft-reflective-ceiling"), (IDS[1], "priority-holdback"),
                                           (IDS[2], "legacy"), (IDS[2], "always-admit")])
def test_baseline_agents_drive_interval_envs(env_id, policy):
    env = gym.make(env_id, scenario="codegen", qps=16, horizon=3)
    agent = BaselineAgent(policy, env)
    ret, steps, info = run_episode(env, agent, seed=0)
    assert steps == 30 and ret <= 0
    assert env.action_space.contains(agent.act())  # after the episode: still a valid action


# ============================================================================ SB3
def test_sb3_adapter_terminal_obs_and_masks():
    from agents.sb3 import to_sb3_vec_env

    venv = to_sb3_vec_env(gym.make_vec(IDS[0], num_envs=2, scenario="codegen", qps=10, horizon=1))
    obs = venv.reset()
    assert obs["running"].shape == (2, 2)
    assert venv.has_attr("action_masks")
    masks = np.stack(venv.env_method("action_masks"))
    assert masks.shape == (2, 2) and masks.dtype == bool and masks.all()
    seen = 0
    for _ in range(40):
        venv.step_async(np.zeros(2, np.int64))
        obs, rew, dones, infos = venv.step_wait()
        assert rew.shape == (2,)
        for i in np.flatnonzero(dones):
            seen += 1
            term_obs = infos[i]["terminal_observation"]
            assert set(term_obs) == set(obs) and infos[i]["TimeLimit.truncated"] is True
            assert infos[i]["episode"]["l"] > 0
    assert seen >= 2


def test_ppo_smoke_on_native_vector_env():
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

    from agents.sb3 import to_sb3_vec_env

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny networks: threads only add overhead
    try:
        venv = to_sb3_vec_env(gym.make_vec(IDS[0], num_envs=16, scenario="codegen", qps=12, horizon=5))
        PPO("MultiInputPolicy", venv, n_steps=128, batch_size=512, n_epochs=1, seed=0).learn(2048)
        MaskablePPO("MultiInputPolicy", venv, n_steps=32, batch_size=512, n_epochs=1, seed=0).learn(512)
        venv = to_sb3_vec_env(gym.make_vec(IDS[1], num_envs=8, scenario="codegen", qps=16, horizon=3))
        model = PPO("MultiInputPolicy", venv, n_steps=64, batch_size=512, n_epochs=1, seed=0)
        model.learn(512)
        obs = venv.reset()
        act, _ = model.predict(obs, deterministic=True)
        assert act.shape == (8, 2)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_ppo_longer_run_routing():
    from sb3_contrib import MaskablePPO

    from agents.sb3 import to_sb3_vec_env

    venv = to_sb3_vec_env(gym.make_vec(IDS[0], num_envs=16, scenario="codegen", qps=14, horizon=20))
    MaskablePPO("MultiInputPolicy", venv, n_steps=256, seed=0).learn(50_000)


@pytest.mark.parametrize("reward", ["ttft", "slo"])  # the fused batched path and the drivers'
def test_soft_reflective_action_at_its_centre_is_the_baseline(reward):
    """FlowControl action="soft-reflective": the action (0.5, 0.5) every interval runs the
    engine's soft-reflective ceiling undisturbed, so every request is served exactly as under
    the soft-reflective-ceiling baseline; in a vector env too."""
    kwargs = dict(scenario="codegen", paper_qps=16, horizon=20, action="soft-reflective", reward=reward)
    ref = [make_scenario("codegen", paper_qps=16).simulator(
        ws, router="llm-d", flow_control="soft-reflective-ceiling", admission="always-admit", horizon_s=20).run()
        for ws in (5, 6)]
    venv = gym.make_vec(IDS[1], num_envs=2, **kwargs)
    venv.unwrapped.autoreset = False  # keep the finished episodes' tables to compare
    assert venv.single_action_space.shape == (2,)
    venv.reset(seed=0, options={"workload_seed": [5, 6]})
    sims = list(venv.unwrapped.simulators)
    centre = np.full((2, 2), 0.5, np.float32)
    for _ in range(200):  # 20 s of 0.1 s intervals: both episodes end at the horizon together
        _, _, te, tr, info = venv.step(centre)
    assert (te | tr).all()
    np.testing.assert_array_equal(info["final_info"]["soft_reflective"], np.ones((2, 2)))
    for sim, r in zip(sims, ref):
        np.testing.assert_array_equal(sim.table.first_token_t, r.table.first_token_t)
        np.testing.assert_array_equal(sim.table.outcome, r.table.outcome)
    # another action moves the duty cycle
    env = gym.make(IDS[1], **kwargs)
    env.reset(seed=0, options={"workload_seed": 5})
    for _ in range(200):
        _, _, te, tr, info = env.step(np.array([1.0, 1.0], np.float32))
    np.testing.assert_array_equal(info["soft_reflective"], [2.0, 4.0])
    assert not np.array_equal(env.unwrapped.simulator.table.first_token_t, ref[0].table.first_token_t)


def test_flow_action_keyword_errors():
    with pytest.raises(ConfigError, match="action='soft-reflective' applies to llmsched/FlowControl-v0 only"):
        gym.make(IDS[0], scenario="codegen", qps=10, action="soft-reflective")
    with pytest.raises(ConfigError, match="choose one of ceilings, soft-reflective"):
        gym.make(IDS[1], scenario="codegen", qps=10, action="duty")
    env = gym.make(IDS[1], scenario="codegen", qps=10, action="soft-reflective")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(np.array([0.5, 0.5, 0.5], np.float32))


def test_a_vector_reset_frees_the_previous_episodes_without_the_garbage_collector():
    """The simulator's router view holds no bound method of it (a cycle only a full collection
    frees), so a reset releases the previous episode's states at once: before, 16 chatbot
    clusters grew by ~150 MB a reset until the collector ran."""
    env = gym.make_vec("llmsched/Routing-v0", num_envs=2, vectorization_mode="vector_entry_point",
                       scenario="codegen", qps=4, horizon=1.0, hint="lmetric")
    env.reset(seed=0)
    previous = [weakref.ref(d.sim) for d in env.drivers] + [weakref.ref(env.batch)]
    gc.disable()
    try:
        env.reset(seed=1)
        assert [r() for r in previous] == [None] * len(previous)
    finally:
        gc.enable()
