"""Faults inside the cluster (docs/architecture.md, "Faults"): hand-computed crashes,
scrape outages seen by the saturation detector under each staleness policy, stragglers'
step times, Poisson crashes reproducible by seed, and bad fault schedules."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.engine.api import CRASHED, FINISHED, EngineConfig
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.faults import FaultSchedule
from llmsched_gym.gateway.saturation import SaturationConfig, pool_saturation
from llmsched_gym.scenarios import make_scenario
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.workloads.workload import Workload

#: A linear step-time model with round numbers (us): 1000 per step, 10 per prefill token,
#: 100 per decoding request, no arrival or token overheads.
LINEAR = {"alpha0": 0.0, "alpha1": 0.0, "alpha2": 0.0, "beta0": 1000.0, "beta1": 10.0, "beta2": 100.0}


def _two(**kw) -> ClusterConfig:
    return ClusterConfig(**({"instances": 2, "kv_blocks": 1000, "latency_params": LINEAR, "scrape_interval_s": 0.0}
                            | kw))


def _three() -> Workload:
    return Workload([0.0] * 3, [100] * 3, [50] * 3)


def _crash(at=0.0105, **kw) -> dict:
    return {"crashes": [{"instance": 0, "at_s": at}], **kw}


def test_crash_fail_hand_computed():
    """Round-robin puts requests 0 and 2 on instance 0: request 0 prefills in 1000 + 10 x 100
    us (first token 2.0 ms), request 2 joins the next step, 1000 + 1000 + 100 us (4.1 ms), and
    both decode at 1,200 us a step. The crash at 10.5 ms finds k = 2 in flight: both end
    ``crashed`` then; request 1, alone on instance 1, finishes at 2 ms + 49 x 1.1 ms."""
    sim = Simulator(_three(), _two(), GatewayConfig(router="round-robin"), faults=_crash(on_crash="fail")).run()
    t = sim.table
    assert t.counts() == {"in_flight": 0, "finished": 1, "rejected": 0, "expired": 0, "dropped": 0, "evicted": 0,
                          "timed_out": 0, "crashed": 2}
    assert t.outcome.tolist() == [CRASHED, FINISHED, CRASHED] and t.retries.tolist() == [0, 0, 0]
    assert np.allclose(t.end_t, [0.0105, 0.002 + 49 * 0.0011, 0.0105])
    assert np.allclose(t.first_token_t, [0.002, 0.002, 0.0041])  # the client had its first tokens
    assert t.generated.tolist()[0::2] == [7, 6]  # 1 + 6 decode steps (4.1, 5.3, ..., 10.1 ms); request 2: 1 + 5
    assert sim.kv_used().tolist() == [0, 0]  # the crashed instance's KV is gone, the other's freed
    s = summarize(sim)
    assert s["outcomes"]["crashed"] == 2 and s["classes"]["all"]["slo_attainment"] == pytest.approx(1 / 3)


def test_crash_retry_hand_computed():
    """The same crash with retries: both requests are re-sent at 10.5 ms to instance 1 (the
    only one up), which cuts its decode segment at its first step end from then, 2 ms +
    8 x 1.1 ms = 10.8 ms, and prefills both again with request 1's decode: 1000 + 10 x 200 +
    100 us, first tokens at 13.9 ms (TTFT counts from the new first token). Three decode at
    1,300 us a step: request 1 (10 tokens by then) ends after 40 more at 65.9 ms, the other
    two after 9 more steps of 1,200 us at 76.7 ms."""
    sim = Simulator(_three(), _two(), GatewayConfig(router="round-robin"), faults=_crash()).run()
    t = sim.table
    assert t.counts()["finished"] == 3 and t.retries.tolist() == [1, 0, 1] and t.instance.tolist() == [1, 1, 1]
    assert np.allclose(t.first_token_t, [0.0139, 0.002, 0.0139])
    assert np.allclose(t.finish_t, [0.0767, 0.0659, 0.0767])
    assert summarize(sim)["classes"]["all"]["retries"] == 2


def test_retries_run_out_and_no_instance_up():
    """Instance 1 crashes too at 20 ms with one retry each: requests 0 and 2 have used theirs
    and end crashed; request 1 is re-sent but no instance is up, so it is lost at once."""
    faults = {"crashes": [{"instance": 0, "at_s": 0.0105}, {"instance": 1, "at_s": 0.02}], "max_retries": 1}
    t = Simulator(_three(), _two(), GatewayConfig(router="round-robin"), faults=faults).run().table
    assert t.outcome.tolist() == [CRASHED] * 3 and t.retries.tolist() == [1, 1, 1]
    assert np.allclose(t.end_t, 0.02)


def test_restart_serves_again_empty():
    """Instance 0 restarts 5 ms after its crash with no cache: a request arriving at 30 ms
    with the same prompt as one served there before crash misses the prefix cache."""
    w = Workload([0.0, 0.03, 0.03], [64, 64, 64], [2, 2, 2], hash_ids=[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4],
                 hash_offsets=[0, 4, 8, 12], hash_block_tokens=16)
    gw = GatewayConfig(router="round-robin")
    base = Simulator(w, _two(), gw).run().table
    t = Simulator(w, _two(), gw, faults={"crashes": [{"instance": 0, "at_s": 0.01, "restart_s": 0.005}]}).run().table
    assert t.instance.tolist() == base.instance.tolist() == [0, 1, 0]
    assert base.prefix_hit[2] == 48 and t.prefix_hit[2] == 0  # 3 of its 4 blocks were cached, then lost
    assert t.counts()["finished"] == 3


def test_poisson_crashes_reproducible_and_accounted():
    rng = np.random.default_rng(0)
    n = 400
    w = Workload(np.sort(rng.uniform(0, 20, n)), rng.integers(100, 1500, n), rng.integers(20, 300, n))
    cl = ClusterConfig(instances=4, kv_blocks=4000)
    faults = {"crash_rate": {"per_instance_per_s": 0.05, "restart_s": 2.0}, "max_retries": 2}
    runs = [Simulator(w, cl, GatewayConfig(router="jsq"), seed=s, faults=faults).run() for s in (1, 1, 2)]
    a, b, c = (r.table for r in runs)
    assert np.array_equal(a.end_t, b.end_t, equal_nan=True) and np.array_equal(a.retries, b.retries)
    assert runs[0]._fault_actions != runs[2]._fault_actions  # another seed, other crash times
    for sim in runs:
        counts = sim.table.counts()
        assert sum(counts.values()) == n and counts["in_flight"] == 0
        assert sim.kv_used().sum() == 0
    assert a.retries.sum() > 0 and (a.retries <= 2).all()
    fixed = FaultSchedule(**faults, seed=7)
    assert fixed.timeline(4, 1, 20.0) == fixed.timeline(4, 2, 20.0)  # its own seed: the same for every run


def test_straggler_step_times_hand_computed():
    """One request, 100-token prompt, 10 tokens: prefill 2 ms, decode steps of 1.1 ms. A
    straggler of factor 2 from 5 ms to 15 ms: steps ending at 3.1, 4.2, 5.3 ms are unchanged
    (the one in progress at 5 ms keeps its time), the next ones take 2.2 ms (7.5, 9.7, 11.9,
    14.1, and 16.3 ms, begun before 15 ms), then 1.1 ms again: the 10th token at 17.4 ms
    instead of 2 + 9 x 1.1 = 11.9 ms."""
    cl = ClusterConfig(instances=1, kv_blocks=1000, latency_params=LINEAR, scrape_interval_s=0.0)
    w = Workload([0.0], [100], [10])
    faults = {"stragglers": [{"instance": 0, "at_s": 0.005, "duration_s": 0.01, "factor": 2.0}]}
    assert Simulator(w, cl).run().table.finish_t[0] == pytest.approx(0.0119)
    sim = Simulator(w, cl, faults=faults).run()
    assert sim.table.finish_t[0] == pytest.approx(0.0174) and sim.iterations.tolist() == [10]


def test_straggler_factor_one_is_bit_identical():
    rng = np.random.default_rng(5)
    n = 300
    w = Workload(np.sort(rng.uniform(0, 10, n)), rng.integers(100, 1500, n), rng.integers(20, 300, n))
    cl = ClusterConfig(instances=3, kv_blocks=3000)
    faults = {"stragglers": [{"instance": i, "at_s": 1.0 + i, "duration_s": 2.5, "factor": 1.0} for i in range(3)]}
    a = Simulator(w, cl, GatewayConfig(router="jsq")).run().table
    b = Simulator(w, cl, GatewayConfig(router="jsq"), faults=faults).run().table
    for col in ("first_token_t", "finish_t", "instance", "outcome", "prefix_hit"):
        assert np.array_equal(getattr(a, col), getattr(b, col), equal_nan=True), col


def _busy() -> tuple[Workload, ClusterConfig]:
    """Seven long requests at t = 0, round-robin over two instances running one request each:
    instance 0 holds 3 waiting (score 3 / 5 = 0.6), instance 1 holds 2 (0.4), for 2 s."""
    cl = ClusterConfig(instances=2, kv_blocks=100_000, latency_params=LINEAR, engine=EngineConfig(max_num_seqs=1))
    return Workload([0.0] * 7, [100] * 7, [2000] * 7), cl


@pytest.mark.parametrize("instance, policy, expected", [
    (0, "saturated", [0.5, 0.7, 0.7, 0.5]),  # instance 0 stale from 1.2 s: (1.0 + 0.4) / 2
    (0, "ignore", [0.5, 0.4, 0.4, 0.5]),  # out of the average: instance 1's 0.4
    ("all", "saturated", [0.5, 1.0, 1.0, 0.5]),  # every endpoint stale: llm-d's dispatch halt
    ("all", "ignore", [0.5, 0.0, 0.0, 0.5]),  # every endpoint stale: 0.0, dispatch continues
])
def test_scrape_outage_seen_by_the_detector_as_configured(instance, policy, expected):
    """Scrapes every 50 ms, staleness threshold 200 ms; the outage runs from 1.0 s to 2.0 s
    (the 1.0 s scrape succeeded; metrics are stale once strictly older than 200 ms, so at
    1.25 s; the first scrape after it is at 2.05 s)."""
    w, cl = _busy()
    sat = SaturationConfig(staleness_policy=policy)
    sim = Simulator(w, cl, GatewayConfig(router="round-robin", saturation=sat),
                    faults={"scrape_outages": [{"instance": instance, "at_s": 1.0, "duration_s": 1.0}]})
    got = []
    for t in (1.1, 1.25, 1.9, 2.1):
        sim.advance(t)
        got.append(sim.saturation)
        v = sim.current_view()  # the policies' view: the same ages, the same value
        assert pool_saturation(sat, waiting=v.waiting, kv_util=v.kv_util, metrics_age_s=v.metrics_age_s) \
            == pytest.approx(sim.saturation, abs=1e-12)
        if t == 1.9:  # the last scrape before the outage (at most one 50 ms tick before 1.0 s), and since
            age = v.metrics_age_s
            assert 0.9 - 1e-9 <= age[0] <= 0.95 + 1e-9
            assert age[1] == age[0] if instance == "all" else age[1] <= 0.05 + 1e-9
    assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("policy, halts", [("saturated", True), ("ignore", False)])
def test_cluster_wide_outage_halts_flow_control_only_when_stale_counts_as_saturated(policy, halts):
    """A static usage limit at 0.8 on a lightly loaded cluster: under the outage (1 s to 3 s,
    stale from 1.2 s) ``saturated`` holds every arrival in the queue until the first scrape
    after it (3.05 s); ``ignore`` dispatches them on arrival."""
    rng = np.random.default_rng(1)
    w = Workload(np.sort(rng.uniform(0, 4, 80)), np.full(80, 200), np.full(80, 20))
    gw = GatewayConfig(router="jsq", flow_control="static-usage-limit:threshold=0.8",
                       saturation={"stalenessPolicy": policy})
    t = Simulator(w, ClusterConfig(instances=2, kv_blocks=4000), gw,
                  faults={"scrape_outages": [{"instance": "all", "at_s": 1.0, "duration_s": 2.0}]}).run().table
    inside = (t.arrival > 1.25) & (t.arrival < 3.0)
    waited = t.dispatch_t[inside] - t.arrival[inside]
    assert inside.sum() > 10 and t.counts()["finished"] == 80
    if halts:
        assert (t.dispatch_t[inside] >= 3.05 - 1e-9).all()
    else:
        assert waited.max() < 0.01


@pytest.mark.parametrize("faults, match", [
    ({"crashes": [{"instance": 5, "at_s": 1.0}]}, r"faults.crashes\[0\].instance=5 is invalid; the cluster has 2"),
    ({"crashes": [{"at_s": 1.0}]}, r"faults.crashes\[0\].*must give instance"),
    ({"crashes": [{"instance": 0, "at_s": -1.0}]}, r"faults.crashes\[0\].at_s=-1.0 is invalid"),
    ({"stragglers": [{"instance": 0, "at_s": 1.0, "duration_s": 1.0, "factor": 0}]}, r"factor=0 is invalid"),
    ({"stragglers": [{"instance": "all", "at_s": 1, "duration_s": 1, "factor": 2}]}, r"instance='all' is invalid"),
    ({"scrape_outages": [{"instance": 0, "at_s": 1.0}]}, r"must give duration_s"),
    ({"on_crash": "retry-forever"}, r"faults.on_crash='retry-forever' is invalid; choose one of retry, fail"),
    ({"max_retries": -1}, r"faults.max_retries=-1 is invalid"),
    ({"crash_rate": {"restart_s": 1.0}}, r"must give per_instance_per_s"),
    ({"crash_rate": {"per_instance_per_s": 1e3}}, r"draws about .* crashes"),
    ({"crashs": []}, r"faults: unknown key\(s\) 'crashs'"),
])
def test_bad_fault_schedules(faults, match):
    with pytest.raises(ConfigError, match=match) as e:
        Simulator(_three(), _two(), faults=faults, horizon_s=100.0)
    assert "\n" not in str(e.value)


def test_faults_not_simulated_are_refused():
    with pytest.raises(ConfigError, match="P/D cluster"):
        Simulator(_three(), _two(prefill_instances=1), faults=_crash())
    with pytest.raises(ConfigError, match="client_timeout_s are not simulated"):
        Simulator(_three(), _two(), GatewayConfig(client_timeout_s=1.0), faults=_crash())
    with pytest.raises(ConfigError, match="staleness_policy='never' is invalid; choose one of saturated, ignore"):
        GatewayConfig(saturation={"stalenessPolicy": "never"})


# ---------------------------------------------------------------------------- property tests
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from llmsched_gym import SimulatorBatch  # noqa: E402
from llmsched_gym.workloads.synthetic import ArrivalSpec, LengthSpec, PrefixSpec, WorkloadSpec, generate  # noqa: E402


def _random_workload(seed: int, rate: float, n: int) -> Workload:
    w = generate(WorkloadSpec(arrival=ArrivalSpec("poisson", rate), input=LengthSpec("gaussian", 600, 300, 16, 3000),
                              output=LengthSpec("gaussian", 120, 80, 1, 600), num_requests=n, name="t",
                              prefix=PrefixSpec(system_prompt_groups=3, system_prompt_tokens=LengthSpec("fixed", 512),
                                                session_share=0.3)), seed)
    w.priority = np.where(np.arange(len(w)) % 3 == 0, -1, 0)
    return w


times = st.floats(0.0, 2.5)
FAULTS = st.fixed_dictionaries({
    "crashes": st.lists(st.fixed_dictionaries({"instance": st.integers(0, 3), "at_s": times,
                                               "restart_s": st.one_of(st.none(), st.floats(0.01, 1.0))}), max_size=3),
    "scrape_outages": st.lists(st.fixed_dictionaries({"instance": st.one_of(st.just("all"), st.integers(0, 3)),
                                                      "at_s": times, "duration_s": st.floats(0.01, 1.5)}), max_size=2),
    "stragglers": st.lists(st.fixed_dictionaries({"instance": st.integers(0, 3), "at_s": times,
                                                  "duration_s": st.floats(0.01, 1.5), "factor": st.floats(0.5, 8.0)}),
                           max_size=2),
    "on_crash": st.sampled_from(["retry", "fail"]), "max_retries": st.integers(0, 2),
    "crash_rate": st.one_of(st.none(), st.just({"per_instance_per_s": 0.5, "restart_s": 0.3, "to_s": 2.0})),
})
SETUPS = dict(
    seed=st.integers(0, 10_000), instances=st.integers(1, 4), kv=st.integers(150, 900), rate=st.floats(10, 80),
    seqs=st.integers(2, 64), router=st.sampled_from(["jsq", "round-robin", "random", "least-tokens", "llm-d",
                                                     "lmetric", "sglang-cache-aware", "preble"]),
    flow=st.sampled_from([None, "soft-reflective-ceiling", "static-usage-limit"]), cpu_gb=st.sampled_from([0.0, 0.05]),
    evict=st.booleans(), preemption=st.sampled_from(["recompute", "restart"]),
    policy=st.sampled_from(["saturated", "ignore"]), faults=FAULTS)


def _setup(instances, kv, seqs, router, flow, cpu_gb, evict, preemption, policy, faults):
    faults = dict(faults)
    for key in ("crashes", "scrape_outages", "stragglers"):  # within the cluster
        faults[key] = [{**e, "instance": e["instance"] if e["instance"] == "all" else e["instance"] % instances}
                       for e in faults[key]]
    cluster = ClusterConfig(instances=instances, kv_blocks=kv, cpu_kv_gb=cpu_gb,
                            engine=EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=2048, preemption=preemption))
    gateway = GatewayConfig(router=router, flow_control=flow, ttl_s=5.0, eviction=evict and flow is not None,
                            saturation={"staleness_policy": policy})
    return cluster, gateway, faults


@settings(max_examples=40, deadline=None)
@given(**SETUPS)
def test_random_fault_schedules_keep_the_books(seed, instances, kv, rate, seqs, router, flow, cpu_gb, evict,
                                                preemption, policy, faults):
    """Every arrival ends in exactly one outcome, KV blocks stay within [0, capacity] at every
    probe, and at drain no block, reference, queue or gateway count is left."""
    cluster, gateway, faults = _setup(instances, kv, seqs, router, flow, cpu_gb, evict, preemption, policy, faults)
    w = _random_workload(seed, rate, 80)
    sim = Simulator(w, cluster, gateway, seed=seed, faults=faults)
    inst = sim.state.instances
    t = 0.0
    while sim.advance(t) not in ("done", "horizon"):
        used, total, evictable = inst.used[:instances], inst.total[:instances], inst.evictable[:instances]
        assert (used >= 0).all() and (evictable >= 0).all() and (used + evictable <= total).all()
        t += 0.05
    counts = sim.table.counts()
    assert sum(counts.values()) == len(w) and counts["in_flight"] == 0
    assert (sim.table.retries <= (faults["max_retries"] if faults["on_crash"] == "retry" else 0)).all()
    assert sim.kv_used().sum() == 0 and (sim.state.requests.held[:len(w)] == 0).all()
    for name in ("inflight", "qprefill", "nrun", "wq_len", "pending"):
        assert (getattr(inst, name)[:instances] == 0).all(), name
    assert summarize(sim)["outcomes"]["arrivals"] == len(w)


@settings(max_examples=15, deadline=None)
@given(**SETUPS, fork_at=st.floats(0.05, 2.5))
def test_fork_under_faults_reproduces_the_original(seed, instances, kv, rate, seqs, router, flow, cpu_gb, evict,
                                                   preemption, policy, faults, fork_at):
    """A copy forked mid-run carries the fault fields (instances down, scrapes blocked,
    step-time factors, retries) and the rest of the schedule: it ends as the original."""
    cluster, gateway, faults = _setup(instances, kv, seqs, router, flow, cpu_gb, evict, preemption, policy, faults)
    other = Simulator(_random_workload(seed + 1, rate, 30), cluster, gateway, seed=seed + 1, faults=faults, batch=False)
    original = Simulator(_random_workload(seed, rate, 70), cluster, gateway, seed=seed, faults=faults, batch=False)
    SimulatorBatch([other, original])
    original.advance(fork_at)
    copies = original.fork(2)
    copies.run()
    original.run()
    for sim in copies.sims:
        for f in ("instance", "dispatch_t", "first_token_t", "finish_t", "end_t", "outcome", "prefix_hit",
                  "preemptions", "generated", "retries"):
            np.testing.assert_array_equal(getattr(sim.table, f), getattr(original.table, f), err_msg=f)


def test_environments_observe_metric_age_never_the_fault():
    """``metric_age`` (opt-in) is what the gateway knows: instance 0's scrapes fail from 0.5 s,
    so its age grows by the control interval each step while instance 1's stays under one
    scrape interval. A vector env's cluster 0 (the path with fault actions between compiled
    calls) sees exactly what the single env sees."""
    import gymnasium as gym

    kw = dict(scenario="codegen", qps=8, duration_s=4, horizon=3.0, instances=2, control_interval=0.5,
              faults={"scrape_outages": [{"instance": 0, "at_s": 0.5, "duration_s": 5.0}]},
              observation={"include": ["metric_age"], "normalize": False})
    env = gym.make("llmsched/FlowControl-v0", **kw).unwrapped
    venv = gym.make_vec("llmsched/FlowControl-v0", num_envs=2, **kw)
    obs, _ = env.reset(seed=3)
    vobs, _ = venv.reset(seed=3)
    ages = []
    for _ in range(5):
        obs, *_ = env.step(np.ones(2, np.float32))
        vobs, *_ = venv.step(np.ones((2, 2), np.float32))
        np.testing.assert_array_equal(obs["metric_age"], vobs["metric_age"][0])
        np.testing.assert_array_equal(obs["saturation"], vobs["saturation"][0])
        ages.append(obs["metric_age"].copy())
    ages = np.array(ages)
    assert ages[:, 0] == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0], abs=0.05 + 1e-6)  # steps end at 0.5 .. 2.5 s
    assert (ages[:, 1] <= 0.05 + 1e-6).all()
    assert "metric_age" not in gym.make("llmsched/FlowControl-v0", scenario="codegen", qps=8, horizon=1.0) \
        .observation_space.spaces
    with pytest.raises(ConfigError, match="observation include=.*metric_age"):
        gym.make("llmsched/FlowControl-v0", scenario="codegen", qps=8, observation={"include": ["faults"]})


@pytest.mark.parametrize("reward", ["ttft", "e2e"])
def test_environment_rewards_count_crashed_requests_as_unserved(reward):
    """A request lost to a crash costs its time in the system plus the unserved penalty: an
    episode's rewards (single env and vector env alike) add up to the closed form."""
    import gymnasium as gym

    from llmsched_gym.envs.core import episode_cost

    kw = dict(scenario="codegen", qps=10, duration_s=4, horizon=None, instances=2, reward=reward,
              faults={"crashes": [{"instance": 0, "at_s": 1.0, "restart_s": 1.0}], "on_crash": "fail"})
    env = gym.make("llmsched/Routing-v0", **kw).unwrapped
    venv = gym.make_vec("llmsched/Routing-v0", num_envs=1, **kw)
    env.reset(seed=0)
    venv.reset(seed=0)
    total = vtotal = 0.0
    while True:
        a = np.arange(2)[env.action_masks()][0]
        _, r, term, trunc, _ = env.step(a)
        _, vr, *_ = venv.step(np.array([a]))
        total, vtotal = total + r, vtotal + float(vr[0])
        if term or trunc:
            break
    assert env.simulator.table.counts()["crashed"] > 0
    assert -total == pytest.approx(episode_cost(env.simulator, env.setup), rel=1e-9)
    assert vtotal == pytest.approx(total, rel=1e-12)


