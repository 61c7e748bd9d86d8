"""Routing baselines (docs/architecture.md) on hand-built router views with hand-computed answers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmsched_gym.gateway.policy import make_policy
from llmsched_gym.gateway.view import RequestInfo, RouterView

ENGINE = SimpleNamespace(block_size=16, max_num_batched_tokens=2048)


class FakeLatency:
    """step = 1000 + 10 us per prefill token + 100 us per decode request + 0.01 us per context token."""

    def step_time_us(self, prefill_new: np.ndarray, prefill_len: np.ndarray, n_decode: int,
                     decode_context_sum: int) -> float:
        return 1000.0 + 10.0 * float(np.sum(prefill_new)) + 100.0 * n_decode + 0.01 * decode_context_sum


def make_view(*, hits=None, seed: int = 0, now: float = 0.0, **arrays) -> RouterView:
    """A view of ``I`` instances (the length of any given array); unspecified arrays are 0.

    ``hits``: precise prefix-hit tokens, an array (same for every request) or a callable.
    """
    n = len(next(iter(arrays.values()))) if arrays else len(hits)
    fields = {k: np.zeros(n, dtype=np.float64 if k in ("kv_util", "metrics_age_s") else np.int64)
              for k in ("waiting", "running", "kv_util", "metrics_age_s", "in_flight", "queued_prefill_tokens")}
    fields.update({k: np.asarray(v) for k, v in arrays.items()})
    fields.setdefault("kv_blocks", np.full(n, 1000))
    if callable(hits):
        hit_fn = hits
    else:
        fixed = np.zeros(n, dtype=np.int64) if hits is None else np.asarray(hits)
        hit_fn = lambda r: fixed  # noqa: E731
    return RouterView(now=now, num_instances=n, saturation=0.0, prefix_hit_tokens=hit_fn,
                      latency_model=FakeLatency(), engine=ENGINE, rng=np.random.default_rng(seed), **fields)


def make_request(rid: int = 0, input_tokens: int = 1000, hash_ids=(), prefix_group: int = -1,
                 expected_output: float = 100.0, block: int = 64) -> RequestInfo:
    ids = np.asarray(hash_ids, dtype=np.int64)
    return RequestInfo(id=rid, arrival_s=0.0, input_tokens=input_tokens, output_tokens=int(expected_output),
                       expected_output_tokens=expected_output, priority=0, hash_ids=ids,
                       hash_block_tokens=block if len(ids) else 0, prefix_group=prefix_group)


def router(spec: str, n: int):
    policy = make_policy(spec, role="routing")
    policy.reset(n, np.random.default_rng(0))
    return policy


# --- load-only routers -------------------------------------------------------------------

def test_round_robin_and_random():
    rr, view = router("round-robin", 3), make_view(waiting=[0, 0, 0])
    assert [rr.route(make_request(), view) for _ in range(5)] == [0, 1, 2, 0, 1]
    rnd = router("random", 3)
    picks = {rnd.route(make_request(), view) for _ in range(100)}
    assert picks == {0, 1, 2}


def test_jsq_and_vllm_dp_disagree():
    # jsq: running + waiting = [1, 3]; vllm-dp: 4*waiting + running = [4, 3].
    view = make_view(waiting=[1, 0], running=[0, 3])
    assert router("jsq", 2).route(make_request(), view) == 0
    assert router("vllm-dp", 2).route(make_request(), view) == 1


def test_jsq_random_ties():
    view = make_view(waiting=[1, 0, 0], running=[0, 1, 1])
    assert {router("jsq", 3).route(make_request(), view) for _ in range(50)} == {0, 1, 2}


def test_least_tokens_tracks_dispatch_and_finish():
    policy, view = router("least-tokens", 2), make_view(waiting=[0, 0])
    policy.on_dispatch(make_request(1, 1000, expected_output=100), 0, view)
    policy.on_dispatch(make_request(2, 300, expected_output=50), 1, view)
    assert policy.scores(make_request(), view).tolist() == [1100, 350]
    assert policy.route(make_request(), view) == 1
    policy.on_finish(1, 0)
    assert policy.route(make_request(), view) == 0


# --- LMetric -----------------------------------------------------------------------------

def test_lmetric_and_jsq_disagree():
    # Instance 0: busier (jsq 2 vs 1) but caches 900 of 1000 prompt tokens.
    view = make_view(running=[2, 1], in_flight=[2, 1], queued_prefill_tokens=[0, 0], hits=[900, 0])
    # P = [0 + 100, 0 + 1000], BS + 1 = [3, 2] -> [300, 2000].
    lm = router("lmetric", 2)
    assert lm.scores(make_request(input_tokens=1000), view).tolist() == [300.0, 2000.0]
    assert lm.route(make_request(input_tokens=1000), view) == 0
    assert router("jsq", 2).route(make_request(input_tokens=1000), view) == 1


def test_lmetric_backlog_and_ties():
    # P = [500 + 1000, 0 + 1000] * [1, 4] -> [1500, 4000]; queued prefill counts.
    view = make_view(in_flight=[0, 3], queued_prefill_tokens=[500, 0])
    assert router("lmetric", 2).route(make_request(), view) == 0
    assert router("lmetric", 3).route(make_request(), make_view(in_flight=[1, 1, 1])) == 0  # lowest index


class PrefixCache:
    """Which instances hold which prefix group; hit = whole prompt where cached."""

    def __init__(self, cached: dict[int, set[int]], n: int):
        self.cached, self.n = cached, n

    def hits(self, request: RequestInfo) -> np.ndarray:
        where = self.cached.get(request.prefix_group, set())
        return np.array([request.input_tokens if i in where else 0 for i in range(self.n)])

    def run(self, policy, groups: list[int], dt: float = 1.0) -> list[int]:
        """Route one request per group in order, caching its group where it lands."""
        picks = []
        for k, g in enumerate(groups):
            view = make_view(hits=self.hits, now=k * dt, in_flight=np.zeros(self.n, dtype=np.int64))
            r = make_request(rid=k, prefix_group=g)
            i = policy.route(r, view)
            self.cached.setdefault(g, set()).add(i)
            picks.append(i)
        return picks


def hot_stream(n: int = 200) -> list[int]:
    """90% of requests in group 7, the rest in groups seen once."""
    rng = np.random.default_rng(3)
    return [7 if rng.random() < 0.9 else 100 + k for k in range(n)]


def test_hotspot_detector_flags_hot_class_and_spreads_it():
    policy, cache = router("lmetric", 4), PrefixCache({7: {0}}, 4)
    picks = cache.run(policy, hot_stream())
    assert len(policy.hotspot_log) == 1 and policy.hotspot_log[0][1] == ("group", 7)
    # Flagged once the window holds 20 arrivals; x ~ 0.9 > |M|/I, so the class is moved
    # off its caching instances until every instance caches it (|M| = I clears it).
    assert policy.hotspot_log[0][0] == 20.0
    assert cache.cached[7] == {0, 1, 2, 3}
    assert set(picks[20:24]) >= {1}


def test_no_detector_keeps_hot_class_on_one_instance():
    policy, cache = router("lmetric-no-detector", 4), PrefixCache({7: {0}}, 4)
    cache.run(policy, hot_stream())
    assert policy.hotspot_log == [] and cache.cached[7] == {0}


def test_hotspot_detector_ignores_balanced_mix():
    # Four classes in turn, each cached on its own instance: x = 1/4 = |M|/I, not above.
    policy, cache = router("lmetric", 4), PrefixCache({g: {g} for g in range(4)}, 4)
    picks = cache.run(policy, [k % 4 for k in range(200)])
    assert policy.hotspot_log == []
    assert picks == [k % 4 for k in range(200)]


# --- llm-d -------------------------------------------------------------------------------

def test_llm_d_weighted_scorers_hand_case():
    policy = router("llm-d", 3)
    view = make_view(waiting=[0, 2, 4], kv_util=[0.2, 0.5, 0.9])
    # 4 blocks of 64 tokens; A is sent to instance 1, B (shares 2 leading blocks) to 2.
    policy.on_dispatch(make_request(1, 256, hash_ids=[1, 2, 3, 4]), 1, view)
    policy.on_dispatch(make_request(2, 256, hash_ids=[1, 2, 9, 10]), 2, view)
    q = make_request(3, 256, hash_ids=[1, 2, 3, 4])
    # queue [1, .5, 0], kv [.8, .5, .1], prefix [0, 1, .5]
    assert policy.scorer_values(q, view) == pytest.approx(np.array([[1, .5, 0], [.8, .5, .1], [0, 1, .5]]))
    # total = 2*queue + 2*kv + 3*prefix = [3.6, 5.0, 1.7]
    assert policy.scores(q, view) == pytest.approx([3.6, 5.0, 1.7])
    assert policy.route(q, view) == 1


def test_llm_d_equal_queues_score_one_and_lru_eviction():
    policy = router("llm-d:lru_blocks=4", 2)
    view = make_view(waiting=[3, 3])
    q = make_request(1, 256, hash_ids=[1, 2, 3, 4])
    policy.on_dispatch(q, 0, view)
    assert policy.scorer_values(q, view)[0].tolist() == [1.0, 1.0]
    assert policy.scorer_values(q, view)[2].tolist() == [1.0, 0.0]
    policy.on_dispatch(make_request(2, 256, hash_ids=[5, 6, 7, 8]), 0, view)  # evicts q's blocks
    assert policy.scorer_values(q, view)[2].tolist() == [0.0, 0.0]


def test_llm_d_lru_keeps_leading_blocks():
    # A 6-block request in a 4-block LRU keeps its first 4 blocks (touched most recently).
    policy = router("llm-d:lru_blocks=4", 1)
    view = make_view(waiting=[0])
    policy.on_dispatch(make_request(1, 384, hash_ids=[1, 2, 3, 4, 5, 6]), 0, view)
    assert policy.scorer_values(make_request(2, 256, hash_ids=[1, 2, 3, 4]), view)[2, 0] == 1.0


def test_llm_d_predicted_latency_hand_case():
    # Tokens to prefill: [3000 + 0, 0 + 1000]; chunk = 2048 - running.
    # inst 0: step(2048) + step(952) = 21480 + 10520 = 32000 us.
    # inst 1: 10 decodes, context 0.5*100*16 = 800: 1000 + 10000 + 1000 + 8 = 12008 us.
    view = make_view(running=[0, 10], queued_prefill_tokens=[3000, 0], kv_util=[0.0, 0.5],
                     kv_blocks=[100, 100], hits=[1000, 0])
    policy = router("llm-d-predicted-latency", 2)
    assert policy.scores(make_request(input_tokens=1000), view) == pytest.approx([0.032, 0.012008])
    assert policy.route(make_request(input_tokens=1000), view) == 1


# --- Bailian, Dynamo ---------------------------------------------------------------------

def test_bailian_seed_variant():
    # 1 - hit = [.2, 1, .6]; norm(in_flight) = [1, 0, .5]; 0.6*a + 0.4*b = [.52, .6, .56].
    view = make_view(in_flight=[10, 0, 5], hits=[800, 0, 400])
    policy = router("bailian", 3)
    assert policy.scores(make_request(input_tokens=1000), view) == pytest.approx([0.52, 0.6, 0.56])
    assert policy.route(make_request(input_tokens=1000), view) == 0
    assert router("bailian:lam=0.1", 3).route(make_request(input_tokens=1000), view) == 1


def test_bailian_sampling_weights():
    policy = router("bailian-sampling", 2)
    view = make_view(in_flight=[0, 2], hits=[0, 500])
    policy.on_dispatch(make_request(1, 900, expected_output=100), 1, view)
    # hit norm [0, 1]; free batch [1, 0]; free tokens [1, 0] -> w = [2/3, 1/3].
    assert policy.scores(make_request(input_tokens=1000), view) == pytest.approx([2 / 3, 1 / 3])
    picks = [policy.route(make_request(input_tokens=1000), view) for _ in range(3000)]
    assert np.mean(np.array(picks) == 0) == pytest.approx(2 / 3, abs=0.03)


def test_dynamo_cost():
    # block 16; inst 0: prefill (160 + 320 - 160)/16 = 20, decode 0.5*100 + (20 - 10) = 60 -> 80.
    #           inst 1: prefill 320/16 = 20, decode 0.25*100 + 20 = 45 -> 65.
    view = make_view(queued_prefill_tokens=[160, 0], kv_util=[0.5, 0.25], kv_blocks=[100, 100], hits=[160, 0])
    policy = router("dynamo", 2)
    assert policy.scores(make_request(input_tokens=320), view) == pytest.approx([80.0, 65.0])
    assert policy.route(make_request(input_tokens=320), view) == 1
    # Prefill weight 2: [2*20 + 60, 2*20 + 45].
    assert router("dynamo:prefill_weight=2.0", 2).scores(make_request(input_tokens=320), view) == \
        pytest.approx([100.0, 85.0])


def test_dynamo_softmax_temperature():
    # Normalized costs [1, 0], T = 1: p(1) = 1 / (1 + e^-1) = 0.731.
    view = make_view(queued_prefill_tokens=[160, 0], kv_util=[0.5, 0.25], kv_blocks=[100, 100], hits=[160, 0])
    policy = router("dynamo:temperature=1.0", 2)
    picks = np.array([policy.route(make_request(input_tokens=320), view) for _ in range(4000)])
    assert np.mean(picks == 1) == pytest.approx(1 / (1 + np.exp(-1)), abs=0.025)


# --- AIBrix, SGLang ----------------------------------------------------------------------

def test_aibrix_imbalance_goes_least_loaded():
    # max - min = 10 > 8: ignore the prefix held by instance 0.
    view = make_view(in_flight=[20, 10, 11], hits=[1000, 0, 0])
    assert router("aibrix", 3).route(make_request(), view) == 1


def test_aibrix_load_filter_then_prefix_then_load():
    # mean 3, std sqrt(3.5) = 1.87 -> keep load <= 4.87: instance 0 (load 5) filtered out
    # although it caches everything; instances 1 and 2 tie on share 0.5 -> lower load (1).
    view = make_view(in_flight=[5, 3, 4, 0], hits=[1000, 500, 500, 0])
    assert router("aibrix", 4).route(make_request(input_tokens=1000), view) == 1
    # No kept instance matches -> least request.
    view = make_view(in_flight=[5, 3, 4, 0], hits=[1000, 0, 0, 0])
    assert router("aibrix", 4).route(make_request(input_tokens=1000), view) == 3


def test_sglang_imbalance_rule():
    policy = router("sglang-cache-aware", 2)
    # 100 - 30 > 64 and 100 > 1.5 * 30: least loaded despite the cache on 0.
    assert policy.route(make_request(), make_view(in_flight=[100, 30], hits=[1000, 0])) == 1
    # 300 - 210 > 64 but 300 < 1.5 * 210: balanced -> deepest match (rate 0.4 > 0.3).
    assert policy.route(make_request(), make_view(in_flight=[300, 210], hits=[0, 400])) == 1
    # Match rate 0.2 <= 0.3 -> smallest router-side tree.
    view = make_view(in_flight=[0, 0], hits=[200, 0])
    policy.on_dispatch(make_request(1, 640, hash_ids=list(range(10))), 0, view)
    assert policy.tree_sizes().tolist() == [10, 0]
    assert policy.route(make_request(), view) == 1


# --- simulation-based --------------------------------------------------------------------

def test_preble_exploit_explore_rebalance():
    policy = router("preble", 4)
    # Exploit: best hit 0.9 > 0.5 on instances 1 and 2; cost decode term in_flight*100*0.15.
    view = make_view(in_flight=[0, 3, 1, 0], hits=[0, 900, 900, 0])
    assert policy.route(make_request(input_tokens=1000), view) == 2
    # Explore: no hit above 0.5; instance 3 idle and uncached beats the loaded ones.
    view = make_view(in_flight=[2, 3, 1, 0], hits=[400, 0, 0, 0])
    assert policy.route(make_request(input_tokens=1000), view) == 3
    # Rebalance: 15 >= 15 * max(1, 1).
    assert policy.route(make_request(), make_view(in_flight=[15, 1, 3], hits=[1000, 0, 0])) == 1


def test_preble_tpot_estimate_starts_at_initial_then_median():
    policy = router("preble", 2)
    assert policy.tpot_estimate() == 0.15
    view = make_view(in_flight=[0, 0])
    policy.route(make_request(input_tokens=1000), view)
    # Decode step of 1 request over 1000 tokens: 1000 + 100 + 10 = 1110 us.
    assert policy.tpot_estimate() == pytest.approx(0.00111)


def test_polyserve_packs_under_slo():
    # TPOT = 1000 + 100*(in_flight + 1) + 0.01*1000 us = [1.11, 1.61, 6.11] ms.
    view = make_view(in_flight=[0, 5, 50])
    assert router("polyserve", 3).route(make_request(), view) == 2
    assert router("polyserve:tpot_slo_s=0.005", 3).route(make_request(), view) == 1
    picks = {router("polyserve:ttft_slo_s=0.000001", 3).route(make_request(), view) for _ in range(50)}
    assert picks == {0, 1, 2}


@pytest.mark.parametrize("spec", ["preble:tpot_window=3", "preble:exploit_threshold=0.2,rebalance_ratio=2",
                                  "polyserve:ttft_slo_s=0.2,tpot_slo_s=0.03", "llm-d-predicted-latency",
                                  "dynamo:temperature=0.3"])
def test_compiled_router_decides_as_its_python_form(spec):
    """The kernel's form of a router and the router asked in Python (a subclass, which
    does not inherit ``compiled_form``) give the same run, bit for bit."""
    import llmsched_gym as g
    from llmsched_gym.gateway.policy import make_policy

    sc = g.make_scenario("chatbot", load=0.6, duration_s=20)
    w = sc.build_workload(1)

    def run(router):
        sim = sc.simulator(1, router=router, workload=w).run()
        return sim, (sim.table.instance, sim.table.first_token_t, sim.table.finish_t)

    compiled_sim, compiled = run(make_policy(spec))
    policy = make_policy(spec)
    policy.__class__ = type("PythonForm", (type(policy),), {})
    python_sim, python = run(policy)
    assert not compiled_sim._python_router and python_sim._python_router
    for a, b in zip(compiled, python):
        np.testing.assert_array_equal(a, b)
    if spec.startswith("preble"):  # the kernel's ring holds the Python deque's TPOT predictions
        from llmsched_gym.engine.layout import CI_WIN_LEN

        st, c = compiled_sim.state, compiled_sim.c
        held = min(int(st.clu_i[CI_WIN_LEN, c]), policy.tpot_window)
        r0 = int(st.req_off[c])
        assert held == len(policy._tpots) > 0
        np.testing.assert_array_equal(np.sort(st.win_t[r0:r0 + held]), np.sort(np.array(policy._tpots)))
