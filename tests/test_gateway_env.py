"""``llmsched/Gateway-v0`` (docs/environments.md): admission, flow control and routing in one
action per control interval; checkers, seeding, the centre action = the base combination
request for request, vector parity, bad actions and keywords."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym  # noqa: F401  (registers the environments)
from llmsched_gym.envs import BaselineAgent, run_episode
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.scenarios import make_scenario

GW = "llmsched/Gateway-v0"
RESIDUAL = dict(admission_action="probabilistic", flow_action="soft-reflective")
HOLDBACK = dict(flow_action="scaled-ceilings", flow_control="priority-holdback:cmax=2,cmin=1.2")
CODEGEN = dict(scenario="codegen", paper_qps=16)


def _same_requests(sim, ref) -> None:
    """Every request served identically: dispatch, first token, finish, instance, outcome."""
    for field in ("dispatch_t", "first_token_t", "finish_t", "instance", "outcome"):
        np.testing.assert_array_equal(getattr(sim.table, field), getattr(ref.table, field), err_msg=field)


def _random_episode(env, seed: int, steps: int) -> list:
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, r, te, tr, info = env.step(rng.random(env.action_space.shape).astype(np.float32))
        out.append((obs, r, te, tr, info["route_weights"]))
        if te or tr:
            break
    return out


# ============================================================================ checkers, spaces
@pytest.mark.parametrize("kwargs", [
    dict(scenario="codegen", qps=16, horizon=3),
    dict(scenario="chat", qps=60, horizon=1.5, **RESIDUAL),
    dict(scenario="codegen", qps=16, horizon=3, reward="slo", admission_action="probabilistic"),
    dict(scenario="chat", qps=60, horizon=1.5, flow_action="soft-reflective", observation={"normalize": False}),
    dict(scenario="codegen", qps=16, horizon=3, flow_action="none"),
    dict(scenario="codegen", qps=16, horizon=3, **HOLDBACK),
])
def test_env_checkers(kwargs):
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = gym.make(GW, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check(env.unwrapped, skip_render_check=True)
        sb3_check(env.unwrapped, warn=False)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)


def test_action_layout_and_centre():
    s = gym.make(GW, **CODEGEN, horizon=2).unwrapped.setup  # 1 sheddable band, 2 bands, 2 instances
    assert s.action_space.shape == (1 + 2 + 2,)
    np.testing.assert_array_equal(s.centre, [0.0, 1.0, 1.0, 0.5, 0.5])
    s = gym.make(GW, **CODEGEN, horizon=2, **RESIDUAL).unwrapped.setup
    assert s.action_space.shape == (1 + 2 + 2,)
    np.testing.assert_array_equal(s.centre, np.full(5, 0.5))
    s = gym.make(GW, scenario="chat", qps=60, horizon=1, instances=4, flow_action="soft-reflective").unwrapped.setup
    assert (s.adm, s.flow, s.route) == (slice(0, 1), slice(1, 3), slice(3, 7))
    s = gym.make(GW, **CODEGEN, horizon=1, flow_action="none").unwrapped.setup
    assert s.action_space.shape == (3,) and (s.flow, s.route) == (slice(1, 1), slice(1, 3))
    np.testing.assert_array_equal(s.centre, [0.0, 0.5, 0.5])
    s = gym.make(GW, **CODEGEN, horizon=1, **HOLDBACK).unwrapped.setup
    assert (s.flow, s.route) == (slice(1, 3), slice(3, 5))
    np.testing.assert_array_equal(s.centre, [0.0, 0.5, 0.5, 0.5, 0.5])
    np.testing.assert_array_equal(s.base_ceilings, [2.0, 1.2])
    s = gym.make(GW, **CODEGEN, horizon=1, flow_action="scaled-ceilings").unwrapped.setup
    np.testing.assert_array_equal(s.base_ceilings, [1.0, 1.0])  # static-usage-limit by default


# ============================================================================ seeding
def test_reset_seed_is_deterministic():
    a = _random_episode(gym.make(GW, **CODEGEN, horizon=3, **RESIDUAL), 7, 30)
    b = _random_episode(gym.make(GW, **CODEGEN, horizon=3, **RESIDUAL), 7, 30)
    assert len(a) == len(b) == 31
    for x, y in zip(a[1:], b[1:]):
        for k in x[0]:
            np.testing.assert_array_equal(x[0][k], y[0][k])
        assert x[1:4] == y[1:4]
        np.testing.assert_array_equal(x[4], y[4])
    c = _random_episode(gym.make(GW, **CODEGEN, horizon=3, **RESIDUAL), 8, 30)
    assert any(x[1] != y[1] for x, y in zip(a[1:], c[1:]))


# ============================================================================ the centre action
@pytest.mark.parametrize("kwargs,policies", [
    (RESIDUAL, dict(router="lmetric", flow_control="soft-reflective-ceiling", admission="probabilistic")),
    ({**RESIDUAL, "router": "lmetric-no-detector", "flow_control": "soft-reflective-ceiling:ramp=1.5,period_scale=2",
      "admission": "probabilistic:k=30"},
     dict(router="lmetric-no-detector", flow_control="soft-reflective-ceiling:ramp=1.5,period_scale=2",
          admission="probabilistic:k=30")),
    (dict(flow_action="none"), dict(router="lmetric", flow_control=None, admission="always-admit")),
    (dict(flow_action="soft-reflective"),
     dict(router="lmetric", flow_control="soft-reflective-ceiling", admission="always-admit")),
    (HOLDBACK, dict(router="lmetric", flow_control="priority-holdback:cmax=2,cmin=1.2", admission="always-admit")),
    ({**HOLDBACK, "flow_control": "static-usage-limit:threshold=1.1", "admission_action": "probabilistic"},
     dict(router="lmetric", flow_control="static-usage-limit:threshold=1.1", admission="probabilistic")),
])
def test_centre_action_is_the_base_combination(kwargs, policies):
    """Unless the flow part is raw ceilings, the centre action runs a baseline combination
    undisturbed: every request is served exactly as under ``router + flow_control +
    admission`` run by the simulator (what ``compare`` runs), in a vector env and in a single
    env driven by BaselineAgent("centre"); its episode metrics are the harness's summary."""
    ref = [make_scenario("codegen", paper_qps=16).simulator(ws, **policies, horizon_s=20).run() for ws in (5, 6)]
    venv = gym.make_vec(GW, num_envs=2, **CODEGEN, horizon=20, **kwargs)
    venv.unwrapped.autoreset = False  # keep the finished episodes' tables to compare
    venv.reset(seed=0, options={"workload_seed": [5, 6]})
    sims = list(venv.unwrapped.simulators)
    centre = np.tile(venv.unwrapped.setup.centre, (2, 1))
    for _ in range(200):  # 20 s of 0.1 s intervals: both episodes end at the horizon together
        _, _, te, tr, info = venv.step(centre)
    assert (te | tr).all()
    for sim, r in zip(sims, ref):
        _same_requests(sim, r)
        assert (sim.table.outcome == 2).any() == (policies["admission"] != "always-admit")  # 2: REJECTED
    env = gym.make(GW, **CODEGEN, horizon=20, **kwargs)
    ret, steps, info = run_episode(env, BaselineAgent("centre", env), options={"workload_seed": 5})
    assert steps == 200
    _same_requests(env.unwrapped.simulator, ref[0])
    assert info["episode"]["metrics"] == summarize(ref[0]) | {"wall_seconds": info["episode"]["metrics"][
        "wall_seconds"]}
    np.testing.assert_array_equal(info["route_weights"], [1.0, 1.0])