def _pd_one(**faults):
    """test_pd's hand-computed request: 1000-token prompt, 10 tokens, 1 prefill + 1 decode
    instance over RDMA: prefill 11 ms, transfer 1000 x 163,840 bytes at 50 GB/s + 20 us =
    3.2968 ms, the decode instance's first step 1.01 ms, then 9 steps of 1.1 ms."""
    cl = ClusterConfig(instances=2, kv_blocks=1000, latency_params=LINEAR, scrape_interval_s=0.0, prefill_instances=1)
    return Simulator(Workload([0.0], [1000], [10]), cl, GatewayConfig(router="round-robin", pd="pd-always"),
                     faults=faults or None).run()


def test_slow_and_lost_kv_transfers_hand_computed():
    xfer = 1000 * 163_840 / 50e9 + 20e-6
    t = _pd_one().table
    assert t.first_token_t[0] == pytest.approx(0.011 + xfer + 0.00101)
    t = _pd_one(kv_link_slowdowns=[{"at_s": 0.0, "duration_s": 1.0, "factor": 2.0}]).table  # twice the transfer
    assert t.transfer_s[0] == pytest.approx(2 * xfer) and t.first_token_t[0] == pytest.approx(0.011 + 2 * xfer + 0.00101)
    assert t.finish_t[0] == pytest.approx(0.011 + 2 * xfer + 0.00101 + 9 * 0.0011)
    outage = [{"at_s": 0.012, "duration_s": 0.001}]  # while the transfer is in flight (11 to 14.3 ms)
    sim = _pd_one(kv_link_outages=outage)  # vLLM's default kv_load_failure_policy: fail
    assert sim.table.outcome[0] == CRASHED and sim.table.end_t[0] == pytest.approx(0.011 + xfer)
    assert sim.kv_used().tolist() == [0, 0] and sim.state.instances.inflight[:2].tolist() == [0, 0]
    t = _pd_one(kv_link_outages=outage, kv_load_failure="recompute").table  # the decode instance prefills it
    assert t.outcome[0] == FINISHED and t.first_token_t[0] == pytest.approx(0.011 + xfer + 0.011)
    assert t.finish_t[0] == pytest.approx(0.011 + xfer + 0.011 + 9 * 0.0011)
    t = _pd_one(kv_link_outages=[{"at_s": 0.002, "duration_s": 0.001}]).table  # over before it was sent
    assert t.outcome[0] == FINISHED and t.first_token_t[0] == pytest.approx(0.011 + xfer + 0.00101)
    with pytest.raises(ConfigError, match="apply to P/D disaggregation"):
        Simulator(_three(), _two(), faults={"kv_link_outages": outage})


