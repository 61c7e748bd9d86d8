"""Residual flow control: the FlowControl agent starts exactly at the soft-reflective
ceiling (``--policy residual``: ``action="soft-reflective"``, a learned ramp/period
adjustment whose Gaussian mean starts at (0.5, 0.5))."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym  # noqa: E402
import torch as th  # noqa: E402
from conftest import TINY_PPO  # noqa: E402

import llmsched_gym  # noqa: E402,F401
from llmsched_gym.errors import ConfigError  # noqa: E402

FC = "llmsched/FlowControl-v0"
CODEGEN = dict(scenario="codegen", paper_qps=16, horizon=None)
#: the YAML's env settings (10 ms control, critical weighted 30x) on short episodes
ENV_KW = {"duration_s": 3.0, "horizon": None, "control_interval": 0.01, "priority_weights": {0: 30.0, -1: 1.0}}
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def fc_init_run(tmp_path_factory):
    """``--policy residual`` on FlowControl trained with learning rate 0: the saved model is
    the initial one (its VecNormalize statistics did move: the mean must not depend on them)."""
    from agents.train import train

    n = th.get_num_threads()
    th.set_num_threads(1)
    out = tmp_path_factory.mktemp("fc_residual0")
    train(FC, ["codegen"], "ppo", 128, seed=0, out=out, rate_kind="paper_qps", rates=[16.0], n_envs=2,
          overrides={**TINY_PPO, "learning_rate": 0.0, "eval_duration_s": 2.0, "env_kwargs": dict(ENV_KW)},
          eval_freq=10_000, eval_episodes=1, progress=False, policy_variant="residual")
    th.set_num_threads(n)
    return out


def test_residual_fc_run_metadata(fc_init_run):
    meta = json.loads((fc_init_run / "agent.json").read_text())
    assert meta["policy"].endswith("ResidualSoftReflectivePolicy") and meta["policy_variant"] == "residual"
    assert meta["env_kwargs"]["action"] == "soft-reflective"
    assert meta["env_kwargs"]["control_interval"] == 0.01
    from agents.policy import AgentSoftReflective
    from llmsched_gym.gateway.policy import make_policy

    assert isinstance(make_policy(f"agent:{fc_init_run}", "usage-limit"), AgentSoftReflective)


def test_untrained_residual_fc_acts_exactly_soft_reflective(fc_init_run):
    """On a real codegen episode at paper_qps 16 (saturation through the gated regime), the
    untrained model's deterministic action is (0.5, 0.5) exactly at every control interval,
    for the saved model (through its VecNormalize statistics) and a fresh one with another
    seed; the environment maps it to ramp 1, period scale 1."""
    from stable_baselines3 import PPO

    from agents.networks import ResidualSoftReflectivePolicy
    from agents.policy import load_agent
    from llmsched_gym.envs.core import soft_reflective_params

    assert soft_reflective_params(np.full(2, np.float32(0.5))) == (1.0, 1.0)
    loaded = load_agent(fc_init_run)
    env = gym.make(FC, action="soft-reflective", duration_s=14.0, control_interval=0.01, **CODEGEN)
    fresh = PPO(ResidualSoftReflectivePolicy, env, seed=7, device="cpu",
                policy_kwargs=dict(net_arch=[64, 64], log_std_init=-2.0))
    obs, _ = env.reset(seed=100)
    half = np.full(2, 0.5, np.float32)
    sats, steps, done = [], 0, False
    while not done:
        for a in (loaded.model.predict(loaded.normalize({k: v[None] for k, v in obs.items()}), deterministic=True)[0],
                  fresh.predict(obs, deterministic=True)[0]):
            a = np.asarray(a).reshape(-1)
            assert a.dtype == np.float32 and np.array_equal(a, half), (steps, a)
        with th.no_grad():  # the distribution's mean itself, not only the clipped action
            mean = fresh.policy.get_distribution(fresh.policy.obs_to_tensor(obs)[0]).distribution.mean
        assert th.equal(mean, th.full_like(mean, 0.5))
        obs, _, term, trunc, info = env.step(half)
        assert tuple(info["soft_reflective"]) == (1.0, 1.0)
        sats.append(float(env.unwrapped.simulator.saturation))
        steps += 1
        done = term or trunc or steps == 1800  # 18 s: the load ramps up to saturation ~0.8 from 10 s on
    sats = np.array(sats)
    assert steps == 1800 and (sats >= 0.5).mean() > 0.2 and np.unique(sats).size > 50  # real, gated observations


def _metric_rows(table):
    rows = {(r["policy"], r["seed"], r["class"]): r for r in table.rows}
    metrics = [k for k, v in next(iter(rows.values())).items()
               if isinstance(v, float) and (k.startswith(("ttft", "tpot", "e2e")) or k.endswith("_rps"))]
    return rows, metrics


def test_untrained_residual_fc_compares_equal_to_soft_reflective(fc_init_run):
    """Through the harness (``compare``), the untrained residual agent - the Python
    soft-reflective ceiling with the model's parameters, updated once per 10 ms control
    interval - gives soft-reflective-ceiling's (compiled) metrics bit for bit, on every
    class; and it is not static-usage-limit's (the gated regime is reached)."""
    from llmsched_gym.evaluation.harness import evaluate

    table = evaluate("codegen", f"soft-reflective-ceiling;static-usage-limit;fc=agent:{fc_init_run}+label=agent",
                     seeds=[100], paper_qps=16, overrides={"duration_s": 40.0}, workers=1)
    rows, metrics = _metric_rows(table)
    assert "ttft_mean" in metrics and "tpot_p99" in metrics
    n = 0
    for (pol, seed, cls), r in rows.items():
        if pol != "agent":
            continue
        ref = rows[("soft-reflective-ceiling", seed, cls)]
        for m in metrics:
            assert r[m] == ref[m] or (np.isnan(r[m]) and np.isnan(ref[m])), (seed, cls, m, r[m], ref[m])
        n += 1
    assert n >= 3  # all, critical, sheddable
    crit = {p: rows[(p, 100, "critical")]["ttft_p99"] for p in ("agent", "static-usage-limit")}
    assert crit["agent"] < 0.75 * crit["static-usage-limit"]  # 0.47 vs 0.90 s