def _run_constant(action, **kwargs):
    env = gym.make(GW, **CODEGEN, horizon=20, **kwargs)
    env.reset(options={"workload_seed": 5})
    for _ in range(200):
        *_, info = env.step(np.asarray(action, np.float32))
    return env.unwrapped.simulator.table, info


@pytest.mark.parametrize("kwargs,centre,part,value", [
    (RESIDUAL, 0.5, 0, 1.0),  # admitter's k x 16
    (dict(flow_action="soft-reflective"), 0.0, 1, 1.0),  # ramp 2 (without shedding, the gated regime is reached)
    (dict(flow_action="soft-reflective"), 0.0, 2, 1.0),  # period scale 4
    (RESIDUAL, 0.5, 3, 0.9),  # instance 0 preferred
])
def test_off_centre_actions_move_each_part(kwargs, centre, part, value):
    """Each part of the action changes the run on its own."""
    a = np.full(5, 0.5)
    a[0] = centre
    ref, _ = _run_constant(a, **kwargs)
    a[part] = value
    t, info = _run_constant(a, **kwargs)
    assert not (np.array_equal(t.first_token_t, ref.first_token_t, equal_nan=True)
                and np.array_equal(t.instance, ref.instance))
    if part == 3:
        np.testing.assert_allclose(info["route_weights"], [4 ** -0.8, 1.0])
        assert (t.instance == 0).sum() > (ref.instance == 0).sum()
    if part == 0:
        assert info["admission_k"] == 300.0 * 16 and (t.outcome == 2).sum() > (ref.outcome == 2).sum()


