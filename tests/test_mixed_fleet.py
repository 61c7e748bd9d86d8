"""A mixed fleet (``ClusterConfig.pools``): instances of different GPUs in one cluster, each
with its own step-time model and KV capacity, through the config, YAML and every router."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

import llmsched_gym as g
from llmsched_gym import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import scenario_from_dict

FIELDS = ("instance", "first_token_t", "finish_t", "outcome", "prefix_hit", "preemptions")
MIXED = [{"instances": 1, "hardware": "H100"}, {"instances": 1, "hardware": "A100", "kv_blocks": 4000}]


def _run(pools, router="round-robin", seed=0):
    w = g.make_scenario("codegen", qps=6).build_workload(seed)
    cluster = ClusterConfig(instances=2, latency_model="roofline", pools=pools)
    return Simulator(w, cluster, GatewayConfig(router=router), seed=seed, horizon_s=40).run()


def test_one_pool_of_the_clusters_own_hardware_is_the_homogeneous_cluster():
    alone, pooled = _run(None), _run([{"instances": 2}])
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(pooled.table, f), getattr(alone.table, f), err_msg=f)


def test_each_instance_has_its_pools_step_times_and_kv():
    sim = _run(MIXED)
    t = sim.table
    np.testing.assert_array_equal(sim.state.instances.total[:2], [ClusterConfig(latency_model="roofline").total_blocks(),
                                                                   4000])
    ttft = t.first_token_t - t.arrival
    h100, a100 = (float(np.nanmedian(ttft[t.instance == i])) for i in (0, 1))
    assert a100 > 1.5 * h100  # the A100 prefills the same prompts more slowly
    cluster = ClusterConfig(instances=2, latency_model="roofline", pools=MIXED)
    models = cluster.instance_latencies()
    assert models[0].hardware.name == "H100" and models[1].hardware.name == "A100"


@pytest.mark.parametrize("router", ["jsq", "lmetric", "llm-d", "llm-d-predicted-latency", "preble", "least-tokens"])
def test_every_router_runs_on_a_mixed_fleet(router):
    sim = _run(MIXED, router)
    counts = sim.table.counts()
    assert sum(counts.values()) == len(sim.workload) and counts["finished"] > 0


def test_pools_from_yaml():
    text = """
name: mixed
cluster: {instances: 3, latency_model: roofline, pools: [{instances: 2, hardware: H100}, {instances: 1, hardware: A100, tp: 2}]}
workload: {arrival: {process: poisson, rate: 4}, input: {dist: fixed, mean: 512}, output: {dist: fixed, mean: 64}, duration_s: 5}
"""
    sc = scenario_from_dict(yaml.safe_load(text))
    assert [n for n, _ in sc.cluster.pool_configs()] == [2, 1]
    assert sc.simulator(0).run().table.counts()["finished"] > 0


@pytest.mark.parametrize("pools, match", [
    ([{"instances": 1}], "add up to 1; they must add up to cluster.instances=2"),
    ([{"hw": "A100", "instances": 2}], r"pools\[0\]: unknown key\(s\) 'hw'"),
    ([{"hardware": "A100"}, {"instances": 2}], "must give its instances"),
    ([{"instances": 2, "tp": 0}], r"pools\[0\]\.tp"),
    ("A100", "pools"),
])
def test_bad_pools(pools, match):
    with pytest.raises(ConfigError, match=match):
        ClusterConfig(instances=2, latency_model="roofline", pools=pools)
