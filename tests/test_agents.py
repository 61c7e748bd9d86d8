"""RL agents: training entry points, saved models as policies, observation parity.

The default run trains for a few hundred steps (tiny clusters, short windows); the
reproduction of the shipped pretrained agents is marked ``slow``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

import gymnasium as gym  # noqa: E402

import llmsched_gym  # noqa: E402,F401
from llmsched_gym.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRETRAINED = ROOT / "agents" / "pretrained"

TINY_ROUTING = dict(instances=2, duration_s=4.0, horizon=None)
TINY_PPO = dict(n_steps=64, batch_size=64, n_epochs=2)


@pytest.fixture(scope="module")
def routing_run(tmp_path_factory):
    from agents.train import train

    out = tmp_path_factory.mktemp("routing")
    meta = train("llmsched/Routing-v0", ["chatbot"], "maskable-ppo", 256, seed=3, out=out, rate_kind="qps",
                 rates=[15.0], n_envs=2, overrides={**TINY_PPO, "env_kwargs": TINY_ROUTING, "eval_duration_s": 3.0},
                 eval_freq=128, eval_episodes=2, progress=False)
    return out, meta


def test_train_writes_model_stats_and_metadata(routing_run):
    out, meta = routing_run
    for f in ("model.zip", "vecnormalize.pkl", "agent.json", "eval/evaluations.npz", "best/best_model.zip"):
        assert (out / f).exists(), f
    assert list((out / "tb").iterdir()), "no TensorBoard log"
    saved = json.loads((out / "agent.json").read_text())
    assert saved["env_id"] == "llmsched/Routing-v0" and saved["algo"] == "maskable-ppo" and saved["seed"] == 3
    assert saved["eval_workload_seeds_from"] >= 1_000_000
    assert meta["wall_seconds"] > 0


def test_router_builds_exactly_the_env_observation(routing_run):
    from llmsched_gym.gateway.policy import make_policy

    out, _ = routing_run
    pol = make_policy(f"agent:{out}", "routing")
    env = gym.make("llmsched/Routing-v0", scenario="chatbot", qps=30.0, instances=3, duration_s=3.0,
                   horizon=None).unwrapped
    obs, _ = env.reset(seed=0)
    sim = env.simulator
    steps = 0
    done = False
    while not done and steps < 150:
        mine = pol.observation(sim.pending_info, sim.current_view())
        assert set(mine) == set(obs)
        for k in obs:
            np.testing.assert_array_equal(mine[k][0], obs[k], err_msg=k)
        a = pol.route(sim.pending_info, sim.current_view())
        assert 0 <= a < 3  # a scorer trained on 2 instances routes 3
        obs, _, term, trunc, _ = env.step(a)
        done = term or trunc
        steps += 1
    assert steps > 20


def test_trained_router_through_the_evaluation_harness(routing_run):
    from llmsched_gym.evaluation.harness import evaluate

    out, _ = routing_run
    table = evaluate("chatbot", f"jsq;agent:{out}+label=agent", seeds=[7], qps=15.0,
                     overrides={"instances": 2, "duration_s": 4.0}, workers=1)
    rows = {r["policy"]: r for r in table.filter(class_="all")}
    assert set(rows) == {"jsq", "agent"}
    assert rows["agent"]["requests"] == rows["jsq"]["requests"] > 0  # paired workload
    assert rows["agent"]["finished"] == rows["agent"]["requests"]
    assert rows["agent"]["router"] == "agent"


def test_flow_control_agent_trains_and_acts_as_usage_limit(tmp_path):
    from agents.train import train
    from llmsched_gym.evaluation.harness import evaluate
    from llmsched_gym.gateway.policy import make_policy

    train("llmsched/FlowControl-v0", ["codegen"], "sac", 200, seed=0, out=tmp_path, rate_kind="qps", rates=[8.0],
          n_envs=2, overrides={"learning_starts": 50, "batch_size": 32, "eval_duration_s": 3.0,
                               "env_kwargs": {"duration_s": 3.0, "horizon": None}},
          eval_freq=100, eval_episodes=2, progress=False)
    pol = make_policy(f"agent:{tmp_path}", "usage-limit")
    assert pol.role == "usage-limit"
    table = evaluate("codegen", f"static-usage-limit;fc=agent:{tmp_path}+label=agent", seeds=[1], qps=8.0,
                     overrides={"duration_s": 4.0}, workers=1)
    rows = {r["policy"]: r for r in table.filter(class_="all")}
    assert rows["agent"]["flow_control"] == "agent"
    assert rows["agent"]["requests"] == rows["static-usage-limit"]["requests"] > 0


def test_flow_control_agent_decides_from_the_env_observation(tmp_path):
    """The usage-limit policy's observation is the FlowControl env's (same driver code)."""
    from agents.policy import ObservationBuilder

    env = gym.make("llmsched/FlowControl-v0", scenario="codegen", qps=12.0, duration_s=3.0, horizon=None).unwrapped
    obs, _ = env.reset(seed=1)
    for _ in range(15):
        obs, *_ = env.step(np.array([1.0, 0.5], np.float32))
    sim = env.simulator
    b = ObservationBuilder("flow_control", sim.current_view())
    mine = b.build(sim.current_view(), band_arrival_rate=env.driver._last_arrivals)
    for k in obs:
        np.testing.assert_array_equal(mine[k][0], obs[k], err_msg=k)


def test_rates_curriculum_and_errors():
    from agents.train import curriculum, load_hyperparams, parse_rates

    assert parse_rates("0.5") == [0.5]
    assert parse_rates("0.3:0.7:3") == pytest.approx([0.3, 0.5, 0.7])
    assert parse_rates("0.3,0.6") == [0.3, 0.6]
    assert curriculum(["chatbot", "agent"], "load", [0.3, 0.5]) == [
        ("chatbot", {"load": 0.3}), ("chatbot", {"load": 0.5}), ("agent", {"load": 0.3}), ("agent", {"load": 0.5})]
    with pytest.raises(ConfigError):
        parse_rates("0.7:0.3")
    with pytest.raises(ConfigError):
        parse_rates("fast")
    with pytest.raises(ConfigError):
        load_hyperparams("llmsched/Routing-v0", "dqn")
    for env_id, algo in (("llmsched/Routing-v0", "maskable-ppo"), ("llmsched/Routing-v0", "ppo"),
                         ("llmsched/FlowControl-v0", "sac"), ("llmsched/FlowControl-v0", "ppo"),
                         ("llmsched/Admission-v0", "sac"), ("llmsched/Admission-v0", "ppo")):
        hp = load_hyperparams(env_id, algo)
        assert "policy" in hp and "normalize" in hp


def test_curriculum_mixture_concatenates_vector_envs():
    from agents.train import make_venv

    venv = make_venv("llmsched/Routing-v0", [("chatbot", {"qps": 10.0}), ("agent", {"qps": 20.0})], 3,
                     {"instances": 2, "duration_s": 3.0, "horizon": None}, seed=0)
    obs = venv.reset()
    assert obs["running"].shape == (3, 2) and venv.action_masks().shape == (3, 2)
    for _ in range(20):
        obs, rew, done, infos = venv.step(np.zeros(3, np.int64))
    assert rew.shape == (3,) and len(infos) == 3


def test_cli_train_errors_exit_2(capsys):
    from llmsched_gym.cli import main

    assert main(["train", "--env", "llmsched/FlowControl-v0", "--algo", "maskable-ppo", "--timesteps", "10",
                 "--out", "/tmp/never"]) == 2
    assert "maskable-ppo" in capsys.readouterr().err
    assert main(["train", "--load", "0.9:0.1", "--timesteps", "10", "--out", "/tmp/never"]) == 2


def test_agent_spec_errors():
    from llmsched_gym.gateway.policy import make_policy

    with pytest.raises(ConfigError):
        make_policy("agent:/nonexistent/model", "routing")


@pytest.mark.skipif(not (PRETRAINED / "routing-chatbot" / "model.zip").exists(), reason="no pretrained agent")
def test_pretrained_agents_load_and_act():
    from llmsched_gym.gateway.policy import make_policy

    for name in ("routing-chatbot", "routing-residual"):
        r = make_policy(f"agent:{PRETRAINED / name}", "routing")
        assert r.role == "routing"
    if (PRETRAINED / "fc-codegen" / "model.zip").exists():
        f = make_policy(f"agent:{PRETRAINED / 'fc-codegen'}", "usage-limit")
        assert f.role == "usage-limit"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["routing-chatbot", "routing-residual", "fc-codegen", "fc-residual"])
def test_reproduce_pretrained_agent(name, tmp_path):
    """Retrain a shipped agent with its documented command and check that the new
    policy's score lies inside the interval reported in agents/pretrained/<name>/REPRODUCE.json."""
    import shlex
    import subprocess

    from llmsched_gym.evaluation.harness import evaluate

    d = PRETRAINED / name
    if not (d / "REPRODUCE.json").exists():
        pytest.skip("no reproduction record")
    rec = json.loads((d / "REPRODUCE.json").read_text())
    cmd = shlex.split(rec["command"].replace("OUT", str(tmp_path / "run")))
    subprocess.run(cmd, check=True, cwd=ROOT)
    ev = rec["evaluation"]
    spec = ev["policy_template"].replace("PATH", str(tmp_path / "run"))
    table = evaluate(ev["scenario"], spec, seeds=ev["seeds"], **{ev["rate_kind"]: ev["rate"]},
                     overrides=ev.get("overrides"), workers=1)
    vals = [r[ev["metric"]] for r in table.filter(class_=ev["class"])]
    score = float(np.mean(vals))
    lo, hi = ev["interval"]
    print(f"{name}: reproduced {ev['metric']} {score:.4f}, shipped {ev['shipped_score']:.4f}, interval [{lo:.4f}, {hi:.4f}]")
    assert lo <= score <= hi, f"{name}: reproduced {ev['metric']} {score:.4f} outside the reported [{lo}, {hi}]"
