"""Model selection by the harness's metrics: ``episode_metrics`` through the SB3 adapter,
the selecting EvalCallback (``agents.selection``), ``--select`` and the training outputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

import gymnasium as gym  # noqa: E402

import llmsched_gym  # noqa: E402,F401
from llmsched_gym.errors import ConfigError  # noqa: E402

TINY = dict(scenario="chatbot", qps=15.0, instances=2, duration_s=2.0, horizon=None)


def _same(a, b) -> bool:
    """Equal nested dicts, NaN equal to NaN."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def _run_until_done(venv, n_envs):
    venv.seed(0)
    venv.reset()
    for _ in range(10_000):
        _, _, dones, infos = venv.step(np.zeros(n_envs, np.int64))
        if dones.any():
            return dones, infos
    raise AssertionError("no episode ended")


# ====================================================================== the adapter
def test_native_vector_env_metrics_reach_sb3_infos():
    from agents.sb3 import to_sb3_vec_env

    venv = to_sb3_vec_env(gym.make_vec("llmsched/Routing-v0", num_envs=2, **TINY))
    dones, infos = _run_until_done(venv, 2)
    for i in range(2):
        if dones[i]:
            m = infos[i]["episode_metrics"]
            assert _same(m, venv.venv.last_final_info[i]["episode"]["metrics"])
            assert set(m["classes"]) >= {"all"} and isinstance(m["classes"]["all"]["ttft_mean"], float)
            assert isinstance(m["classes"]["all"]["requests"], int) and m["classes"]["all"]["requests"] > 0
        else:
            assert "episode_metrics" not in infos[i]  # only for envs whose episode ended
    venv.close()