def test_residual_fc_agent_follows_the_model(fc_init_run):
    """The adapter really uses the model: an action off (0.5, 0.5) (the final layer's bias
    moved) changes the parameters it sets and the run's results."""
    from agents.policy import AgentSoftReflective, LoadedAgent
    from llmsched_gym.evaluation.metrics import summarize
    from llmsched_gym.scenarios import make_scenario

    sc = make_scenario("codegen", paper_qps=16)
    sc = make_scenario("codegen", qps=sc.target_qps(), duration_s=40.0)

    def results(sim):
        sim.run()
        t = sim.table
        return summarize(sim)["classes"], [t.dispatch_t.copy(), t.first_token_t.copy(), t.instance.copy()]

    def run(bias):
        a = LoadedAgent(fc_init_run)
        with th.no_grad():
            a.model.policy.action_net.bias[:] = th.tensor(bias)
        pol = AgentSoftReflective("x", a)
        return results(sc.simulator(100, router="llm-d", flow_control=pol)), pol.history

    ref = results(sc.simulator(100, router="llm-d", flow_control="soft-reflective-ceiling"))
    base, hist0 = run([0.5, 0.5])
    moved, hist1 = run([0.5, 0.75])  # period scale 2: the sheddable band opens half as often
    assert {(r, k) for _, r, k in hist0} == {(1.0, 1.0)} and {(r, k) for _, r, k in hist1} == {(1.0, 2.0)}
    # one decision per 10 ms control interval (at its first dispatch cycle), while cycles run
    k = np.floor(np.array([t for t, *_ in hist0]) / 0.01 + 1e-9)
    assert len(hist0) > 1000 and np.all(np.diff(k) >= 1)
    assert base[0] == ref[0]  # per-class metrics
    for x, y in zip(base[1], ref[1]):  # and every request's dispatch, first token and instance
        np.testing.assert_array_equal(x, y)
    assert moved[0] != base[0] and not np.array_equal(moved[1][0], base[1][0])


