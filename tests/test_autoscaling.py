"""Autoscaling (llmsched_gym.autoscaling, llmsched/Autoscaling-v0, baselines/autoscaling.py):
cold-start presets, fleet semantics on hand-checked runs, the scalers' formulas, the
environment's conventions (checkers, vector parity, reward accounting, PPO smoke)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_accounting

import llmsched_gym  # noqa: F401  (registers the environments)
from baselines.autoscaling import HPAKV, FixedFleet, HPAQueue, QueueAware, hpa_desired
from llmsched_gym import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.autoscaling import (
    COLD_START_PRESETS,
    Fleet,
    ScalingView,
    advance_fleets,
    cold_start_preset,
    resolve_cold_start,
    run_autoscaled,
)
from llmsched_gym.engine.layout import II_INFLIGHT
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import make_policy
from llmsched_gym.workloads.synthetic import ArrivalSpec, LengthSpec, WorkloadSpec, generate

ENV = "llmsched/Autoscaling-v0"
SMALL = dict(scenario="diurnal-codegen", duration_s=120.0, horizon=60.0, control_interval=10.0)


def _sim(instances=3, rate=40.0, n=400, router="jsq", seed=0) -> Simulator:
    spec = WorkloadSpec(arrival=ArrivalSpec("poisson", rate), input=LengthSpec("gaussian", 600, 300, 16, 3000),
                        output=LengthSpec("gaussian", 150, 80, 1, 600), num_requests=n, name="t")
    return Simulator(generate(spec, seed), ClusterConfig(instances=instances, kv_blocks=3000),
                     GatewayConfig(router=router), seed=seed)


def _go(fleet: Fleet, t: float) -> str:
    sim = fleet.sim
    return advance_fleets(sim.state, {sim.c: sim}, {sim.c: fleet}, {sim.c: t})[sim.c]


# ============================================================================ cold starts
def test_cold_start_preset_is_load_time_of_the_weights():
    # Qwen3-14B: 14,768,307,200 bf16 parameters = 29.54 GB at 2 GB/s, plus 10 s + 20 s
    assert cold_start_preset("qwen3-14b", "H100") == pytest.approx(10 + 29.5366144 / 2 + 20)
    assert cold_start_preset("qwen3-14b", "H100", tp=2) == pytest.approx(10 + 29.5366144 / 4 + 20)
    assert COLD_START_PRESETS[("Qwen/Qwen3-30B-A3B", "H20")] == pytest.approx(10 + 61.064245248 / 2 + 20)
    cluster = ClusterConfig(model="qwen2-7b")
    assert resolve_cold_start(cluster) == cold_start_preset("qwen2-7b", "H100")
    assert resolve_cold_start(ClusterConfig(cold_start_s=12.0)) == 12.0
    assert resolve_cold_start(ClusterConfig(cold_start_s=12.0), 3.0) == 3.0  # the keyword wins


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "10", True])
def test_bad_cold_start_is_a_clear_error(bad):
    with pytest.raises(ConfigError, match="cold_start_s"):
        resolve_cold_start(ClusterConfig(), bad)
    with pytest.raises(ConfigError, match="cold_start_s"):
        gym.make(ENV, **SMALL, cold_start_s=bad)


def test_cold_start_in_scenario_yaml(tmp_path):
    sc = llmsched_gym.make_scenario("diurnal-codegen")
    d = sc.to_dict()
    d["cluster"]["cold_start_s"] = 7.5
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(d))
    env = gym.make(ENV, scenario=str(path), duration_s=60.0, horizon=30.0)
    assert env.unwrapped.setup.autoscaling["cold_start_s"] == 7.5
    d["cluster"]["cold_start_s"] = -2
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(ConfigError, match="cold_start_s"):
        llmsched_gym.make_scenario(str(path))


# ============================================================================ fleet semantics
def test_started_instances_serve_after_the_cold_start():
    sim = _sim()
    fleet = Fleet(sim, 1, cold_start_s=2.0)
    assert sim.serving == 1 and fleet.counts() == {"serving": 1, "starting": 0, "waiting": 0, "draining": 0,
                                                   "stopped": 2}
    fleet.set_target(3)
    assert fleet.counts()["starting"] == 2 and fleet.next_ready() == 2.0
    _go(fleet, 1.5)
    assert sim.serving == 1
    _go(fleet, 4.0)
    assert sim.serving == 3 and fleet.cold_starts == 2
    t = sim.table
    early = ~np.isnan(t.dispatch_t) & (t.dispatch_t <= 2.0)
    assert early.sum() > 10 and (t.instance[early] == 0).all()  # nothing routed to a starting instance
    late = ~np.isnan(t.dispatch_t) & (t.dispatch_t > 2.0)
    assert {1, 2} <= set(t.instance[late].tolist())  # JSQ fills the new, empty instances first


def test_removed_instances_drain_and_gpu_seconds_add_up():
    sim = _sim()
    fleet = Fleet(sim, 1, cold_start_s=2.0)
    fleet.set_target(3)
    _go(fleet, 4.0)
    fleet.set_target(1)
    assert sim.serving == 1 and fleet.counts()["draining"] == 2
    status = _go(fleet, np.inf)
    assert status == "done"
    assert_accounting(sim)
    t = sim.table
    after = t.dispatch_t > 4.0
    assert after.sum() > 50 and (t.instance[after] == 0).all()  # drained instances take no new request
    assert fleet.counts() == {"serving": 1, "starting": 0, "waiting": 0, "draining": 0, "stopped": 2}
    # hand-computed: instance 0 all the run; 1 and 2 from 0 (started) to their last request's end
    expected = sim.now + sum(max(4.0, t.end_t[t.instance == j].max()) for j in (1, 2))
    assert fleet.instance_seconds() == pytest.approx(expected)
    assert fleet.gpu_seconds() == pytest.approx(expected)  # tp = 1


def test_cancelled_start_and_warm_return():
    sim = _sim(rate=80.0, n=2000)
    fleet = Fleet(sim, 1, cold_start_s=5.0)
    fleet.set_target(2)
    _go(fleet, 1.0)
    fleet.set_target(1)  # cancelled: instance 1 ran 1 s, never served
    assert fleet.counts()["stopped"] == 2 and fleet.instance_seconds() == pytest.approx(1.0 + 1.0)
    fleet.set_target(3)
    _go(fleet, 7.0)
    assert sim.serving == 3 and fleet.cold_starts == 3
    fleet.set_target(2)  # instance 2 drains with work ...
    assert sim.state.inst_i[II_INFLIGHT, int(sim.state.inst_off[0]) + 2] > 0
    fleet.set_target(3)  # ... so taking it back serves at once, without a cold start
    assert sim.serving == 3 and fleet.cold_starts == 3


@pytest.mark.parametrize("bad", [0, 4, -1, 1.5, True, "2"])
def test_bad_instance_counts(bad):
    fleet = Fleet(_sim(), 1, 1.0)
    with pytest.raises(ConfigError, match="instances"):
        fleet.set_target(bad)
    with pytest.raises(ConfigError, match="initial_instances"):
        Fleet(_sim(), bad, 1.0)


@pytest.mark.parametrize("name", ["round-robin", "jsq"])
def test_python_router_sees_the_serving_instances_only(name):
    base = type(make_policy(name, "routing"))
    python_router = type("Py" + base.__name__, (base,), {})()  # no compiled_form of its own: runs in Python
    sims = []
    for router in (name, python_router):
        sim = _sim(router=router)
        fleet = Fleet(sim, 2, 1.0)
        _go(fleet, 3.0)
        assert sim.current_view().num_instances == 2 and len(sim.current_view().waiting) == 2
        fleet.set_target(3)
        _go(fleet, 4.5)
        assert sim.current_view().num_instances == 3 and len(sim.current_view().kv_util) == 3
        fleet.set_target(1)
        _go(fleet, np.inf)
        sims.append(sim)
    assert sims[1].needs_python and not sims[0].needs_python
    np.testing.assert_array_equal(sims[0].table.instance, sims[1].table.instance)
    np.testing.assert_array_equal(sims[0].table.finish_t, sims[1].table.finish_t)


def test_fixed_fleet_of_all_instances_is_the_plain_run():
    plain = _sim(router="llm-d").run()
    sim, fleet = run_autoscaled(_sim(router="llm-d"), "fixed:instances=3", 5.0, 3)
    for f in ("instance", "first_token_t", "finish_t", "outcome"):
        np.testing.assert_array_equal(getattr(sim.table, f), getattr(plain.table, f))
    assert fleet.gpu_seconds() == pytest.approx(3 * sim.now)


# ============================================================================ scalers
def _view(**kw) -> ScalingView:
    base = dict(now=0.0, interval_s=15.0, max_instances=8, cold_start_s=40.0, target=3, serving=3, starting=0,
                draining=0, kv_util=np.full(3, 0.5), waiting=np.zeros(3, np.int64), running=np.zeros(3, np.int64),
                in_flight=np.zeros(3, np.int64), gateway_queue=0, arrivals=0, max_num_seqs=256)
    base.update(kw)
    return ScalingView(**base)


def test_hpa_formula_by_hand():
    assert hpa_desired(3, 0.9, 0.7) == 4  # ceil(3 x 1.2857)
    assert hpa_desired(3, 0.75, 0.7) == 3  # 1.071: inside the 0.1 tolerance
    assert hpa_desired(3, 0.63, 0.7) == 3  # 0.9: on the tolerance's edge
    assert hpa_desired(4, 0.35, 0.7) == 2  # ceil(4 x 0.5)
    assert hpa_desired(2, 0.01, 0.7) == 1  # never below one


def test_hpa_kv_scale_up_limit_unready_and_stabilization():
    hpa = make_policy("hpa-kv:target=0.5,stabilization_s=30", "scaling")
    assert isinstance(hpa, HPAKV)
    hpa.reset(8, None)
    assert hpa.scale(_view(kv_util=np.array([1.0, 1.0, 1.0]))) == 6  # ceil(3 x 2) = 6 <= max(6, 7)
    assert hpa.scale(_view(kv_util=np.full(1, 1.0), target=1, serving=1)) == 2  # ceil(1 x 2), limit max(2, 5)
    # 2 of 5 asked-for instances not ready: counted at 0 -> 3 x 0.6 / 5 = 0.36 < 0.5: no scale-up
    assert hpa.scale(_view(now=1.0, kv_util=np.full(3, 0.6), target=5, starting=2)) == 5
    hpa = HPAKV(target=0.5, stabilization_s=30.0)
    hpa.reset(8, None)
    assert hpa.scale(_view(now=0.0, kv_util=np.full(3, 0.5), target=3)) == 3
    assert hpa.scale(_view(now=15.0, kv_util=np.full(3, 0.1), target=3)) == 3  # window max: 3 (t=0)
    assert hpa.scale(_view(now=31.0, kv_util=np.full(3, 0.1), target=3)) == 1  # t=0 left the window
    assert HPAKV(target=0.5, stabilization_s=0.0).scale(_view(kv_util=np.full(3, 0.1))) == 1


def test_hpa_queue_counts_gateway_queue():
    hpa = HPAQueue(target=2.0, stabilization_s=0.0)
    # (3 + 3 + 3 + 9 gateway) / 3 serving = 6 per instance -> ceil(3 x 3) = 9, limited to max(6, 7) = 7
    assert hpa.scale(_view(waiting=np.array([3, 3, 3]), gateway_queue=9)) == 7
    assert hpa.scale(_view(waiting=np.array([1, 1, 1]), gateway_queue=3)) == 3  # 2 per instance: on target


def test_queue_aware_windows_and_panic():
    qa = QueueAware(target=10.0, utilization=0.5, stable_s=60.0, panic_s=6.0, panic_threshold=2.0)
    # 12 in flight + 3 queued = 15 over 5 per instance -> 3
    assert qa.scale(_view(now=0.0, in_flight=np.array([4, 4, 4]), gateway_queue=3)) == 3
    # stable mean (15 + 45) / 2 = 30 -> 6; panic (latest) 45 -> 9 >= 2 x 3: panic, take 9
    assert qa.scale(_view(now=15.0, in_flight=np.array([15, 15, 15]))) == 9
    # load gone: in panic (until 75 s) it never scales down
    assert qa.scale(_view(now=30.0, target=9, serving=9, in_flight=np.zeros(9, np.int64))) == 9
    # panic over; stable window (t >= 20): mean(0, 0) -> 1
    assert qa.scale(_view(now=80.0, target=9, serving=9, in_flight=np.zeros(9, np.int64))) == 1


def test_fixed_and_bad_scaler_parameters():
    f = FixedFleet(4)
    f.reset(6, None)
    assert f.scale(_view()) == 4
    with pytest.raises(ConfigError, match="instances=9"):
        FixedFleet(9).reset(6, None)
    for spec in ("fixed:instances=0", "hpa-kv:target=-1", "hpa-kv:tolerance=-0.1", "queue-aware:utilization=1.5",
                 "hpa-queue:stabilization_s=-5"):
        with pytest.raises(ConfigError):
            make_policy(spec, "scaling")
    with pytest.raises(ConfigError, match="scaling"):
        make_policy("jsq", "scaling")


# ============================================================================ the environment
def test_env_checkers():
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = gym.make(ENV, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check(env.unwrapped, skip_render_check=True)
        sb3_check(env.unwrapped, warn=False)
    assert env.action_space == gym.spaces.MultiDiscrete([6])
    for section in ("Description", "Action Space", "Observation Space", "Rewards", "Starting State", "Episode End",
                    "Arguments", "Version History"):
        assert f"## {section}" in type(env.unwrapped).__doc__


def test_env_keyword_errors():
    for kwargs, match in [(dict(initial_instances=0), "initial_instances"), (dict(initial_instances=7), "in \\[1, 6\\]"),
                          (dict(gpu_cost=-1.0), "gpu_cost"), (dict(reward="ttft"), "unknown keyword"),
                          (dict(bogus=1), "unknown keyword 'bogus'"), (dict(router="external"), "external")]:
        with pytest.raises(ConfigError, match=match):
            gym.make(ENV, **SMALL, **kwargs)
    env = gym.make(ENV, **SMALL)
    env.reset(seed=0)
    for bad in (np.array([6]), np.array([-1]), np.array([1.5]), np.array([0, 1])):
        with pytest.raises(ValueError):
            env.step(bad)


def test_episode_return_is_misses_plus_gpu_cost_and_conserves():
    env = gym.make(ENV, **SMALL, gpu_cost=0.25, cold_start_s=12.0)
    obs, info = env.reset(seed=3)
    assert info["serving"] == 1 and obs["fleet"][0] == pytest.approx(1 / 6)
    actions = [0, 2, 2, 3, 1, 0, 0]
    ret, k = 0.0, 0
    while True:
        obs, r, term, trunc, info = env.step(np.array([actions[min(k, len(actions) - 1)]]))
        ret += r
        k += 1
        if term or trunc:
            break
    assert trunc and not term and k == 6
    u = env.unwrapped
    assert_accounting(u.simulator)
    ep = info["episode"]
    assert ret == pytest.approx(ep["return"]) == pytest.approx(-(info["slo_misses"] + 0.25 * info["gpu_seconds"]))
    assert ep["metrics"]["gpu_seconds"] == pytest.approx(u.fleet.gpu_seconds()) and ep["metrics"]["cold_starts"] == 3


@pytest.mark.parametrize("slack", [None, 1.0])
def test_native_vector_matches_single_envs_and_is_deterministic(slack, monkeypatch):
    if slack is not None:  # no room to spare: a larger next workload regrows the shared state
        import llmsched_gym.envs.autoscaling as A

        monkeypatch.setattr(A, "SLOT_SLACK", slack)
    n = 3
    venv = gym.make_vec(ENV, num_envs=n, **SMALL)
    singles = [gym.make(ENV, **SMALL) for _ in range(n)]
    vobs, _ = venv.reset(seed=10)
    sobs = [e.reset(seed=10 + i)[0] for i, e in enumerate(singles)]
    for i in range(n):
        for k in vobs:
            np.testing.assert_array_equal(vobs[k][i], sobs[i][k])
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(14):
        a = rng.integers(0, 6, size=(n, 1))
        vobs, vr, vterm, vtrunc, vinfo = venv.step(a)
        for i, e in enumerate(singles):
            o, r, term, trunc, info = e.step(a[i])
            assert r == vr[i] and term == vterm[i] and trunc == vtrunc[i]
            if term or trunc:
                ended += 1
                assert vinfo["_final_obs"][i]
                for k in o:
                    np.testing.assert_array_equal(vinfo["final_obs"][i][k], o[k])
                o, _ = e.reset()  # the next workload seed from the same generator as the autoreset's
            for k in o:
                np.testing.assert_array_equal(vobs[k][i], o[k])
    assert ended == 2 * n  # 60 s horizon / 10 s interval: every cluster ended twice, together


def test_ppo_smoke_on_autoscaling_vector_env(one_torch_thread):
    from stable_baselines3 import PPO

    from agents.sb3 import to_sb3_vec_env

    venv = to_sb3_vec_env(gym.make_vec(ENV, num_envs=4, scenario="diurnal-codegen", duration_s=60.0, horizon=30.0,
                                       control_interval=5.0, reward_scale=0.01))
    model = PPO("MultiInputPolicy", venv, n_steps=32, batch_size=64, n_epochs=2, seed=0)
    model.learn(256)
    act, _ = model.predict(venv.reset(), deterministic=True)
    assert act.shape == (4, 1) and ((act >= 0) & (act < 6)).all()


# ============================================================================ compare
def test_compare_runs_cells_autoscaled():
    from llmsched_gym.evaluation import evaluate
    from llmsched_gym.gateway.policy import parse_policy

    assert parse_policy("hpa-kv:target=0.3").kwargs() == {"scaler": "hpa-kv:target=0.3"}
    assert parse_policy("jsq+scaler=fixed:instances=2").kwargs() == {"router": "jsq", "scaler": "fixed:instances=2"}
    table = evaluate("diurnal-codegen", "llm-d;fixed:instances=6;queue-aware:target=96", seeds=[0], workers=1,
                     overrides={"duration_s": 120.0})
    rows = {r["policy"]: r for r in table.rows if r["class"] == "all"}
    assert "gpu_seconds" not in rows["llm-d"]  # a plain cell is unchanged
    fixed, qa = rows["fixed:instances=6"], rows["queue-aware:target=96"]
    for k in ("finished", "ttft_p99", "slo_attainment"):  # all six warm throughout: the plain run
        assert fixed[k] == rows["llm-d"][k]
    assert fixed["gpu_seconds"] == pytest.approx(6 * fixed["sim_seconds"]) and fixed["cold_starts"] == 0
    assert qa["scaler"] == "queue-aware:target=96" and qa["gpu_seconds"] < fixed["gpu_seconds"]
    assert qa["requests"] == qa["finished"] + qa["rejected"] + qa["expired"] + qa["dropped"] + qa["in_flight"]


def test_env_on_the_azure_trace_rhythm():
    from conftest import trace_path

    trace_path("azure_llm_2023", "AzureLLMInferenceTrace_code.csv")
    env = gym.make(ENV, scenario="azure-code", instances=4, horizon=120.0, initial_instances=2)
    obs, info = env.reset(seed=0)
    assert obs["kv_util"].shape == (4,) and info["serving"] == 2
    for a in (3, 3, 0, 1, 2, 0, 0, 0):
        obs, r, term, trunc, info = env.step(np.array([a]))
        if term or trunc:
            break
    assert trunc and info["episode"]["metrics"]["gpu_seconds"] > 0
    assert_accounting(env.unwrapped.simulator)


@pytest.mark.parametrize("spec", ["hpa-kv:target=0.3,stabilization_s=30", "queue-aware:target=64"])
def test_scaler_driving_the_env_is_run_autoscaled(spec):
    kw = dict(scenario="diurnal-codegen", duration_s=240.0)
    env = gym.make(ENV, **kw)
    env.reset(options={"workload_seed": 4})
    policy = make_policy(spec, "scaling")
    policy.reset(6, None)
    while True:
        n = int(np.clip(policy.scale(env.unwrapped.scaling_view()), 1, 6))
        _, _, term, trunc, info = env.step(np.array([n - 1]))
        if term or trunc:
            break
    sim, fleet = run_autoscaled(llmsched_gym.make_scenario("diurnal-codegen", duration_s=240.0).simulator(4), spec,
                                15.0, 1)
    mine = env.unwrapped.simulator
    for f in ("instance", "first_token_t", "finish_t", "outcome"):
        np.testing.assert_array_equal(getattr(mine.table, f), getattr(sim.table, f))
    assert info["episode"]["metrics"]["gpu_seconds"] == fleet.gpu_seconds()
    assert info["episode"]["metrics"]["cold_starts"] == fleet.cold_starts > 0