def test_sync_vector_env_metrics_reach_sb3_infos():
    """gymnasium's own SyncVectorEnv (SAME_STEP) over single envs: the same summary as the
    single env's ``info["episode"]["metrics"]``, un-batched from its dict-of-arrays."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from agents.sb3 import to_sb3_vec_env

    sync = SyncVectorEnv([lambda: gym.make("llmsched/Routing-v0", **TINY) for _ in range(2)],
                         autoreset_mode=AutoresetMode.SAME_STEP)
    venv = to_sb3_vec_env(sync)
    venv.seed(0)
    venv.reset()
    single = gym.make("llmsched/Routing-v0", **TINY)
    single.reset(seed=0)
    for _ in range(10_000):
        _, _, dones, infos = venv.step(np.zeros(2, np.int64))
        *_, term, trunc, info = single.step(0)
        if dones[0]:
            assert term or trunc
            ours, theirs = dict(infos[0]["episode_metrics"]), dict(info["episode"]["metrics"])
            ours.pop("wall_seconds"), theirs.pop("wall_seconds")  # two runs' wall clocks
            assert _same(ours, theirs)
            break
    else:
        raise AssertionError("no episode ended")
    venv.close()


def test_unbatch_info_respects_masks():
    from agents.sb3 import episode_metrics, unbatch_info

    info = {"final_info": {"episode": {"metrics": {"classes": {
        "critical": {"ttft_mean": np.array([0.0, 2.0]), "requests": np.array([0, 5])},
        "_critical": np.array([False, True]),
        "all": {"ttft_mean": np.array([1.0, 2.0]), "requests": np.array([3, 5])},
        "_all": np.array([True, True])}}, "_metrics": np.array([True, True])},
        "_episode": np.array([True, True])}, "_final_info": np.array([True, True])}
    assert episode_metrics(info, 0) == {"classes": {"all": {"ttft_mean": 1.0, "requests": 3}}}
    m1 = episode_metrics(info, 1)
    assert m1["classes"]["critical"] == {"ttft_mean": 2.0, "requests": 5}
    assert type(m1["classes"]["all"]["requests"]) is int
    info["_final_info"] = np.array([True, False])
    assert episode_metrics(info, 1) is None
    assert episode_metrics({}, 0) is None
    assert unbatch_info({"a": np.array([1, 2]), "_a": np.array([False, True])}, 0) == {}


# ====================================================================== --select
def test_parse_select_and_errors():
    from agents.selection import DEFAULT_SELECT, parse_select

    s = parse_select("ttft_p99:critical")
    assert (s.metric, s.cls, s.higher_is_better, s.text) == ("ttft_p99", "critical", False, "ttft_p99:critical")
    assert parse_select("ttft_mean").cls == "all"
    assert parse_select("slo_attainment:critical").higher_is_better
    assert parse_select("goodput_rps:sheddable").higher_is_better
    assert parse_select("reward").metric == "reward"
    for text in DEFAULT_SELECT.values():
        parse_select(text)
    for bad, msg in (("ttft_avg:all", "unknown metric 'ttft_avg'"), ("ttft_mean:vip", "unknown class 'vip'"),
                     ("", "invalid"), ("ttft_mean:all:x", "unknown class"), ("requests", "unknown metric")):
        with pytest.raises(ConfigError, match=msg):
            parse_select(bad)


def test_cli_select_error_exits_2(capsys, tmp_path):
    from llmsched_gym.cli import main

    assert main(["train", "--select", "ttft_avg:all", "--timesteps", "10", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--select" in err and "ttft_avg" in err and "slo_attainment" in err
    assert not (tmp_path / "x").exists()


# ====================================================================== the callback
def _metrics(ttft_mean, slo):
    return {"classes": {"all": {"ttft_mean": ttft_mean, "ttft_p99": 2 * ttft_mean, "slo_attainment": slo},
                        "critical": {"ttft_mean": ttft_mean / 2, "slo_attainment": slo}}}


#: three evaluations, two episodes each: (episode rewards, episode metrics). Mean reward
#: ranks them 1 > 2 > 0, TTFT mean (median over episodes) 2 < 0 < 1, SLO attainment 1 > 2 > 0.
EVALS = [([-10.0, -10.0], [_metrics(1.0, 0.5), _metrics(1.0, 0.5)]),
         ([-1.0, -1.0], [_metrics(5.0, 0.9), _metrics(5.0, 0.9)]),
         ([-5.0, -5.0], [_metrics(0.4, 0.7), _metrics(0.6, 0.7)])]


def _drive(tmp_path, monkeypatch, select, evals=EVALS, maskable=False, start=False):
    """Run the selecting callback over synthetic evaluations (``evaluate_policy`` patched):
    returns (callback, timesteps at which callback_on_new_best ran)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.selection import eval_callback_class

    queue = list(evals)

    def fake_evaluate(model, env, n_eval_episodes=1, callback=None, return_episode_rewards=False, **kw):
        rewards, metrics = queue.pop(0)
        for m in metrics:
            callback({"done": True, "info": {"episode_metrics": m}}, {})
        return list(rewards), [10] * len(rewards)

    mod = "sb3_contrib.common.maskable.callbacks" if maskable else "stable_baselines3.common.callbacks"
    monkeypatch.setattr(f"{mod}.evaluate_policy", fake_evaluate)

    seen = []

    class Record(BaseCallback):
        def _on_step(self):
            seen.append(self.model.num_timesteps)
            return True

    env = DummyVecEnv([lambda: gym.make("CartPole-v1")])
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, device="cpu")
    model.set_logger(configure(None, []))
    cb = eval_callback_class(maskable)(env, n_eval_episodes=2, eval_freq=1, log_path=str(tmp_path / "eval"),
                                       best_model_save_path=str(tmp_path / "best"), callback_on_new_best=Record(),
                                       select=select, warn=False, evaluate_start=start)
    cb.init_callback(model)
    if start:  # the first evaluation is training start's (timestep 0)
        model.num_timesteps = 0
        cb.on_training_start({}, {})
    for k in range(len(evals) - start):
        model.num_timesteps = 100 * (k + 1)
        assert cb.on_step()
    return cb, seen


