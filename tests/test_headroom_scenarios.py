"""The built-in scenarios where heuristics are expected to fall short (docs/scenarios.md):
``mixed-chatbot`` (a mixed fleet) and ``flash-codegen`` (flash crowds on a diurnal base)."""

from __future__ import annotations

import numpy as np
import pytest

import llmsched_gym as g

COMPILED_ROUTERS = ["lmetric", "lmetric-no-detector", "llm-d", "jsq", "least-tokens", "bailian", "aibrix", "dynamo",
                    "sglang-cache-aware", "preble", "polyserve", "llm-d-predicted-latency", "round-robin"]


def test_mixed_chatbot_pools_differ_in_step_time_and_kv():
    sc = g.make_scenario("mixed-chatbot", duration_s=2.0)
    sim = sc.simulator(0)
    g0 = int(sim.state.clusters.inst0[sim.c])
    total = sim.state.instances.total[g0:g0 + 16]
    pools = (slice(0, 8), slice(8, 12), slice(12, 16))  # 8 x H20, 4 x A100 TP2, 4 x L40S TP2
    assert [len(set(total[p])) for p in pools] == [1, 1, 1]
    assert len({int(total[p][0]) for p in pools}) == 3  # three KV capacities
    lat = sim.state.lat_p[g0:g0 + 16]
    assert len({lat[p][0].tobytes() for p in pools}) == 3  # three step-time models


@pytest.mark.parametrize("router", COMPILED_ROUTERS)
def test_every_compiled_router_runs_on_the_mixed_fleet(router):
    sc = g.make_scenario("mixed-chatbot", duration_s=3.0)
    sim = sc.simulator(1, router=router).run()
    counts = sim.table.counts()
    assert sum(counts.values()) == len(sim.workload) and counts["finished"] > 100
    assert len(np.unique(sim.table.instance[sim.table.instance >= 0])) > 1


def test_flash_codegen_bursts_on_a_diurnal_base():
    """Arrivals follow 8 req/s x (1 - 0.5 cos(2 pi t / 600)), times 6 over 150-180 s and 8 over
    420-440 s (hand-computed levels of the curve, within Poisson noise)."""
    w = g.make_scenario("flash-codegen").build_workload(0)
    rate = lambda a, b: np.count_nonzero((w.arrival_s >= a) & (w.arrival_s < b)) / (b - a)  # noqa: E731
    level = lambda t: 8.0 * (1 - 0.5 * np.cos(2 * np.pi * t / 600.0))  # noqa: E731
    assert rate(0, 20) == pytest.approx(level(10), rel=0.3)  # ~4 req/s at the trough
    assert rate(280, 320) == pytest.approx(level(300), rel=0.15)  # ~12 req/s at the peak
    assert rate(152, 178) == pytest.approx(6 * level(165), rel=0.1)  # ~52 req/s
    assert rate(422, 438) == pytest.approx(8 * level(430), rel=0.1)  # ~71 req/s