def test_rejection_and_ceilings_mode_infos():
    env = gym.make(GW, **CODEGEN, horizon=1)
    env.reset(seed=0)
    *_, info = env.step(np.array([0.25, 0.8, 0.9, 1.0, 0.0], np.float32))
    np.testing.assert_allclose(info["rejection_prob"], [0.25])
    np.testing.assert_allclose(info["ceilings"], [0.8, 0.8])
    np.testing.assert_allclose(info["route_weights"], [0.25, 4.0])
    st = env.unwrapped.simulator.state
    np.testing.assert_allclose(st.ceil_ext[0, :2], [0.8, 0.8])


def test_scaled_ceilings_mode():
    """Ceilings = base x 2 ** (2 a - 1), non-increasing, above 1 where the base is; a
    changed ceiling holds the band at once, an unchanged one adds no dispatch cycle."""
    env = gym.make(GW, **CODEGEN, horizon=1, **HOLDBACK)
    env.reset(seed=0)
    *_, info = env.step(np.array([0.0, 1.0, 0.75, 0.5, 0.5], np.float32))
    np.testing.assert_allclose(info["ceilings"], [4.0, 1.2 * 2 ** 0.5])
    *_, info = env.step(np.array([0.0, 0.0, 1.0, 0.5, 0.5], np.float32))
    np.testing.assert_allclose(info["ceilings"], [1.0, 1.0])  # 2.4 for band 1 is cut to band 0's 1.0
    np.testing.assert_allclose(env.unwrapped.simulator.state.ceil_ext[0, :2], [1.0, 1.0])
    venv = gym.make_vec(GW, num_envs=2, **CODEGEN, horizon=1, **HOLDBACK)
    _, info = venv.reset(seed=0)
    np.testing.assert_allclose(info["ceilings"], [[2.0, 1.2]] * 2)  # the base before any action
    np.testing.assert_allclose(venv.unwrapped.batch.state.ceil_ext[:2, :2], [[2.0, 1.2]] * 2)
    a = np.array([[0.0, 1.0, 0.75, 0.5, 0.5], [0.0, 0.0, 1.0, 0.5, 0.5]], np.float32)
    *_, info = venv.step(a)
    np.testing.assert_allclose(info["ceilings"], [[4.0, 1.2 * 2 ** 0.5], [1.0, 1.0]])


# ============================================================================ vector env
@pytest.mark.parametrize("kwargs", [dict(horizon=2), dict(horizon=2, **RESIDUAL), dict(horizon=2, flow_action="none"),
                                    dict(horizon=2, reward="slo", flow_action="soft-reflective"),
                                    dict(horizon=2, **HOLDBACK)])