@pytest.mark.parametrize("maskable", [False, True])
def test_callback_selects_by_harness_metric_not_reward(tmp_path, monkeypatch, maskable):
    cb, seen = _drive(tmp_path, monkeypatch, "ttft_mean:all", maskable=maskable)
    # by TTFT mean: evaluation 0 (first), then 2 (0.5 < 1.0); evaluation 1 has the best reward
    assert seen == [100, 300]
    assert cb.best_mean_reward == -5.0 and cb.best_metric()["value"] == pytest.approx(0.5)
    assert cb.best_metric()["timesteps"] == 300 and not cb.best_metric()["higher_is_better"]
    assert (tmp_path / "best" / "best_model.zip").exists()
    rec = json.loads((tmp_path / "eval" / "evaluations_metrics.json").read_text())
    assert rec["select"] == "ttft_mean:all"
    assert [e["new_best"] for e in rec["evaluations"]] == [True, False, True]
    assert [e["value"] for e in rec["evaluations"]] == pytest.approx([1.0, 5.0, 0.5])
    assert rec["evaluations"][2]["episodes"] == pytest.approx([0.4, 0.6])
    assert rec["evaluations"][1]["classes"]["critical"]["ttft_mean"] == pytest.approx(2.5)
    assert [e["mean_reward"] for e in rec["evaluations"]] == [-10.0, -1.0, -5.0]
    # the learning curve is still written by the parent
    assert len(np.load(tmp_path / "eval" / "evaluations.npz")["timesteps"]) == 3


def test_callback_directions_reward_and_ties(tmp_path, monkeypatch):
    _, seen = _drive(tmp_path / "slo", monkeypatch, "slo_attainment:critical")  # higher is better
    assert seen == [100, 200]
    cb, seen = _drive(tmp_path / "r", monkeypatch, "reward")  # SB3's rule
    assert seen == [100, 200] and cb.best_mean_reward == -1.0
    _, seen = _drive(tmp_path / "p99", monkeypatch, "ttft_p99:all")
    assert seen == [100, 300]
    # equal metric: the mean reward breaks the tie; NaN (a class without requests) ranks last
    tie = [([-3.0], [_metrics(1.0, 0.5)]), ([-2.0], [_metrics(1.0, 0.5)]), ([-1.0], [_metrics(1.0, 0.5)])]
    _, seen = _drive(tmp_path / "tie", monkeypatch, "ttft_mean:all", tie)
    assert seen == [100, 200, 300]
    nan = [([-3.0], [_metrics(math.nan, 0.5)]), ([-9.0], [_metrics(2.0, 0.5)]), ([-1.0], [_metrics(math.nan, 0.5)])]
    cb, seen = _drive(tmp_path / "nan", monkeypatch, "ttft_mean:all", nan)
    assert seen == [100, 200]
    rec = json.loads((tmp_path / "nan" / "eval" / "evaluations_metrics.json").read_text())
    assert rec["evaluations"][0]["value"] is None
    # a class absent from every episode is NaN too
    _, seen = _drive(tmp_path / "absent", monkeypatch, "ttft_mean:sheddable")
    assert seen == [100, 200]  # all NaN: the reward decides


def test_the_untrained_policy_is_evaluated_first(tmp_path, monkeypatch):
    # training start evaluates at timestep 0: if every later evaluation is worse, best/ is the start
    worse = [([-1.0], [_metrics(0.2, 0.5)]), ([-2.0], [_metrics(0.9, 0.5)]), ([-3.0], [_metrics(0.8, 0.5)])]
    cb, seen = _drive(tmp_path, monkeypatch, "ttft_mean:all", worse, start=True)
    assert seen == [0] and cb.best_metric()["timesteps"] == 0
    assert np.load(tmp_path / "eval" / "evaluations.npz")["timesteps"].tolist() == [0, 100, 200]


