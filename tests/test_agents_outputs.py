"""Training outputs load directly: ``agent:RUN``, ``agent:RUN/best`` and any checkpoint,
each with the VecNormalize statistics saved with it (not the final run's)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

from llmsched_gym.errors import ConfigError  # noqa: E402

TINY_FC = {"duration_s": 3.0, "horizon": None, "control_interval": 0.05}


@pytest.fixture(scope="module")
def fc_run(tmp_path_factory):
    """A tiny PPO FlowControl run (normalized observations) with several evaluations and
    checkpoints, so best, checkpoints and final stats differ."""
    from agents.train import train

    out = tmp_path_factory.mktemp("fc")
    train("llmsched/FlowControl-v0", ["codegen"], "ppo", 256, seed=0, out=out, rate_kind="qps", rates=[8.0],
          n_envs=2, overrides={"n_steps": 32, "batch_size": 32, "n_epochs": 1, "eval_duration_s": 2.0,
                               "env_kwargs": TINY_FC},
          eval_freq=64, eval_episodes=2, checkpoint_freq=64, progress=False)
    return out


def _stats(path):
    with open(path, "rb") as f:
        vn = pickle.load(f)
    return vn.obs_rms


def _same_rms(a, b) -> bool:
    return all(np.array_equal(a[k].mean, b[k].mean) and np.array_equal(a[k].var, b[k].var) for k in a)


def test_best_model_keeps_the_statistics_of_its_moment(fc_run):
    out = fc_run
    evals = np.load(out / "eval" / "evaluations.npz")
    best = _stats(out / "best" / "vecnormalize.pkl")
    final = _stats(out / "vecnormalize.pkl")
    ckpts = sorted(out.glob("checkpoints/model_vecnormalize_*_steps.pkl"),
                   key=lambda p: int(p.stem.split("_")[-2]))
    assert len(evals["timesteps"]) >= 3 and len(ckpts) >= 3
    # The best model was saved at one of the evaluations; its statistics are those of that
    # moment, which differ from the final ones (observation statistics keep moving).
    assert not _same_rms(best, final)
    # best/ is chosen by the harness metric (agents.selection; FlowControl's default
    # ttft_p99:critical), not by the mean reward: the last evaluation that became the best.
    rec = json.loads((out / "eval" / "evaluations_metrics.json").read_text())["evaluations"]
    assert [e["timesteps"] for e in rec] == evals["timesteps"].tolist()
    t_best = [e["timesteps"] for e in rec if e["new_best"]][-1]
    assert t_best == json.loads((out / "agent.json").read_text())["best_metric"]["timesteps"]
    # Evaluations and checkpoints fall on the same calls here (same frequency): the
    # checkpoint at the best evaluation's step holds the same statistics.
    match = [p for p in ckpts if int(p.stem.split("_")[-2]) == t_best]
    assert match, (t_best, [p.name for p in ckpts])
    assert _same_rms(best, _stats(match[0]))


def test_every_output_loads_with_its_own_statistics(fc_run):
    from agents.policy import agent_files, load_agent

    out = fc_run
    ckpt = sorted(out.glob("checkpoints/model_*_steps.zip"))[0]
    cases = {out: (out / "model.zip", out / "vecnormalize.pkl"),
             out / "model.zip": (out / "model.zip", out / "vecnormalize.pkl"),
             out / "best": (out / "best" / "best_model.zip", out / "best" / "vecnormalize.pkl"),
             out / "best" / "best_model.zip": (out / "best" / "best_model.zip", out / "best" / "vecnormalize.pkl"),
             ckpt: (ckpt, ckpt.parent / ckpt.name.replace("model_", "model_vecnormalize_").replace(".zip", ".pkl"))}
    for path, (model, stats) in cases.items():
        m, s, meta = agent_files(path)
        assert (m, s, meta) == (model, stats, out / "agent.json"), path
        a = load_agent(path)
        assert _same_rms(a.vecnorm.obs_rms, _stats(stats)), path


def test_checkpoint_acts_through_the_harness(fc_run):
    from llmsched_gym.evaluation.harness import evaluate

    ckpt = sorted(fc_run.glob("checkpoints/model_*_steps.zip"))[-1]
    table = evaluate("codegen", f"static-usage-limit;fc=agent:{ckpt}+label=ckpt;fc=agent:{fc_run}/best+label=best",
                     seeds=[1], qps=8.0, overrides={"duration_s": 2.0}, workers=1)
    rows = {r["policy"]: r for r in table.filter(class_="all")}
    assert rows["ckpt"]["requests"] == rows["best"]["requests"] == rows["static-usage-limit"]["requests"] > 0


def test_agent_path_errors(fc_run, tmp_path):
    from agents.policy import agent_files, load_agent

    with pytest.raises(ConfigError, match="no model file or directory there"):
        agent_files(tmp_path / "nothing")
    with pytest.raises(ConfigError, match="no model file in this directory"):
        agent_files(tmp_path)
    with pytest.raises(ConfigError, match="not a model"):
        agent_files(fc_run / "agent.json")
    # an interrupted run: checkpoints but no model.zip -> the error names a checkpoint
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    ck = sorted(fc_run.glob("checkpoints/model_*_steps.zip"))[0]
    (run / "checkpoints" / ck.name).write_bytes(ck.read_bytes())
    with pytest.raises(ConfigError, match="checkpoints"):
        agent_files(run)
    # a model without agent.json
    with pytest.raises(ConfigError, match="agent.json"):
        agent_files(run / "checkpoints" / ck.name)
    # normalized observations but the statistics are missing
    (run / "agent.json").write_text((fc_run / "agent.json").read_text())
    with pytest.raises(ConfigError, match="statistics are missing"):
        load_agent(run / "checkpoints" / ck.name)
    meta = json.loads((fc_run / "agent.json").read_text())
    assert meta["complete"] is True and meta["wall_seconds"] > 0


def test_an_interval_agent_refuses_another_cluster_size_before_simulating():
    from llmsched_gym.scenarios import make_scenario

    sc = make_scenario("codegen", paper_qps=16, instances=4)
    with pytest.raises(ConfigError, match="trained on 2 instances .* the cluster has 4"):
        sc.simulator(0, flow_control="agent:agents/pretrained/fc-codegen")