def test_vector_subenv_equals_single_env(kwargs):
    """Cluster k of the native vector env follows a single env reset with seed s + k, across
    an autoreset, for the same (random) actions."""
    n, steps = 3, 30  # 2 s episodes of 20 steps: every cluster autoresets once
    venv = gym.make_vec(GW, num_envs=n, **CODEGEN, **kwargs)
    rng = np.random.default_rng(0)
    acts = rng.random((steps, n, venv.single_action_space.shape[0])).astype(np.float32)
    obs_v, _ = venv.reset(seed=10)
    rec = [venv.step(acts[t]) for t in range(steps)]
    for k in range(n):
        env = gym.make(GW, **CODEGEN, **kwargs)
        obs, _ = env.reset(seed=10 + k)
        for key in obs:
            np.testing.assert_array_equal(obs[key], obs_v[key][k])
        for t in range(steps):
            obs, r, te, tr, info = env.step(acts[t, k])
            o_v, r_v, te_v, tr_v, info_v = rec[t]
            assert r == r_v[k] and te == te_v[k] and tr == tr_v[k]
            if te or tr:  # the vector env's info is the next episode's; the last one's is final_info
                fi = info_v["final_info"]
                np.testing.assert_array_equal(info["route_weights"], fi["route_weights"][k])
                assert info["episode"]["return"] == fi["episode"]["return"][k]
                obs, _ = env.reset()
            else:
                np.testing.assert_array_equal(info["route_weights"], info_v["route_weights"][k])
            for key in obs:
                np.testing.assert_array_equal(obs[key], o_v[key][k])


# ============================================================================ bad input
@pytest.mark.parametrize("bad", [[0.5] * 4, [0.5] * 6, [0.5, 0.5, np.nan, 0.5, 0.5], [0.5, 1.5, 0.5, 0.5, 0.5],
                                 [-0.2, 0.5, 0.5, 0.5, 0.5], [[0.5] * 5]])
def test_bad_actions(bad):
    env = gym.make(GW, **CODEGEN, horizon=1, **RESIDUAL)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"Gateway: action (must have shape \(5,\)|has non-finite|values must lie)"):
        env.step(np.array(bad, np.float32))


@pytest.mark.parametrize("bad,match", [
    (np.full((2, 4), 0.5), r"Gateway: actions must have shape \(2, 5\)"),
    (np.array([[0.5] * 5, [0.5, np.nan, 0.5, 0.5, 0.5]]), "Gateway: action of environment 1 has non-finite"),
    (np.array([[0.5] * 5, [0.5, 0.5, 0.5, 0.5, 1.2]]), r"Gateway: action values must lie in \[0, 1\]"),
])
def test_bad_vector_actions(bad, match):
    venv = gym.make_vec(GW, num_envs=2, **CODEGEN, horizon=1, **RESIDUAL)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        venv.step(bad.astype(np.float32))


@pytest.mark.parametrize("kwargs,match", [
    (dict(action="soft-reflective"), "unknown keyword 'action'"),
    (dict(admission_action="drop"), "choose one of rejection, probabilistic"),
    (dict(flow_action="duty"), "choose one of ceilings, soft-reflective, scaled-ceilings, none"),
    (dict(flow_action="scaled-ceilings", flow_control="soft-reflective-ceiling"), "static-usage-limit or priority-holdback"),
    (dict(router="jsq"), "weights LMetric's score"),
    (dict(admission="probabilistic"), "agent's decision with admission_action='rejection'"),
    (dict(flow_control="soft-reflective-ceiling"), "cannot be set with flow_action='ceilings'"),
    (dict(flow_action="none", flow_control="soft-reflective-ceiling"), "cannot be set with flow_action='none'"),
    (dict(admission_action="probabilistic", admission="legacy"), "scales the parameters of the engine's"),
    (dict(flow_action="soft-reflective", flow_control="static-usage-limit"), "scales the parameters of the soft"),
    (dict(scenario="chatbot", qps=10), "no sheddable class"),
    (dict(horizon=-1), "horizon"),
])
def test_bad_keywords(kwargs, match):
    kw = {**CODEGEN, "horizon": 1, **kwargs}
    if "qps" in kwargs:
        kw.pop("paper_qps")
    with pytest.raises(ConfigError, match=match):
        gym.make(GW, **kw)


