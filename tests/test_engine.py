"""Hand-computed engine cases (docs/architecture.md) with a linear step-time model.

Coefficients are chosen for easy arithmetic: step = 5000 + 10 x prefill tokens
+ 100 x decode requests (us); 1000 us from arrival to schedulable.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_accounting

from llmsched_gym.engine import EngineConfig
from llmsched_gym.evaluation.metrics import summarize
from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator
from llmsched_gym.workloads.workload import Workload

COEF = dict(alpha0=1000.0, alpha1=0.0, alpha2=0.0, beta0=5000.0, beta1=10.0, beta2=100.0)


def simulate(workload, instances=1, kv_blocks=1000, budget=2048, skipping=True, **gateway):
    cluster = ClusterConfig(
        instances=instances, latency_model="linear", latency_params=COEF, kv_blocks=kv_blocks,
        engine=EngineConfig(max_num_batched_tokens=budget, event_skipping=skipping),
    )
    sim = Simulator(workload, cluster, GatewayConfig(**gateway), seed=0).run()
    assert_accounting(sim)
    return sim


def test_lone_request_exact_ttft_and_e2e():
    sim = simulate(Workload([0.5], [100], [10]))
    t = sim.table
    # schedulable at 0.5 + 1 ms; prefill 5000 + 10*100 us; then 9 decode steps of 5100 us
    assert t.first_token_t[0] - 0.5 == pytest.approx(0.001 + 0.006, abs=1e-12)
    assert t.finish_t[0] - 0.5 == pytest.approx(0.007 + 9 * 0.0051, abs=1e-12)
    s = summarize(sim)["classes"]["all"]
    assert s["tpot_mean"] == pytest.approx(0.0051)


def test_chunked_prefill_splits_prompt_by_budget():
    sim = simulate(Workload([0.0], [5000], [2]))
    # chunks of 2048, 2048, 904 tokens, then one decode step
    chunks = [5000 + 10 * 2048, 5000 + 10 * 2048, 5000 + 10 * 904]
    assert sim.table.first_token_t[0] == pytest.approx(0.001 + sum(chunks) * 1e-6)
    assert sim.table.finish_t[0] == pytest.approx(0.001 + (sum(chunks) + 5100) * 1e-6)


def shared_prefix_pair(second_arrival: float) -> Workload:
    # 16-token hash blocks: both share the first three blocks (48 tokens)
    return Workload([0.0, second_arrival], [64, 64], [2, 2], hash_ids=[1, 2, 3, 4, 1, 2, 3, 5],
                    hash_offsets=[0, 4, 8], hash_block_tokens=16)


def test_second_request_computes_only_uncached_tokens():
    sim = simulate(shared_prefix_pair(1.0))
    t = sim.table
    assert t.prefix_hit.tolist() == [0, 48]
    # the second prefill prices 16 uncached tokens
    assert t.first_token_t[1] - 1.0 == pytest.approx(0.001 + (5000 + 10 * 16) * 1e-6)
    assert summarize(sim)["prefix_hit_token_ratio"] == pytest.approx(48 / 128)


def test_fully_cached_prompt_recomputes_last_block():
    w = Workload([0.0, 1.0], [64, 64], [2, 2], hash_ids=[1, 2, 3, 4] * 2, hash_offsets=[0, 4, 8],
                 hash_block_tokens=16)
    sim = simulate(w)
    assert sim.table.prefix_hit.tolist() == [0, 48]


def test_small_kv_cache_preempts_then_completes_everything():
    # each request needs ceil((64 + 100) / 16) = 11 blocks at its end; 4 x 11 > 20
    w = Workload(np.zeros(4), [64] * 4, [100] * 4)
    sim = simulate(w, kv_blocks=20)
    assert sim.table.preemptions.sum() > 0
    assert sim.table.counts()["finished"] == 4
    assert (sim.table.generated == 100).all()
    assert sim.kv_used()[0] == 0


def test_request_larger_than_kv_capacity_is_dropped():
    w = Workload([0.0, 0.0], [400, 64], [10, 10])  # 26 blocks > 20
    sim = simulate(w, kv_blocks=20)
    assert sim.table.counts() == {"in_flight": 0, "finished": 1, "rejected": 0, "expired": 0, "dropped": 1, "evicted": 0,
                                  "timed_out": 0, "crashed": 0}
    assert summarize(sim)["outcomes"]["dropped"] == 1


def test_event_skipping_is_exact():
    rng = np.random.default_rng(3)
    n = 400
    w = Workload(np.cumsum(rng.exponential(0.02, n)), rng.integers(2, 900, n), rng.integers(2, 600, n))
    a = simulate(w, instances=2, kv_blocks=300)
    b = simulate(w, instances=2, kv_blocks=300, skipping=False)
    assert a.table.preemptions.sum() > 0  # the case exercises preemption too
    for col in ("first_token_t", "finish_t", "prefix_hit", "preemptions", "outcome"):
        np.testing.assert_array_equal(getattr(a.table, col), getattr(b.table, col))
    assert a.iterations.sum() == b.iterations.sum()


def test_same_seed_same_summary_bit_for_bit():
    rng = np.random.default_rng(5)
    n = 300
    w = Workload(np.cumsum(rng.exponential(0.01, n)), rng.integers(2, 900, n), rng.integers(2, 300, n))
    runs = [simulate(w, instances=3, router="random") for _ in range(2)]
    s0, s1 = (summarize(s) for s in runs)
    s0.pop("wall_seconds"), s1.pop("wall_seconds")
    assert s0 == s1
    np.testing.assert_array_equal(runs[0].table.instance, runs[1].table.instance)


def test_horizon_leaves_requests_in_flight_and_counts_add_up():
    w = Workload(np.linspace(0, 10, 200), [500] * 200, [400] * 200)
    cluster = ClusterConfig(instances=1, latency_model="linear", latency_params=COEF, kv_blocks=1000)
    sim = Simulator(w, cluster, horizon_s=3.0).run()
    c = sim.table.counts()
    assert c["in_flight"] > 0 and c["finished"] > 0
    assert sum(c.values()) == 200
    assert summarize(sim)["outcomes"]["arrivals"] == int((w.arrival_s <= 3.0).sum())


def test_restart_preemption_discards_output_and_restarts_ttft():
    """BLIS restart semantics: a preempted request regenerates its output and its first
    token is the one after its last re-prefill; recompute keeps both."""
    w = Workload(arrival_s=[0.0, 0.0, 0.0, 0.0], input_tokens=[100] * 4, output_tokens=[100] * 4)
    runs = {}
    for mode in ("recompute", "restart"):
        cluster = ClusterConfig(instances=1, latency_model="linear", latency_params=COEF, kv_blocks=20,
                                engine=EngineConfig(max_num_batched_tokens=2048, preemption=mode))
        runs[mode] = Simulator(w, cluster, GatewayConfig(router="round-robin")).run()
    rec, rst = runs["recompute"].table, runs["restart"].table
    hit = rst.preemptions > 0
    assert hit.any() and (rec.preemptions > 0).any()
    assert (rst.generated == 100).all() and (rec.generated == 100).all()
    assert rst.counts()["finished"] == 4 and (runs["restart"].kv_used() == 0).all()
    # the same first preemption happens in both; afterwards restart re-prefills from scratch
    first = np.flatnonzero(hit)[0]
    assert rst.first_token_t[first] > rec.first_token_t[first]
    assert rst.finish_t[first] > rec.finish_t[first]  # 100 tokens regenerated


def test_prefix_table_keeps_keys_and_free_queue_through_deletions():
    """Per-instance prefix-cache table: colliding keys are found after any deletion order
    (backward-shift deletion), and moved entries keep their free-queue links."""
    from llmsched_gym.engine import kernel
    from llmsched_gym.engine.layout import (
        EN_KEY,
        EN_NEXT,
        EN_PREV,
        II_ENT0,
        II_ENT_MASK,
        II_LRU_HEAD,
        N_EN,
        N_II,
    )

    rng = np.random.default_rng(0)
    size = 16
    for _ in range(50):
        ent = np.zeros((size, N_EN), np.int64)
        inst = np.zeros((N_II, 1), np.int64)
        inst[II_ENT0, 0], inst[II_ENT_MASK, 0] = 0, size - 1
        inst[[kernel.II_LRU_HEAD, kernel.II_LRU_TAIL], 0] = -1
        keys = rng.choice(200, size=8, replace=False)
        for k in keys:  # all unreferenced: the free queue holds them in insertion order
            kernel._lru_append(ent, inst, 0, kernel._insert(ent, inst, 0, k))
        live = list(keys)
        for k in rng.permutation(keys)[:5]:
            e = kernel._find(ent, inst, 0, k)
            kernel._lru_remove(ent, inst, 0, e)
            kernel._delete(ent, inst, 0, e)
            live.remove(k)
            assert kernel._find(ent, inst, 0, k) == -1
            assert all(ent[kernel._find(ent, inst, 0, q), EN_KEY] == q + 1 for q in live)
            order, e = [], inst[II_LRU_HEAD, 0]
            while e >= 0:  # the free queue still lists the live keys in insertion order
                order.append(int(ent[e, EN_KEY] - 1))
                assert ent[e, EN_NEXT] < 0 or ent[ent[e, EN_NEXT], EN_PREV] == e
                e = ent[e, EN_NEXT]
            assert order == live


@pytest.mark.parametrize("router", ["round-robin", "llm-d"])
def test_hashed_prefix_tables_simulate_as_direct_ones(monkeypatch, router):
    """Both prefix-cache layouts give the same run bit for bit; a small KV cache keeps
    the hashed tables small and busy (collisions, evictions, backward shifts)."""
    import llmsched_gym as g
    from llmsched_gym.engine import state as ST
    from llmsched_gym.engine.layout import EN_KEY, II_ENT0

    sc = g.make_scenario("chatbot", qps=30, duration_s=40)
    w = sc.build_workload(0)
    cluster = ClusterConfig(instances=2, kv_blocks=1500, cpu_kv_gb=0.5)  # and a CPU tier of 190 blocks

    def run():
        sim = Simulator(w, cluster, GatewayConfig(router=router), seed=0).run()
        t = sim.table
        return sim, (t.first_token_t, t.finish_t, t.prefix_hit, t.cpu_hit, t.instance, t.outcome, t.preemptions)

    monkeypatch.setattr(ST, "DIRECT_MAX_RATIO", 10**9)
    direct_sim, direct = run()
    assert direct_sim.table.cpu_hit.any()  # the tier is used
    assert ST._table_size(direct_sim.inputs, ST._keys_of(direct_sim.inputs))[1]

    monkeypatch.undo()  # the default: hashed tables sized by the most units that fit at once
    hashed_sim, got = run()
    x, units = hashed_sim.inputs, ST._keys_of(hashed_sim.inputs)
    slots, direct_table = ST._table_size(x, units)
    assert not direct_table and slots * 4 < units[4]  # far fewer slots than keys: a busy table
    most = ST._most_units(units[8], x.kv_blocks)
    sizes = np.sort(np.repeat(np.arange(len(units[8])), units[8]))  # the distinct units' sizes
    assert np.cumsum(sizes)[most - 1] <= x.kv_blocks < np.cumsum(sizes)[most]  # the most that fit
    assert most < x.kv_blocks  # a tighter bound than one unit per block
    st = hashed_sim.state
    for i in range(x.instances):  # what the instances cache at the end is within the bound
        e0 = st.inst_i[II_ENT0, i]
        assert 0 < np.count_nonzero(st.ent[e0:e0 + slots, EN_KEY]) <= most
    for a, b in zip(direct, got):
        np.testing.assert_array_equal(a, b)


_COLD_COMPILE = """
from llmsched_gym.engine import kernel, warmup
from llmsched_gym.simulator import _warm_up_simulator, compile_kernels
assert warmup.cache_is_cold()
compile_kernels()
state = _warm_up_simulator().state
for name in warmup.BACKGROUND + warmup.FOREGROUND:
    fn = getattr(kernel, name)
    assert fn.signatures == [warmup.signature(name, state)], (name, fn.signatures)
    assert len(fn._cache._cache_file._load_index()) == 1, name  # the event loop used the precompiled one
