"""Prefill/decode disaggregation (docs/architecture.md, "Prefill/decode disaggregation"):
a hand-computed request, P/D off changes nothing, conservation at drain on both pools,
determinism, bad configs, and each baseline's decision."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym import EngineConfig, simulate_batch
from llmsched_gym.engine.hardware import KV_LINKS, get_model
from llmsched_gym.engine.layout import (
    CF_SATURATION,
    IF_SCR_KV,
    II_EVICTABLE,
    II_SCR_WAITING,
    II_TOTAL,
    II_USED,
)
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import RoutingPolicy, make_policy, parse_policy
from llmsched_gym.scenarios import scenario_from_dict
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.workloads.synthetic import ArrivalSpec, LengthSpec, PrefixSpec, WorkloadSpec, generate
from llmsched_gym.workloads.workload import Workload

#: A linear step-time model with round numbers (us): 1000 per step, 10 per prefill token,
#: 100 per decoding request, no arrival or token overheads.
LINEAR = {"alpha0": 0.0, "alpha1": 0.0, "alpha2": 0.0, "beta0": 1000.0, "beta1": 10.0, "beta2": 100.0}
KV_BYTES = get_model("qwen3-14b").kv_bytes_per_token  # 163,840


def _cluster(**kw) -> ClusterConfig:
    base = dict(instances=2, kv_blocks=1000, latency_params=LINEAR, scrape_interval_s=0.0)
    return ClusterConfig(**(base | kw))


def _one(inp: int = 1000, out: int = 10) -> Workload:
    return Workload([0.0], [inp], [out])


def _workload(seed: int, rate: float, n: int, groups: int = 3) -> Workload:
    spec = WorkloadSpec(arrival=ArrivalSpec("poisson", rate), input=LengthSpec("gaussian", 1500, 800, 16, 4000),
                        output=LengthSpec("gaussian", 60, 40, 1, 300), num_requests=n, name="pd",
                        prefix=PrefixSpec(system_prompt_groups=groups, system_prompt_tokens=LengthSpec("fixed", 512),
                                          session_share=0.3))
    return generate(spec, seed)


def test_hand_computed_single_request():
    """1000-token prompt, 10 output tokens, on 1 prefill + 1 decode instance over RDMA:
    prefill 1000 + 10 x 1000 = 11,000 us on the prefill instance (its sampled token is not
    sent); transfer 1000 x 163,840 bytes at 50 GB/s + 20 us = 3,296.8 us; on the decode
    instance the last prompt token's step, 1000 + 10 = 1,010 us, emits the first token,
    then 9 decode steps of 1000 + 100 us. Aggregated: first token at the end of prefill."""
    assert KV_BYTES == 163_840 and KV_LINKS["rdma"].gbps == 50.0 and KV_LINKS["rdma"].latency_s == 20e-6
    pd = Simulator(_one(), _cluster(prefill_instances=1), GatewayConfig(router="round-robin", pd="pd-always")).run()
    agg = Simulator(_one(), _cluster(), GatewayConfig(router="round-robin")).run()
    prefill, transfer, first, decode = 11_000e-6, 1000 * KV_BYTES / 50e9 + 20e-6, 1010e-6, 9 * 1100e-6
    t = pd.table
    assert (t.instance[0], t.decode_instance[0]) == (0, 1)
    assert t.transfer_s[0] == pytest.approx(transfer, rel=1e-12) == pytest.approx(3296.8e-6, rel=1e-12)
    assert t.first_token_t[0] == pytest.approx(prefill + transfer + first, rel=1e-12)
    assert t.finish_t[0] == pytest.approx(prefill + transfer + first + decode, rel=1e-12)
    assert list(pd.iterations) == [1, 10]  # the prefill step there; the last prompt token + 9 decodes here
    assert agg.table.first_token_t[0] == pytest.approx(prefill, rel=1e-12)
    assert agg.table.finish_t[0] == pytest.approx(prefill + decode, rel=1e-12)
    assert agg.table.decode_instance[0] == -1 and np.isnan(agg.table.transfer_s[0])
    # A link override: 100 GB/s and 1 ms per transfer.
    slow = Simulator(_one(), _cluster(prefill_instances=1, kv_link_gbps=100.0, kv_link_latency_s=1e-3),
                     GatewayConfig(router="round-robin")).run()
    assert slow.table.transfer_s[0] == pytest.approx(1000 * KV_BYTES / 100e9 + 1e-3, rel=1e-12)
    # tp=2: each GPU sends half the KV over its own link.
    tp2 = Simulator(_one(), _cluster(prefill_instances=1, tp=2, kv_link="nvlink", latency_model="roofline",
                                   latency_params={}), GatewayConfig(router="jsq")).run()
    assert tp2.table.transfer_s[0] == pytest.approx(1000 * KV_BYTES / (2 * 450e9) + 10e-6, rel=1e-12)
    for s in (pd, agg, slow, tp2):
        assert (s.kv_used() == 0).all() and (s.state.inst_i[II_USED, :2] == 0).all()


def _assert_same(a: Simulator, b: Simulator) -> None:
    for f in ("instance", "decode_instance", "dispatch_t", "first_token_t", "finish_t", "end_t", "outcome",
              "prefix_hit", "preemptions", "generated", "transfer_s"):
        np.testing.assert_array_equal(getattr(a.table, f), getattr(b.table, f), err_msg=f)


def test_pd_off_and_pd_aggregated_reproduce_the_aggregated_cluster():
    w = _workload(3, 20.0, 200)
    for router in ("llm-d", "lmetric", "jsq"):
        base = Simulator(w, ClusterConfig(instances=4, kv_blocks=800), GatewayConfig(router=router), seed=2).run()
        off = Simulator(w, ClusterConfig(instances=4, kv_blocks=800, prefill_instances=0, kv_link="nvlink"),
                        GatewayConfig(router=router), seed=2).run()
        pooled = Simulator(w, ClusterConfig(instances=4, kv_blocks=800, prefill_instances=2),
                           GatewayConfig(router=router, pd="pd-aggregated"), seed=2).run()
        for s in (off, pooled):
            _assert_same(base, s)
            assert (s.table.decode_instance == -1).all()


@pytest.mark.parametrize("pd", ["pd-always", "pd-llmd:threshold=1200", "pd-dynamo"])
@pytest.mark.parametrize("preemption", ["recompute", "restart"])
def test_conservation_release_and_determinism(pd, preemption):
    """Tight KV (preemptions on both pools): every request ends once, every block is
    released at drain on prefill and decode instances, disaggregated requests prefill on
    the prefill pool and decode on the decode pool, and a rerun (alone or batched) is
    bit-identical."""
    w = _workload(7, 40.0, 300)
    cluster = ClusterConfig(instances=4, prefill_instances=2, kv_blocks=700,
                            engine=EngineConfig(max_num_seqs=16, max_num_batched_tokens=2048, preemption=preemption))
    gateway = GatewayConfig(router="lmetric", pd=pd, flow_control="soft-reflective-ceiling")
    sim = Simulator(w, cluster, gateway, seed=1).run()
    t = sim.table
    counts = t.counts()
    assert sum(counts.values()) == len(w) and counts["in_flight"] == 0 and counts["finished"] > 0
    assert (sim.kv_used() == 0).all()
    ii = sim.state.inst_i
    assert (ii[II_USED, :4] == 0).all() and (ii[II_EVICTABLE, :4] <= ii[II_TOTAL, :4]).all()
    fin = t.outcome == 1
    dis = t.decode_instance >= 0
    assert dis.any() and (t.instance[dis] < 2).all() and (t.decode_instance[dis] >= 2).all()
    assert (t.instance[fin & ~dis] >= 2).all()  # aggregated requests run on the decode pool
    assert (t.output[dis] >= 2).all()
    np.testing.assert_allclose(t.transfer_s[dis], t.input[dis] * KV_BYTES / 50e9 + 20e-6, rtol=1e-12)
    assert (t.generated[fin] == t.output[fin]).all()
    assert (t.first_token_t[fin & dis] >= t.dispatch_t[fin & dis] + t.transfer_s[fin & dis]).all()
    assert sim.table.preemptions.sum() > 0
    again = simulate_batch([dict(workload=w, cluster=cluster, gateway=gateway, seed=1)] * 2)
    for s in (Simulator(w, cluster, gateway, seed=1).run(), *again):
        _assert_same(sim, s)


def test_saturation_is_the_most_saturated_pool():
    """Utilization detector on a P/D cluster: the larger of the pools' mean of
    max(waiting / 5, kv / 0.8) (scraped at every event here)."""
    w = _workload(2, 60.0, 200)
    sim = Simulator(w, _cluster(instances=4, prefill_instances=1, kv_blocks=600), GatewayConfig(router="jsq"))
    checked = 0
    for k in range(1, 40):
        if sim.advance(0.05 * k) == "done":
            break
        ii, inf = sim.state.inst_i, sim.state.inst_f
        per = np.maximum(ii[II_SCR_WAITING, :4] / 5.0, inf[IF_SCR_KV, :4] / 0.8)
        expect = max(per[:1].mean(), per[1:].mean())
        assert sim.state.clu_f[CF_SATURATION, 0] == pytest.approx(expect, rel=1e-12, abs=1e-15)
        checked += per[:1].mean() != per[1:].mean()
    assert checked


def test_decisions_hand_computed():
    always, llmd, dyn = make_policy("pd-always"), make_policy("pd-llmd:threshold=512"), make_policy("pd-dynamo")
    assert always.disaggregate(0, 100) and not make_policy("pd-aggregated").disaggregate(10_000, 0)
    assert llmd.disaggregate(512, 0) and not llmd.disaggregate(511, 0)  # llm-d: uncached >= threshold
    assert make_policy("pd-llmd").disaggregate(0, 0)  # llm-d's default nonCachedTokens 0: always
    assert (dyn.max_local_prefill_length, dyn.max_prefill_queue_size) == (1000, 2)  # Dynamo's defaults
    assert dyn.disaggregate(1001, 1) and not dyn.disaggregate(1000, 1) and not dyn.disaggregate(5000, 2)


def test_llmd_decision_in_the_engine_counts_the_decode_cache():
    """Threshold 1000: a 600-token prompt stays on its decode instance; a 3000-token one is
    disaggregated; the same 3000-token prompt again, now cached on that decode instance
    (its units arrived with the first), has 0 uncached tokens left and stays there."""
    hashes = list(range(1, 38)) + list(range(100, 288)) + list(range(100, 288))
    w = Workload([0.0, 1.0, 2.0], [600, 3000, 3000], [5, 5, 5], hash_ids=hashes, hash_offsets=[0, 37, 225, 413],
                 hash_block_tokens=16)
    sim = Simulator(w, _cluster(instances=2, prefill_instances=1), GatewayConfig(router="jsq", pd="pd-llmd:threshold=1000"))
    t = sim.run().table
    assert list(t.decode_instance) == [-1, 1, -1] and list(t.instance) == [1, 0, 1]
    assert t.prefix_hit[2] == 2992  # the transferred prompt's full blocks, registered on the decode instance


def test_dynamo_decision_in_the_engine_counts_the_prefill_queue():
    """max_num_seqs 1 on the prefill instance: request 0 prefills, 1 waits in its queue,
    so 2 sees a prefill queue of 1 = max_prefill_queue_size and runs aggregated."""
    w = Workload([0.0, 0.0, 0.0], [2000, 2000, 2000], [4, 4, 4])
    cluster = _cluster(instances=2, prefill_instances=1, engine=EngineConfig(max_num_seqs=1))
    t = Simulator(w, cluster, GatewayConfig(router="jsq", pd="pd-dynamo:max_prefill_queue_size=1")).run().table
    assert list(t.decode_instance) == [1, 1, -1]
    short = Simulator(_one(900), cluster, GatewayConfig(router="jsq", pd="pd-dynamo")).run().table
    assert short.decode_instance[0] == -1  # 900 <= max_local_prefill_length 1000


def test_one_output_token_is_never_disaggregated():
    t = Simulator(_one(out=1), _cluster(prefill_instances=1), GatewayConfig(router="jsq")).run().table
    assert (t.instance[0], t.decode_instance[0], t.outcome[0]) == (1, -1, 1)


@pytest.mark.parametrize("kw,field", [
    ({"prefill_instances": 2}, "prefill_instances"),
    ({"prefill_instances": -1}, "prefill_instances"),
    ({"prefill_instances": 1.5}, "prefill_instances"),
    ({"kv_link": "carrier-pigeon"}, "kv_link"),
    ({"kv_link_gbps": 0.0}, "kv_link_gbps"),
    ({"kv_link_latency_s": -1e-3}, "kv_link_latency_s"),
])
def test_bad_cluster_settings(kw, field):
    with pytest.raises(ConfigError, match=field):
        ClusterConfig(instances=2, **kw)


def test_bad_pd_combinations():
    with pytest.raises(ConfigError, match="no prefill pool"):
        Simulator(_one(), _cluster(), GatewayConfig(router="jsq", pd="pd-always"))
    with pytest.raises(ConfigError, match="Python policy"):
        Simulator(_one(), _cluster(prefill_instances=1), GatewayConfig(router=_PythonRouter()))
    with pytest.raises(ConfigError, match="threshold"):
        make_policy("pd-llmd:threshold=-1")
    with pytest.raises(ConfigError, match="expected 'pd'"):
        Simulator(_one(), _cluster(prefill_instances=1), GatewayConfig(router="jsq", pd="jsq"))
    sim = Simulator(_one(), _cluster(prefill_instances=1), GatewayConfig(router="jsq"))
    with pytest.raises(ConfigError, match="cannot be autoscaled"):
        sim.set_serving(1)


def test_scenario_yaml_and_policy_combinations():
    d = {"name": "t", "cluster": {"instances": 3, "prefill_instances": 1, "kv_link": "ethernet", "kv_blocks": 500},
         "workload": {"arrival": {"process": "poisson", "rate": 5.0}, "input": {"dist": "fixed", "mean": 2000},
                      "output": {"dist": "fixed", "mean": 20}, "num_requests": 20},
         "gateway": {"router": "lmetric", "pd": "pd-llmd:threshold=1000"}}
    sc = scenario_from_dict(d)
    t = sc.simulator(0).run().table
    assert (t.decode_instance >= 1).all()
    np.testing.assert_allclose(t.transfer_s, 2000 * KV_BYTES / 12.5e9 + 50e-6, rtol=1e-12)
    with pytest.raises(ConfigError, match="cluster.kv_link"):
        scenario_from_dict(d | {"cluster": d["cluster"] | {"kv_link": "wifi"}})
    with pytest.raises(ConfigError, match="gateway.pd"):
        scenario_from_dict(d | {"gateway": {"router": "lmetric", "pd": "lmetric"}})
    spec = parse_policy("lmetric+pd-dynamo:max_local_prefill_length=500")
    assert spec.get("pd") == "pd-dynamo:max_local_prefill_length=500" and spec.get("router") == "lmetric"
    agg = sc.simulator(0, **{"pd": "pd-aggregated"}).run().table
    assert (agg.decode_instance == -1).all()


class _PythonRouter(RoutingPolicy):
    """A router written in Python (decided at the kernel's pauses)."""

    name = "python-first"

    def route(self, request, view):
        return 1


def _pd_env_scenario():
    return scenario_from_dict({
        "name": "pd-env", "cluster": {"instances": 4, "prefill_instances": 2, "kv_blocks": 2000},
        "workload": {"arrival": {"process": "poisson", "rate": 6.0}, "input": {"dist": "lognormal", "mean": 1500, "std": 900},
                     "output": {"dist": "lognormal", "mean": 60, "std": 30}, "num_requests": 120},
        "gateway": {"router": "round-robin", "pd": "pd-llmd:threshold=1500"}})


def test_routing_env_on_a_pd_cluster_picks_the_decode_instance():
    """Routing-v0 on a P/D cluster: the action is the decode instance (the prefill pool is
    masked out and refused), the P/D decision runs in the engine as with a compiled router;
    an agent choosing the decode pool round-robin reproduces the round-robin router exactly."""
    import gymnasium as gym

    import llmsched_gym  # noqa: F401

    sc = _pd_env_scenario()
    ref = sc.simulator(4).run().table
    env = gym.make("llmsched/Routing-v0", scenario=sc, horizon=None, flow_control=None)
    obs, info = env.reset(seed=0, options={"workload_seed": 4})
    k, done = 0, False
    while not done:
        assert not info["action_mask"][:2].any() and info["action_mask"][2:].all()
        obs, _, term, trunc, info = env.step(2 + k % 2)
        k, done = k + 1, term or trunc
    got = env.unwrapped.simulator.table
    for field in ("instance", "decode_instance", "outcome", "first_token_t", "finish_t", "transfer_s"):
        np.testing.assert_array_equal(getattr(got, field), getattr(ref, field), err_msg=field)
    assert (ref.decode_instance >= 2).any() and (ref.decode_instance == -1).any()  # both kinds of request
    env.reset(seed=0)
    with pytest.raises(ValueError, match="prefill instance"):
        env.step(1)
    venv = gym.make_vec("llmsched/Routing-v0", num_envs=2, scenario=sc, horizon=None, flow_control=None)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="prefill instance"):
        venv.step(np.array([2, 0]))