def test_baseline_agent_takes_only_the_centre():
    env = gym.make(GW, **CODEGEN, horizon=1)
    with pytest.raises(ConfigError, match="policy='centre'"):
        BaselineAgent("lmetric", env)
    np.testing.assert_array_equal(BaselineAgent("centre", env).act(), env.unwrapped.setup.centre)


# ============================================================================ training
def test_residual_ppo_trains_and_starts_at_the_centre(tmp_path, one_torch_thread):
    """``llmsched-gym train --env llmsched/Gateway-v0 --policy residual``: a short PPO run
    through the training script; the untrained policy's deterministic action is exactly the
    centre (the base combination), and the run's metadata records the environment."""
    pytest.importorskip("stable_baselines3")
    import json

    import torch as th
    from conftest import TINY_PPO
    from stable_baselines3 import PPO

    from agents.train import train

    out = tmp_path / "gw"
    kw = dict(rate_kind="paper_qps", rates=[16.0], n_envs=2, eval_freq=10_000, eval_episodes=1, progress=False,
              policy_variant="residual", env_overrides={"admission": "probabilistic:k=30", **RESIDUAL})
    train(GW, ["codegen"], "ppo", 256, seed=0, out=out, **kw,
          overrides={**TINY_PPO, "eval_duration_s": 2.0, "env_kwargs": {"duration_s": 3.0, "horizon": None}})
    meta = json.loads((out / "agent.json").read_text())
    assert meta["complete"] and meta["timesteps"] == 256 and meta["policy"].endswith("ResidualGatewayPolicy")
    assert meta["env_kwargs"]["admission_action"] == "probabilistic" and meta["select"] == "slo_attainment:all"
    assert meta["env_kwargs"]["admission"] == "probabilistic:k=30"
    # an untrained model (learning rate 0) acts at the centre on a real episode
    train(GW, ["codegen"], "ppo", 128, seed=1, out=tmp_path / "gw0", **kw,
          overrides={**TINY_PPO, "learning_rate": 0.0, "eval_duration_s": 2.0,
                     "env_kwargs": {"duration_s": 3.0, "horizon": None}})
    model = PPO.load(str(tmp_path / "gw0" / "model.zip"), device="cpu")
    assert model.policy.action_centre == [0.5] * 5
    env = gym.make(GW, **CODEGEN, duration_s=3.0, horizon=None, **RESIDUAL, admission="probabilistic:k=30")
    obs, _ = env.reset(options={"workload_seed": 5})
    for _ in range(20):
        a, _ = model.predict(obs, deterministic=True)
        np.testing.assert_array_equal(a, np.full(5, 0.5, np.float32))
        obs, *_ = env.step(a)
    assert th.equal(model.policy.action_net.weight, th.zeros_like(model.policy.action_net.weight))


