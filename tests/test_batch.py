"""The batched engine: cluster c of a batch equals the same cluster simulated alone, and
property tests of conservation and KV bookkeeping on random small configurations."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched_gym import ClusterConfig, EngineConfig, GatewayConfig, Simulator, simulate_batch
from llmsched_gym.engine.layout import EVICTED, II_CPU_USED
from llmsched_gym.workloads.synthetic import ArrivalSpec, LengthSpec, PrefixSpec, WorkloadSpec, generate

FIELDS = ("instance", "dispatch_t", "first_token_t", "finish_t", "end_t", "outcome", "prefix_hit",
          "preemptions", "generated")


def _workload(seed, rate, n, prefix_groups=0, classes=False):
    spec = WorkloadSpec(arrival=ArrivalSpec("poisson", rate), input=LengthSpec("gaussian", 600, 300, 16, 3000),
                        output=LengthSpec("gaussian", 120, 80, 1, 600), num_requests=n, name="t",
                        **({"prefix": PrefixSpec(system_prompt_groups=prefix_groups, system_prompt_tokens=LengthSpec("fixed", 512),
                                                    session_share=0.3)} if prefix_groups else {}))
    w = generate(spec, seed)
    if classes:
        w.priority = np.where(np.arange(len(w)) % 3 == 0, -1, 0)
    return w


def _assert_same(a: Simulator, b: Simulator) -> None:
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(a.table, f), getattr(b.table, f), err_msg=f)


def test_batch_cluster_equals_alone():
    specs = []
    for k, (router, flow) in enumerate([("jsq", None), ("round-robin", "soft-reflective-ceiling"),
                                        ("lmetric", None), ("least-tokens", "static-usage-limit")]):
        w = _workload(k, 30 + 10 * k, 300, prefix_groups=4, classes=flow is not None)
        specs.append(dict(workload=w, cluster=ClusterConfig(instances=2 + k % 2, kv_blocks=600 + 200 * k),
                          gateway=GatewayConfig(router=router, flow_control=flow), seed=k))
    batched = simulate_batch(specs)
    for spec, sim in zip(specs, batched):
        _assert_same(sim, Simulator(**spec).run())


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), instances=st.integers(1, 3), kv=st.integers(60, 800),
       rate=st.floats(5, 80), seqs=st.integers(2, 64), budget=st.sampled_from([256, 512, 2048]),
       groups=st.sampled_from([0, 3]), router=st.sampled_from(["jsq", "round-robin", "least-tokens", "random"]),
       flow=st.sampled_from([None, "soft-reflective-ceiling", "static-usage-limit"]),
       cpu_gb=st.sampled_from([0.0, 0.05, 1.0]), evict=st.booleans())
def test_random_configs_conserve_and_release(seed, instances, kv, rate, seqs, budget, groups, router, flow, cpu_gb,
                                             evict):
    w = _workload(seed, rate, 80, prefix_groups=groups, classes=flow is not None)
    cluster = ClusterConfig(instances=instances, kv_blocks=kv, cpu_kv_gb=cpu_gb,
                            engine=EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=budget))
    gateway = GatewayConfig(router=router, flow_control=flow, ttl_s=5.0, eviction=evict and flow is not None)
    sim = Simulator(w, cluster, gateway, seed=seed).run()
    counts = sim.table.counts()
    assert sum(counts.values()) == len(w) and counts["in_flight"] == 0  # one outcome each, drained
    assert (sim.table.priority[sim.table.outcome == EVICTED] < 0).all()  # only sheddable requests are evicted
    assert (sim.kv_used() == 0).all()  # every reference released at drain
    st_ = sim.state
    i0, i1 = st_.inst_off[0], st_.inst_off[1]
    assert (st_.inst_i[2, i0:i1] >= 0).all() and (st_.inst_i[3, i0:i1] <= kv).all()  # used / evictable in range
    cpu_used = st_.inst_i[II_CPU_USED, i0:i1]
    assert (cpu_used >= 0).all() and (cpu_used <= cluster.cpu_blocks()).all()  # the CPU tier within capacity
    assert (sim.table.cpu_hit <= sim.table.prefix_hit).all() and (cpu_gb or not sim.table.cpu_hit.any())
    again = simulate_batch([dict(workload=w, cluster=cluster, gateway=gateway, seed=seed)] * 2)
    for s in again:
        _assert_same(sim, s)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), instances=st.integers(2, 4), prefill=st.integers(1, 3), kv=st.integers(200, 800),
       rate=st.floats(5, 80), seqs=st.integers(2, 64), budget=st.sampled_from([256, 2048]),
       groups=st.sampled_from([0, 3]), router=st.sampled_from(["jsq", "round-robin", "least-tokens", "llm-d", "lmetric"]),
       pd=st.sampled_from(["pd-always", "pd-llmd:threshold=600", "pd-dynamo:max_local_prefill_length=300"]),
       preemption=st.sampled_from(["recompute", "restart"]), cpu_gb=st.sampled_from([0.0, 0.05]),
       link=st.sampled_from(["nvlink", "tcp"]))
def test_random_pd_configs_conserve_and_release(seed, instances, prefill, kv, rate, seqs, budget, groups, router, pd,
                                                preemption, cpu_gb, link):
    """P/D disaggregation's states (prefilling on the prefill pool, blocks held there while
    the KV transfers, arrived and decoding on the decode pool, preempted there): one
    outcome each, every block released on both pools, the pools respected, deterministic."""
    prefill = min(prefill, instances - 1)
    w = _workload(seed, rate, 80, prefix_groups=groups)
    cluster = ClusterConfig(instances=instances, kv_blocks=kv, cpu_kv_gb=cpu_gb, prefill_instances=prefill, kv_link=link,
                            engine=EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=budget, preemption=preemption))
    gateway = GatewayConfig(router=router, pd=pd, ttl_s=5.0)
    sim = Simulator(w, cluster, gateway, seed=seed).run()
    t = sim.table
    counts = t.counts()
    assert sum(counts.values()) == len(w) and counts["in_flight"] == 0
    assert (sim.kv_used() == 0).all()
    st_ = sim.state
    i0, i1 = st_.inst_off[0], st_.inst_off[1]
    assert (st_.inst_i[2, i0:i1] == 0).all() and (st_.inst_i[3, i0:i1] <= kv).all()  # nothing held, evictable in range
    sent = ~np.isnan(t.dispatch_t) & (t.outcome != 4)
    dis = t.decode_instance >= 0
    assert (t.instance[dis] < prefill).all() and (t.decode_instance[dis] >= prefill).all()
    assert (t.instance[sent & ~dis] >= prefill).all()
    assert (np.isnan(t.transfer_s) == ~dis).all()
    again = simulate_batch([dict(workload=w, cluster=cluster, gateway=gateway, seed=seed)] * 2)
    for s in again:
        _assert_same(sim, s)
        np.testing.assert_array_equal(s.table.decode_instance, t.decode_instance)


def test_slot_reload_and_regrow_keep_other_clusters_exact():
    """A cluster reloaded mid-run with a larger workload regrows the shared state; the
    other cluster's run continues bit for bit."""
    from llmsched_gym import SimulatorBatch

    small, large = _workload(1, 40, 150, prefix_groups=3), _workload(2, 40, 400, prefix_groups=3)
    cluster, gateway = ClusterConfig(instances=2, kv_blocks=700, cpu_kv_gb=0.05), GatewayConfig(router="llm-d")
    alone = Simulator(small, cluster, gateway, seed=5).run()
    sims = [Simulator(small, cluster, gateway, seed=5, batch=False), Simulator(small, cluster, gateway, seed=6,
                                                                              batch=False)]
    batch = SimulatorBatch(sims)
    sims[0].advance(1.0)
    before = batch.state
    replacement = Simulator(large, cluster, gateway, seed=7, batch=False)
    batch.replace(1, replacement)
    assert batch.state is not before  # the larger workload did not fit: regrown
    sims[0].run()
    replacement.run()
    _assert_same(sims[0], alone)
    _assert_same(replacement, Simulator(large, cluster, gateway, seed=7).run())


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), instances=st.integers(1, 4), rate=st.floats(5, 80),
       router=st.sampled_from(["jsq", "round-robin", "least-tokens", "llm-d", "lmetric"]),
       flow=st.sampled_from([None, "soft-reflective-ceiling"]), cold=st.sampled_from([0.0, 0.3, 2.0]),
       targets=st.lists(st.integers(1, 4), min_size=1, max_size=12), interval=st.sampled_from([0.2, 0.7]))