LINK_FAULTS = st.fixed_dictionaries({
    "kv_link_slowdowns": st.lists(st.fixed_dictionaries({"at_s": times, "duration_s": st.floats(0.01, 1.5),
                                                         "factor": st.floats(0.5, 20.0)}), max_size=2),
    "kv_link_outages": st.lists(st.fixed_dictionaries({"at_s": times, "duration_s": st.floats(0.001, 0.5)}),
                                max_size=3),
    "kv_load_failure": st.sampled_from(["fail", "recompute"])})


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), instances=st.integers(2, 4), kv=st.integers(300, 900), rate=st.floats(10, 60),
       router=st.sampled_from(["jsq", "round-robin", "least-tokens", "llm-d", "lmetric"]),
       flow=st.sampled_from([None, "static-usage-limit"]), preemption=st.sampled_from(["recompute", "restart"]),
       faults=LINK_FAULTS, fork_at=st.floats(0.05, 2.0))
def test_random_kv_link_faults_on_pd_clusters(seed, instances, kv, rate, router, flow, preemption, faults, fork_at):
    """Slow and lost KV transfers: outcomes add up, both pools release every block, and a
    fork mid-run ends as the original."""
    cluster = ClusterConfig(instances=instances, kv_blocks=kv, prefill_instances=instances // 2,
                            engine=EngineConfig(max_num_batched_tokens=2048, preemption=preemption))
    gateway = GatewayConfig(router=router, flow_control=flow, ttl_s=5.0, pd="pd-always")
    w = _random_workload(seed, rate, 60)
    sim = Simulator(w, cluster, gateway, seed=seed, faults=faults)
    sim.advance(fork_at)
    copy = sim.fork(1)
    copy.run()
    sim.run()
    counts = sim.table.counts()
    assert sum(counts.values()) == len(w) and counts["in_flight"] == 0
    if faults["kv_load_failure"] == "recompute":
        assert counts["crashed"] == 0
    assert sim.kv_used().sum() == 0 and (sim.state.requests.held[:len(w)] == 0).all()
    assert (sim.state.instances.inflight[:instances] == 0).all()
    for f in ("instance", "first_token_t", "finish_t", "end_t", "outcome", "transfer_s"):
        np.testing.assert_array_equal(getattr(copy.sims[0].table, f), getattr(sim.table, f), err_msg=f)


