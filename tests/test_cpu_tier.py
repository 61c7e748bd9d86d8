"""The CPU KV tier (ClusterConfig.cpu_kv_gb): an LRU victim cache of evicted prefix units
that loads back over the host link (docs/architecture.md, "CPU KV tier")."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.engine.hardware import get_model
from llmsched_gym.engine.layout import II_CPU_USED, II_USED
from llmsched_gym.errors import ConfigError
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.workloads.workload import Workload

BLOCK = 16


def _workload() -> Workload:
    """A (4 full blocks, ids 1-4) finishes; B (9 blocks) then needs the whole KV of 10
    blocks, evicting A's cached units; C (A's 4 blocks + 1 more) arrives after B finished."""
    a, b, c = [1, 2, 3, 4], list(range(10, 19)), [1, 2, 3, 4, 9]
    return Workload(arrival_s=[0.0, 1.0, 2.0], input_tokens=[64, 144, 80], output_tokens=[2, 2, 2],
                    priority=[0, 0, 0], hash_ids=a + b + c, hash_offsets=[0, 4, 13, 18], hash_block_tokens=BLOCK)


def _run(kv_blocks: int, **cluster) -> Simulator:
    sim = Simulator(_workload(), ClusterConfig(instances=1, kv_blocks=kv_blocks, **cluster),
                    GatewayConfig(router="round-robin"))
    return sim.run()


def test_evicted_prefix_loads_back_from_the_cpu_tier():
    """Hand-computed: without the tier C recomputes its 64-token prefix; with it C loads
    those 64 tokens (64 x 163,840 bytes of Qwen3-14B KV over the H100's 64 GB/s link:
    163.84 us added to its first step) and otherwise prefills as a GPU hit would."""
    kv_per_token = get_model("qwen3-14b").kv_bytes_per_token
    assert kv_per_token == 2 * 40 * 8 * 128 * 2 == 163_840
    plain = _run(10)
    tiered = _run(10, cpu_kv_gb=1.0)
    gpu_hit = _run(100)  # room for everything: C's prefix is still on the GPU
    assert plain.table.prefix_hit[2] == 0 and plain.table.cpu_hit[2] == 0
    assert tiered.table.prefix_hit[2] == 64 and tiered.table.cpu_hit[2] == 64
    assert gpu_hit.table.prefix_hit[2] == 64 and gpu_hit.table.cpu_hit[2] == 0
    ttft = lambda s: s.table.first_token_t[2] - s.table.arrival[2]  # noqa: E731
    load_s = 64 * kv_per_token / 64e9
    assert ttft(tiered) - ttft(gpu_hit) == pytest.approx(load_s, rel=1e-9)
    assert ttft(tiered) < ttft(plain)  # loading 64 tokens is faster than recomputing them
    for s in (plain, tiered, gpu_hit):
        assert s.table.counts()["finished"] == 3
        assert s.state.inst_i[II_USED, 0] == 0  # every block released at drain
    cap = ClusterConfig(instances=1, kv_blocks=10, cpu_kv_gb=1.0).cpu_blocks()
    assert cap == int(1e9 // (kv_per_token * BLOCK)) == 381
    assert 0 < tiered.state.inst_i[II_CPU_USED, 0] <= cap


def test_cpu_tier_evicts_least_recently_used_and_link_override():
    """A tier of 4 blocks keeps the last evicted units only; a slower link costs more."""
    small = ClusterConfig(instances=1, kv_blocks=10, cpu_kv_gb=4 * 163_840 * BLOCK / 1e9).cpu_blocks()
    assert small == 4
    s = _run(10, cpu_kv_gb=4 * 163_840 * BLOCK / 1e9)
    assert s.state.inst_i[II_CPU_USED, 0] <= 4
    slow = _run(10, cpu_kv_gb=1.0, cpu_link_gbps=8.0)
    fast = _run(10, cpu_kv_gb=1.0)
    ttft = lambda s: s.table.first_token_t[2] - s.table.arrival[2]  # noqa: E731
    assert ttft(slow) - ttft(fast) == pytest.approx(64 * 163_840 * (1 / 8e9 - 1 / 64e9), rel=1e-9)


@pytest.mark.parametrize("field,value", [("cpu_kv_gb", -1.0), ("cpu_link_gbps", 0.0)])
def test_bad_cpu_tier_settings(field, value):
    with pytest.raises(ConfigError, match=field):
        ClusterConfig(**{field: value})


def test_cpu_tier_off_by_default_changes_nothing():
    a, b = _run(10), _run(10, cpu_kv_gb=0.0)
    np.testing.assert_array_equal(a.table.first_token_t, b.table.first_token_t)


@pytest.mark.parametrize("events,seen", [(True, 64), (False, 0)])
def test_precise_prefix_view_sees_the_cpu_tier_with_kv_events(events, seen):
    """Just before C arrives, A's units are in the CPU tier only: the routers' precise view
    counts them when the tier publishes KV events (llm-d's precise scorer with offloading)."""
    sim = Simulator(_workload(), ClusterConfig(instances=1, kv_blocks=10, cpu_kv_gb=1.0, cpu_kv_events=events),
                    GatewayConfig(router="round-robin"), horizon_s=1.9).run()
    assert sim.state.cached_tokens(0, 2).tolist() == [seen]
    assert _run(10).state.cached_tokens(0, 2).tolist() == [80]  # at the end C (all 5 blocks) is on the GPU


@pytest.mark.parametrize("shared,hit", [(False, 0), (True, 64)])
def test_a_shared_tier_serves_every_instance(shared, hit):
    """Round-robin puts A and B on instance 0 (B evicts A's prefix) and C on instance 1: only
    a tier shared by the cluster (a Mooncake store) has A's prefix for C."""
    a, x, b, c = [1, 2, 3, 4], [30], list(range(10, 19)), [1, 2, 3, 4, 9]
    w = Workload(arrival_s=[0.0, 0.5, 1.0, 2.0], input_tokens=[64, 16, 144, 80], output_tokens=[2, 2, 2, 2],
                 priority=[0, 0, 0, 0], hash_ids=a + x + b + c, hash_offsets=[0, 4, 5, 14, 19], hash_block_tokens=BLOCK)
    cluster = ClusterConfig(instances=2, kv_blocks=10, cpu_kv_gb=1.0, cpu_kv_shared=shared)
    sim = Simulator(w, cluster, GatewayConfig(router="round-robin")).run()
    assert sim.table.instance.tolist() == [0, 1, 0, 1]
    assert sim.table.cpu_hit[3] == hit and sim.table.prefix_hit[3] == hit
    used = sim.state.inst_i[II_CPU_USED, :2]
    assert (used[1] == 0) if shared else (used[1] > 0 or used[0] > 0)  # a shared tier counts at its owner
    assert used.sum() <= 2 * cluster.cpu_blocks()