def test_callback_needs_episode_metrics(tmp_path, monkeypatch):
    none = [([-1.0], [None])]
    with pytest.raises(ConfigError, match="episode_metrics"):
        _drive(tmp_path, monkeypatch, "ttft_mean:all", none)
    _, seen = _drive(tmp_path / "r", monkeypatch, "reward", none)
    assert seen == [100]


# ====================================================================== end to end
def test_train_selects_best_by_harness_metric(tmp_path):
    from agents.train import train

    out = tmp_path / "run"
    meta = train("llmsched/Routing-v0", ["chatbot"], "maskable-ppo", 256, seed=3, out=out, rate_kind="qps",
                 rates=[15.0], n_envs=2, overrides={"n_steps": 64, "batch_size": 64, "n_epochs": 1,
                                                    "env_kwargs": {"instances": 2, "duration_s": 3.0,
                                                                   "horizon": None},
                                                    "eval_duration_s": 2.0},
                 eval_freq=64, eval_episodes=2, progress=False, select="ttft_p99:all")
    for f in ("best/best_model.zip", "best/vecnormalize.pkl", "eval/evaluations.npz",
              "eval/evaluations_metrics.json"):
        assert (out / f).exists(), f
    saved = json.loads((out / "agent.json").read_text())
    assert saved["select"] == "ttft_p99:all" and saved["select_higher_is_better"] is False
    rec = json.loads((out / "eval" / "evaluations_metrics.json").read_text())
    evs = rec["evaluations"]
    npz = np.load(out / "eval" / "evaluations.npz")
    assert [e["timesteps"] for e in evs] == npz["timesteps"].tolist() and len(evs) >= 2
    assert [e["mean_reward"] for e in evs] == pytest.approx(npz["results"].mean(axis=1).tolist())
    vals = [e["value"] for e in evs]
    assert all(v is not None and v > 0 for v in vals)
    best = saved["best_metric"]
    assert best["select"] == "ttft_p99:all" and best["value"] == pytest.approx(min(vals))
    assert best == meta["best_metric"]
    i = vals.index(min(vals))  # the first evaluation with the lowest p99 is the saved one
    assert best["timesteps"] == evs[i]["timesteps"] and evs[i]["new_best"]
    assert saved["best_mean_reward"] == pytest.approx(evs[i]["mean_reward"])
    # the per-episode values are the harness's p99 of each held-out episode, their median the value
    assert evs[i]["value"] == pytest.approx(float(np.median(evs[i]["episodes"])))
    assert "all" in evs[i]["classes"] and "slo_attainment" in evs[i]["classes"]["all"]


def test_default_select_per_env():
    from agents.selection import default_select

    assert default_select("llmsched/Routing-v0") == "ttft_mean:all"
    assert default_select("llmsched/FlowControl-v0") == "ttft_p99:critical"
    assert default_select("llmsched/Admission-v0") == "slo_attainment:all"


def test_a_curriculum_wider_than_n_envs_counts_its_real_envs(tmp_path):
    from agents.train import train

    # three curriculum points and n_envs 2: one env per point, and the rollouts, evaluation
    # and metadata count the three
    meta = train("llmsched/Routing-v0", ["chatbot"], "maskable-ppo", 64, seed=3, out=tmp_path / "run", rate_kind="qps",
                 rates=[10.0, 15.0, 20.0], n_envs=2, overrides={"n_steps": 16, "batch_size": 48, "n_epochs": 1,
                                                               "env_kwargs": {"instances": 2, "duration_s": 2.0,
                                                                              "horizon": None},
                                                               "eval_duration_s": 1.0},
                 eval_freq=48, eval_episodes=1, progress=False)
    assert meta["n_envs"] == 3
    assert meta["timesteps"] % 48 == 0  # whole rollouts of n_steps x 3 envs