assert not warmup.cache_is_cold()
"""


@pytest.mark.slow
def test_cold_compile_in_two_processes_is_what_the_event_loop_uses(tmp_path):
    """On an empty numba cache, the subtrees compiled by the second process and by this
    one have exactly the types the event loop calls them with: the event loop's compile
    loads them from the cache instead of compiling its own (about 80 s of compilation)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", _COLD_COMPILE], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.count("compiling the simulator, once per install") == 1  # the user is told, once


def test_mixed_fleet_instances_price_steps_with_their_own_model():
    """A cluster whose instance 1 has twice instance 0's step coefficients and half its KV:
    one request each (round-robin), a hand-computed first token per instance."""
    from llmsched_gym import SimulatorBatch
    from llmsched_gym.engine.latency import LinearModel
    from llmsched_gym.workloads.workload import Workload

    coef = dict(alpha0=100.0, alpha1=0.0, alpha2=50.0, beta0=1000.0, beta1=2.0, beta2=10.0)
    fast = LinearModel(**coef)
    slow = LinearModel(**{**coef, "beta0": 2000.0, "beta1": 4.0, "beta2": 20.0})
    w = Workload([0.0, 0.0], [512, 512], [1, 1])
    sim = Simulator(w, ClusterConfig(instances=2, kv_blocks=100), GatewayConfig(router="round-robin"), batch=False)
    sim.latency = fast
    sim.inputs.latency, sim.inputs.instance_latency = fast, (fast, slow)
    sim.inputs.kv_blocks = np.array([100, 50])
    SimulatorBatch([sim]).run()
    t = sim.table
    assert list(t.instance) == [0, 1]
    # arrival delay alpha0, one prefill step beta0 + beta1 x 512, first-token delay alpha2 (us)
    np.testing.assert_allclose(t.first_token_t - t.dispatch_t, [(100 + 1000 + 2 * 512 + 50) * 1e-6,
                                                                (100 + 2000 + 4 * 512 + 50) * 1e-6])
    np.testing.assert_array_equal(sim.state.instances.total[:2], [100, 50])


def test_a_state_larger_than_memory_is_refused_before_allocation(monkeypatch):
    """The state's size comes from the field table before numpy maps it (lazily: the run would
    be killed when it touched the pages); the simulator names the sizes in one line."""
    from llmsched_gym.engine import state as ST
    from llmsched_gym.errors import ConfigError
    from llmsched_gym.workloads.workload import Workload

    w = Workload([0.0, 0.1], [64, 64], [4, 4])
    sim = Simulator(w, ClusterConfig(instances=2, kv_blocks=100), GatewayConfig(router="jsq"))
    real = sum(v.nbytes for k, v in vars(sim.state).items() if isinstance(v, np.ndarray) and not k.endswith("_off"))
    caps = [sim.state._caps(0)]
    assert ST.state_bytes(caps, sim.state.num_bands, sim.state.max_seqs) == real
    monkeypatch.setattr(ST, "memory_bytes", lambda: real - 1)
    with pytest.raises(ConfigError, match=r"needs 0\.0 GiB, more than .* for 2 instances x 2 requests"):
        Simulator(w, ClusterConfig(instances=2, kv_blocks=100), GatewayConfig(router="jsq"))
