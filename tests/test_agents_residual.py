"""Residual policies: the routing agent starts exactly at LMetric (``--policy residual``)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

import gymnasium as gym  # noqa: E402
import torch as th  # noqa: E402
from conftest import TINY_PPO  # noqa: E402

import llmsched_gym  # noqa: E402,F401
from llmsched_gym.errors import ConfigError  # noqa: E402

CHATBOT = dict(scenario="chatbot", load=0.5, horizon=None)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batch(obs: dict) -> dict:
    return {k: th.as_tensor(v[None]) for k, v in obs.items()}


def _untrained_model(seed: int = 0, base_gain: float = 1.0):
    from sb3_contrib import MaskablePPO

    from agents.networks import MaskableResidualScorerPolicy
    from agents.sb3 import to_sb3_vec_env

    venv = to_sb3_vec_env(gym.make_vec("llmsched/Routing-v0", num_envs=1, duration_s=2.0, **CHATBOT))
    return MaskablePPO(MaskableResidualScorerPolicy, venv, n_steps=64, batch_size=64, device="cpu", seed=seed,
                       policy_kwargs=dict(features_extractor_kwargs=dict(base_gain=base_gain)))


def test_untrained_residual_router_decides_exactly_as_lmetric():
    """On a real chatbot episode (16 instances, load 0.5): the score recovered from the
    observation equals LMetric's metric bit for bit, and the untrained residual policy's
    deterministic choice is LMetric's (without the hotspot detector) at every request,
    whatever the base gain."""
    from agents.networks import lmetric_score
    from llmsched_gym.gateway.policy import make_policy

    models = [_untrained_model(0, 1.0), _untrained_model(1, 7.0)]
    env = gym.make("llmsched/Routing-v0", duration_s=4.0, **CHATBOT).unwrapped
    obs, _ = env.reset(seed=101)
    sim = env.simulator
    lm = make_policy("lmetric-no-detector", "routing")
    steps = differing = 0
    done = False
    while not done:
        view, req = sim.current_view(), sim.pending_info
        ref = lm.route(req, view)
        np.testing.assert_array_equal(lmetric_score(_batch(obs))[0].numpy(), lm.scores(req, view))
        for m in models:
            a, _ = m.predict(obs, deterministic=True, action_masks=env.action_masks())
            assert int(a) == ref, (steps, int(a), ref, lm.scores(req, view))
        differing += int(np.unique(lm.scores(req, view)).size > 1)
        obs, _, term, trunc, _ = env.step(ref)
        done = term or trunc
        steps += 1
    assert steps > 200 and differing > steps // 2  # real decisions, not all ties


def test_score_round_trip_is_exact_below_2_pow_20():
    """The observation's log scales of integer counts invert exactly below 2**20."""
    from agents.networks import lmetric_score

    rng = np.random.default_rng(0)
    q = np.concatenate([np.arange(0, 4000), rng.integers(0, 2**20, 4000)]).astype(np.int64)
    infl = rng.integers(0, 2**20, q.size)
    inp = rng.integers(1, 2**20, q.size)
    hit = (rng.random(q.size) * inp).astype(np.int64)
    ln2 = np.log(2.0)
    obs = {"prefill_tokens": (np.log1p(q) / (20 * ln2)).astype(np.float32)[:, None],
           "in_flight": (np.log1p(infl) / (10 * ln2)).astype(np.float32)[:, None],
           "prefix_hit": (hit / inp).astype(np.float32)[:, None],
           "request": np.stack([np.log1p(inp) / (20 * ln2)] + [np.zeros(q.size)] * 3, 1).astype(np.float32)}
    got = lmetric_score({k: th.as_tensor(v) for k, v in obs.items()})[:, 0].numpy()
    np.testing.assert_array_equal(got, ((q + np.maximum(0, inp - hit)) * (infl + 1)).astype(np.float64))


@pytest.fixture(scope="module")
def residual_init_run(tmp_path_factory):
    """``--policy residual`` trained with learning rate 0: the saved model is the initial one."""
    from agents.train import train

    out = tmp_path_factory.mktemp("residual0")
    train("llmsched/Routing-v0", ["chatbot"], "maskable-ppo", 128, seed=0, out=out, rate_kind="load", rates=[0.5],
          n_envs=2, overrides={**TINY_PPO, "learning_rate": 0.0, "eval_duration_s": 2.0,
                               "env_kwargs": {"duration_s": 3.0, "horizon": None}},
          eval_freq=10_000, eval_episodes=1, progress=False, policy_variant="residual")
    return out


def test_untrained_residual_agent_compares_equal_to_lmetric(residual_init_run):
    """Through the harness (``compare``), the untrained residual agent's metrics are
    LMetric's (no detector) exactly, on every seed and class."""
    import json

    from llmsched_gym.evaluation.harness import evaluate

    meta = json.loads((residual_init_run / "agent.json").read_text())
    assert meta["policy"].endswith("MaskableResidualScorerPolicy") and meta["policy_variant"] == "residual"
    table = evaluate("chatbot", f"lmetric-no-detector;agent:{residual_init_run}+label=agent", seeds=[100, 101],
                     load=0.5, overrides={"duration_s": 8.0}, workers=1)
    rows = {(r["policy"], r["seed"], r["class"]): r for r in table.rows}
    metrics = [k for k, v in next(iter(rows.values())).items()
               if isinstance(v, float) and (k.startswith(("ttft", "tpot", "e2e")) or k.endswith("_rps"))]
    assert "ttft_mean" in metrics and "tpot_p99" in metrics
    n = 0
    for (pol, seed, cls), r in rows.items():
        if pol != "agent":
            continue
        ref = rows[("lmetric-no-detector", seed, cls)]
        for m in metrics:
            assert r[m] == ref[m] or (np.isnan(r[m]) and np.isnan(ref[m])), (seed, cls, m, r[m], ref[m])
        n += 1
    assert n >= 2


def test_residual_correction_learns():
    """With a learning rate the correction moves off zero (the policy is trainable)."""
    from stable_baselines3.common.vec_env import VecNormalize

    m = _untrained_model(0)
    m.env = VecNormalize(m.env, norm_obs=False, norm_reward=True)
    ext = m.policy.features_extractor
    before = [p.detach().clone() for p in (ext.score_head.weight, ext.linear.weight, ext.log_base_gain)]
    m.learn(128)
    after = [ext.score_head.weight, ext.linear.weight, ext.log_base_gain]
    assert any(not th.equal(a, b) for a, b in zip(after, before))


def test_residual_variant_errors(capsys):
    from agents.train import policy_variant_hyperparams
    from llmsched_gym.cli import main

    assert policy_variant_hyperparams("llmsched/Routing-v0", "maskable-ppo", "residual")["policy"].endswith(
        "MaskableResidualScorerPolicy")
    assert policy_variant_hyperparams("llmsched/Routing-v0", "ppo", "default") == {}
    with pytest.raises(ConfigError, match="not available for llmsched/Routing-v0 with sac"):
        policy_variant_hyperparams("llmsched/Routing-v0", "sac", "residual")
    # FlowControl's residual (PPO only) is tested in tests/test_agents_residual_fc.py
    assert main(["train", "--env", "llmsched/FlowControl-v0", "--algo", "sac", "--policy", "residual",
                 "--timesteps", "10", "--out", "/tmp/never"]) == 2
    assert "it exists for ppo" in capsys.readouterr().err
    from agents.networks import ResidualLMetricScorer

    with pytest.raises(ValueError):
        ResidualLMetricScorer(_untrained_model().observation_space, base_gain=0.0)