def test_random_scaling_conserves_and_routes_to_serving(seed, instances, rate, router, flow, cold, targets,
                                                         interval):
    """Autoscaling's states (serving, starting, waiting behind a starting one, draining,
    stopped) under random scale sequences: every arrival ends in one outcome, KV is
    released, no request is routed to an instance outside the serving prefix, and the
    instance-seconds stay between instance 0's (it always serves) and the allocated fleet's."""
    from llmsched_gym.autoscaling import Fleet, advance_fleets

    w = _workload(seed, rate, 80, prefix_groups=3, classes=flow is not None)
    sim = Simulator(w, ClusterConfig(instances=instances, kv_blocks=600), GatewayConfig(router=router,
                    flow_control=flow, ttl_s=5.0), seed=seed)
    fleet = Fleet(sim, min(targets[0], instances), cold)
    changes = [(-np.inf, sim.serving)]  # (time, serving) at every change; a dispatch at that time saw the old one
    set_serving = sim.set_serving

    def logged(n):
        changes.append((sim.now, n))
        set_serving(n)

    sim.set_serving = logged
    t, status = 0.0, "time"
    for k in range(200):
        fleet.set_target(min(targets[k % len(targets)], instances))
        t += interval
        status = advance_fleets(sim.state, {0: sim}, {0: fleet}, {0: t})[0]
        c = fleet.counts()
        assert sum(c.values()) == instances and c["serving"] >= 1 and c["serving"] <= fleet.target
        if status != "time":
            break
    assert status == "done"
    counts = sim.table.counts()
    assert sum(counts.values()) == len(w) and counts["in_flight"] == 0
    assert (sim.kv_used() == 0).all()
    tb = sim.table
    times = np.array([x for x, _ in changes])
    serving = np.array([n for _, n in changes])
    sent = ~np.isnan(tb.dispatch_t)
    at = serving[np.searchsorted(times, tb.dispatch_t[sent], side="left") - 1]
    assert (tb.instance[sent] < at).all()
    assert sim.now - 1e-9 <= fleet.instance_seconds() <= instances * sim.now + 1e-9