def test_residual_fc_correction_learns():
    """With a learning rate the correction moves: the final layer leaves zero and the mean
    leaves 0.5."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    from agents.networks import ResidualSoftReflectivePolicy
    from agents.sb3 import to_sb3_vec_env

    venv = VecNormalize(to_sb3_vec_env(gym.make_vec(FC, num_envs=2, action="soft-reflective", **CODEGEN,
                                                    **{k: v for k, v in ENV_KW.items() if k != "horizon"})))
    m = PPO(ResidualSoftReflectivePolicy, venv, seed=0, device="cpu", learning_rate=1e-3, **TINY_PPO,
            policy_kwargs=dict(net_arch=[64, 64], log_std_init=-2.0))
    pol = m.policy
    assert th.equal(pol.action_net.weight, th.zeros_like(pol.action_net.weight))
    assert th.equal(pol.action_net.bias, th.full_like(pol.action_net.bias, 0.5))
    m.learn(128)
    assert not th.equal(pol.action_net.weight, th.zeros_like(pol.action_net.weight))
    obs = m._last_obs
    with th.no_grad():
        mean = pol.get_distribution(pol.obs_to_tensor(obs)[0]).distribution.mean
    assert not th.equal(mean, th.full_like(mean, 0.5))


def test_residual_fc_variant_errors(capsys):
    from agents.train import policy_variant_env_kwargs, policy_variant_hyperparams
    from llmsched_gym.cli import main

    hp = policy_variant_hyperparams(FC, "ppo", "residual")
    assert hp["policy"].endswith("ResidualSoftReflectivePolicy") and "log_std_init=-2.0" in hp["policy_kwargs"]
    assert policy_variant_env_kwargs(FC, "residual", {"duration_s": 60})["action"] == "soft-reflective"
    assert "action" not in policy_variant_env_kwargs(FC, "default", {"duration_s": 60})
    with pytest.raises(ConfigError, match="action"):
        policy_variant_env_kwargs(FC, "residual", {"action": "ceilings"})
    with pytest.raises(ConfigError, match="ppo"):
        policy_variant_hyperparams(FC, "sac", "residual")
    assert main(["train", "--env", FC, "--algo", "sac", "--policy", "residual", "--timesteps", "10",
                 "--out", "/tmp/never"]) == 2
    assert "ppo" in capsys.readouterr().err
    # without --algo, --policy residual on FlowControl means ppo (the hyperparameter check names it)
    assert main(["train", "--env", FC, "--policy", "residual", "--timesteps", "10", "--set", "bogus=1",
                 "--out", "/tmp/never"]) == 2
    assert "not a ppo hyperparameter" in capsys.readouterr().err


def test_residual_fc_defaults_merge_over_the_yaml(tmp_path):
    """``--policy residual`` on FlowControl changes some of the YAML's environment keywords
    (1 s decisions, full 180 s episodes, critical weighted 150x) and gamma, keeps the others
    (``horizon: null``), and ``--env-set`` / ``--duration`` still override it."""
    from agents.train import train

    n = th.get_num_threads()
    th.set_num_threads(1)
    try:
        meta = train(FC, ["codegen"], "ppo", 128, seed=0, out=tmp_path / "run", rate_kind="paper_qps", rates=[16.0],
                     n_envs=2, overrides={**TINY_PPO, "eval_duration_s": 4.0}, duration_s=4.0, eval_freq=10_000,
                     eval_episodes=1, progress=False, policy_variant="residual", env_overrides={"reward_scale": 0.5})
    finally:
        th.set_num_threads(n)
    kw = meta["env_kwargs"]
    assert kw["control_interval"] == 1.0 and kw["action"] == "soft-reflective"
    assert {int(k): v for k, v in kw["priority_weights"].items()} == {0: 150.0, -1: 1.0}
    assert kw["horizon"] is None and kw["duration_s"] == 4.0 and kw["reward_scale"] == 0.5
    assert meta["hyperparams"]["gamma"] == 0.95