from test_eviction import _Counting  # noqa: E402  (a Python router keeping in-flight books from its hooks)


@pytest.mark.parametrize("on_crash", ["retry", "fail"])
def test_python_router_hears_of_crashed_requests(on_crash):
    """A router decided in Python hears of every request a crash took from an instance as of
    a finish, and of its re-dispatch: its books match the gateway's in-flight counts at every
    probe and are empty at drain; a pick of the crashed instance goes to one that is up."""
    rng = np.random.default_rng(2)
    n = 200
    w = Workload(np.sort(rng.uniform(0, 4, n)), rng.integers(100, 1500, n), rng.integers(20, 200, n))
    router = _Counting()
    faults = {"crashes": [{"instance": 1, "at_s": 1.0, "restart_s": 1.0}, {"instance": 0, "at_s": 2.5}],
              "on_crash": on_crash, "max_retries": 2}
    sim = Simulator(w, ClusterConfig(instances=3, kv_blocks=3000), GatewayConfig(router=router), faults=faults)
    for t in np.arange(0.25, 8.0, 0.25):
        sim.advance(t)
        assert sim.router.books.tolist() == sim.state.instances.inflight[:3].tolist()
    sim.run()
    counts = sim.table.counts()
    assert sum(counts.values()) == n and counts["in_flight"] == 0 and not sim.router.books.any()
    assert (counts["crashed"] > 0) == (on_crash == "fail") and (sim.table.retries.sum() > 0) == (on_crash == "retry")


def test_compare_runs_every_policy_under_one_fault_schedule():
    """``evaluate`` (``compare --faults``): every policy of a seed meets the same Poisson
    crashes; the crashed and re-sent requests are columns of the result."""
    from llmsched_gym.evaluation.harness import evaluate

    faults = {"crash_rate": {"per_instance_per_s": 0.2, "restart_s": 2.0}, "on_crash": "fail"}
    table = evaluate("codegen", "jsq;lmetric", [0, 1], qps=6, overrides={"duration_s": 10, "faults": faults},
                     workers=1).filter(class_="all")
    clean = evaluate("codegen", "jsq;lmetric", [0, 1], qps=6, overrides={"duration_s": 10}, workers=1).filter(class_="all")
    assert sum(table.column("crashed")) > 0 and sum(clean.column("crashed")) == 0
    assert all(r["finished"] + r["crashed"] + r["in_flight"] + r["rejected"] + r["expired"] == r["requests"]
               for r in table)
    sc = make_scenario("codegen", qps=6, duration_s=10, faults=faults)
    times = [sc.simulator(1, router=router)._fault_actions for router in ("jsq", "lmetric")]
    assert times[0] == times[1] and times[0] != sc.simulator(0)._fault_actions