def test_residual_starts_at_a_raw_mode_centre(tmp_path, one_torch_thread):
    """With admission_action="rejection" the residual's mean starts at rejection probability
    0 (admit all) and 0.5 for the routing factors: the deterministic policy is the centre."""
    pytest.importorskip("stable_baselines3")
    from conftest import TINY_PPO
    from stable_baselines3 import PPO

    from agents.train import train

    train(GW, ["codegen"], "ppo", 128, seed=0, out=tmp_path / "gw", rate_kind="paper_qps", rates=[16.0], n_envs=2,
          eval_freq=10_000, eval_episodes=1, progress=False, policy_variant="residual",
          overrides={**TINY_PPO, "learning_rate": 0.0, "eval_duration_s": 2.0,
                     "env_kwargs": {"duration_s": 3.0, "horizon": None, "admission_action": "rejection",
                                    "flow_action": "none"}})
    model = PPO.load(str(tmp_path / "gw" / "model.zip"), device="cpu")
    assert model.policy.action_centre == [0.0, 0.5, 0.5]
    env = gym.make(GW, **CODEGEN, duration_s=3.0, horizon=None, flow_action="none")
    obs, _ = env.reset(options={"workload_seed": 5})
    for _ in range(10):
        a, _ = model.predict(obs, deterministic=True)
        np.testing.assert_array_equal(a, [0.0, 0.5, 0.5])
        obs, *_ = env.step(a)


def test_gateway_agent_in_the_harness(tmp_path, one_torch_thread):
    """``gateway=agent:PATH`` (or a bare ``agent:PATH``) evaluates a Gateway-v0 model in the
    harness: an untrained residual model acts its centre, so every metric of its cells
    equals the base combination's; other roles beside it are refused."""
    pytest.importorskip("stable_baselines3")
    from conftest import TINY_PPO

    from agents.train import train
    from llmsched_gym.evaluation import evaluate
    from llmsched_gym.evaluation.harness import METRIC_COLUMNS
    from llmsched_gym.gateway.policy import make_policy, parse_policy

    out = tmp_path / "gw"
    train(GW, ["codegen"], "ppo", 128, seed=0, out=out, rate_kind="paper_qps", rates=[16.0], n_envs=2,
          eval_freq=10_000, eval_episodes=1, progress=False, policy_variant="residual",
          env_overrides={"flow_control": "priority-holdback:cmax=2,cmin=1.2"},
          overrides={**TINY_PPO, "learning_rate": 0.0, "eval_duration_s": 2.0,
                     "env_kwargs": {"duration_s": 3.0, "horizon": None, "admission_action": "rejection",
                                    "flow_action": "scaled-ceilings"}})
    base = "lmetric+priority-holdback:cmax=2,cmin=1.2+always-admit"
    table = evaluate("codegen", [f"gateway=agent:{out}+label=gw", f"agent:{out}+label=bare", f"{base}+label=base"],
                     [5, 6], paper_qps=16, overrides={"duration_s": 4.0}, workers=1)
    rows = {(r["policy"], r["seed"], r["class"]): r for r in table.rows}
    for (pol, seed, cls), r in rows.items():
        if pol != "base":
            ref = rows[("base", seed, cls)]
            assert all(r[k] == ref[k] or (r[k] != r[k] and ref[k] != ref[k]) for k in METRIC_COLUMNS), (pol, seed, cls)
            assert (r["router"], r["flow_control"]) == ("lmetric-weighted", "external-ceilings")
    assert rows[("gw", 5, "all")]["requests"] > 0
    with pytest.raises(ConfigError, match="gateway= decides routing, flow control and admission together"):
        parse_policy(f"gateway=agent:{out}+router=jsq")
    with pytest.raises(ConfigError, match="is a 'gateway' policy, expected 'routing' .this trained model takes the "
                                          "gateway role"):
        make_policy(f"agent:{out}", "routing")


def test_train_cli_env_flags_errors(capsys):
    """``--env-set`` and the base-policy flags reach the environment: a bad value is a
    one-line error (exit 2) before training."""
    pytest.importorskip("stable_baselines3")
    from llmsched_gym.cli import main

    common = ["train", "--env", GW, "--algo", "ppo", "--timesteps", "10", "--no-progress", "--out", "/tmp/never"]
    assert main([*common, "--env-set", "flow_action=duty"]) == 2
    assert "choose one of ceilings, soft-reflective, scaled-ceilings, none" in capsys.readouterr().err
    assert main([*common, "--router", "jsq"]) == 2
    assert "weights LMetric's score" in capsys.readouterr().err
    assert main([*common, "--env-set", "flow_action"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
