"""Admission, flow-control and registry baselines against hand-computed values (docs/architecture.md)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import list_policies, make_policy
from llmsched_gym.gateway.view import RequestInfo

SHEDDABLE, CRITICAL = -1, 0


def request(priority: int) -> RequestInfo:
    return RequestInfo(id=0, arrival_s=0.0, input_tokens=100, output_tokens=10, expected_output_tokens=10.0,
                       priority=priority, hash_ids=np.zeros(0, dtype=np.int64), hash_block_tokens=0)


def admission_view(saturation: float, seed: int = 0) -> SimpleNamespace:
    """Admission policies read the saturation (or the scraped arrays behind it) and the
    generator; one instance whose queue alone gives ``saturation`` (5 waiting = 1)."""
    return SimpleNamespace(saturation=saturation, rng=np.random.default_rng(seed),
                           waiting=np.array([5.0 * saturation]), kv_util=np.zeros(1))


# --- admission ---------------------------------------------------------------------------

def test_always_admit_admits_sheddable_at_overload():
    assert make_policy("always-admit").admit(request(SHEDDABLE), admission_view(5.0))


@pytest.mark.parametrize("s, admitted", [(0.0, True), (0.99, True), (1.0, False), (2.5, False)])
def test_legacy_rejects_sheddable_iff_saturated(s, admitted):
    policy = make_policy("legacy")
    assert policy.admit(request(SHEDDABLE), admission_view(s)) is admitted
    assert policy.admit(request(CRITICAL), admission_view(s))


def test_probabilistic_rejection_probability_formula():
    policy = make_policy("probabilistic")
    assert policy.reject_probability(0.2) == pytest.approx(300 * 0.2**5) == pytest.approx(0.096)
    assert policy.reject_probability(0.0) == 0.0
    full = 300 ** (-1 / 5)
    assert full == pytest.approx(0.3196, abs=1e-4)
    assert policy.reject_probability(full) == pytest.approx(1.0)
    assert policy.reject_probability(0.99 * full) < 1.0
    assert policy.reject_probability(3.0) == 1.0


def test_probabilistic_empirical_rate_at_0_2():
    policy = make_policy("probabilistic")
    view = admission_view(0.2, seed=7)
    n = 40_000
    rejected = sum(not policy.admit(request(SHEDDABLE), view) for _ in range(n))
    assert rejected / n == pytest.approx(0.096, abs=0.005)  # ~3.4 standard errors


def test_probabilistic_full_shedding_and_critical_always_admitted():
    policy = make_policy("probabilistic")
    view = admission_view(300 ** (-1 / 5) + 1e-9)
    assert not any(policy.admit(request(SHEDDABLE), view) for _ in range(1000))
    assert all(policy.admit(request(CRITICAL), admission_view(10.0)) for _ in range(100))


def test_probabilistic_keywords():
    # llm-d-router's probabilistic-admitter parameter names
    policy = make_policy("probabilistic:k=1,power=1")
    assert policy.reject_probability(0.25) == pytest.approx(0.25)
    for bad in ("k=0", "power=0", "queueDepthThreshold=0", "kvCacheUtilThreshold=-1"):
        with pytest.raises(ConfigError, match=bad.partition("=")[0]):
            make_policy(f"probabilistic:{bad}")


# --- flow control ------------------------------------------------------------------------

def blocked_fraction(s: float, cycles: int = 18) -> float:
    """Share of dispatch cycles on which the sheddable band (2 bands) is blocked."""
    policy = make_policy("soft-reflective-ceiling")
    policy.reset(1, np.random.default_rng(0))
    return sum(s >= policy.ceilings(s, 2)[1] for _ in range(cycles)) / cycles


@pytest.mark.parametrize("s, percent", [(0.3, 0), (0.5, 0), (0.6, 50), (0.75, 67), (0.9, 89), (1.0, 100)])
def test_soft_reflective_published_table(s, percent):
    # 18 cycles is a multiple of every period involved (1, 2, 3, 9).
    assert round(100 * blocked_fraction(s)) == percent


@pytest.mark.parametrize("spec, s, percent", [
    ("soft-reflective-ceiling:ramp=2", 0.45, 0),                 # gated from s = 1/3, period round(0.82) = 1
    ("soft-reflective-ceiling:ramp=2,period_scale=2", 0.45, 50),  # gated, period round(2 x 0.82) = 2
    ("soft-reflective-ceiling:period_scale=2", 0.45, 0),         # ramp 1: not gated below 0.5
    ("soft-reflective-ceiling:period_scale=2", 0.6, 67),         # period round(2 x 1.5) = 3
    ("soft-reflective-ceiling:period_scale=0.25", 0.9, 50),      # period round(0.25 x 9) = 2
    ("soft-reflective-ceiling:ramp=0", 0.9, 0),                  # never gated below saturation 1
    ("soft-reflective-ceiling:ramp=0", 1.0, 100),
])
def test_soft_reflective_ramp_and_period_scale(spec, s, percent):
    """Hand-computed blocking of the sheddable band (2 bands) with the parameters the
    FlowControl env's action="soft-reflective" sets: gated when s >= 1 - ramp s, open one
    cycle in max(1, round(period_scale s/(1-s))) from s = 1/(1 + ramp)."""
    policy = make_policy(spec)
    policy.reset(1, np.random.default_rng(0))
    cycles = 36
    assert round(100 * sum(s >= policy.ceilings(s, 2)[1] for _ in range(cycles)) / cycles) == percent


def test_soft_reflective_critical_band_always_open():
    policy = make_policy("soft-reflective-ceiling")
    for s in (0.3, 0.6, 0.9, 1.0, 1.7):
        assert policy.ceilings(s, 2)[0] == 1.0


def test_soft_reflective_three_bands():
    policy = make_policy("soft-reflective-ceiling")
    policy.reset(1, np.random.default_rng(0))
    # s = 0.4: r = [0.8, 0.6], both above s -> all open.
    assert policy.ceilings(0.4, 3).tolist() == [1.0, 1.0, 1.0]
    # s = 0.6: r = [0.7, 0.4] -> band 1 open, band 2 gated with period round(1.5) = 2.
    assert [policy.ceilings(0.6, 3).tolist() for _ in range(4)] == [[1, 1, 0], [1, 1, 1]] * 2
    policy.reset(1, np.random.default_rng(0))
    # s = 0.8: r = [0.6, 0.2] -> both gated, period 4: open on ticks 4, 8, ...
    assert [policy.ceilings(0.8, 3).tolist() for _ in range(4)] == [[1, 0, 0]] * 3 + [[1, 1, 1]]
    # s >= 1: both gated bands closed.
    assert policy.ceilings(1.2, 3).tolist() == [1.0, 0.0, 0.0]


def test_soft_reflective_single_band_and_tick_shared_by_bands():
    policy = make_policy("soft-reflective-ceiling")
    assert policy.ceilings(0.9, 1).tolist() == [1.0]
    assert policy.ceilings(1.5, 1).tolist() == [1.0]
    policy.reset(1, np.random.default_rng(0))
    for _ in range(30):
        c = policy.ceilings(0.85, 5)  # r = [0.79, 0.58, 0.36, 0.15]: all gated
        assert len(set(c[1:].tolist())) == 1


@pytest.mark.parametrize("bands", [2, 3, 4, 7])
def test_usage_limits_non_increasing(bands):
    policies = [make_policy(n) for n in ("soft-reflective-ceiling", "priority-holdback", "static-usage-limit")]
    for s in np.linspace(0.0, 1.5, 61):
        for policy in policies:
            c = policy.ceilings(float(s), bands)
            assert len(c) == bands and np.all(np.diff(c) <= 0)


def test_soft_reflective_stationary():
    policy = make_policy("soft-reflective-ceiling")
    assert policy.stationary(0.3) and policy.stationary(0.55) and policy.stationary(1.0)
    assert not policy.stationary(0.6) and not policy.stationary(0.9)


def test_priority_holdback_rank_domain():
    policy = make_policy("priority-holdback:cmax=1.0,cmin=0.4")
    assert policy.ceilings(0.7, 4) == pytest.approx([1.0, 0.8, 0.6, 0.4])
    assert policy.ceilings(0.7, 1).tolist() == [1.0]
    with pytest.raises(ConfigError):
        make_policy("priority-holdback:cmax=0.3,cmin=0.5")


def test_static_usage_limit_with_parameter():
    policy = make_policy("static-usage-limit:threshold=0.8", role="usage-limit")
    assert policy.threshold == 0.8
    assert policy.ceilings(0.5, 3).tolist() == [0.8, 0.8, 0.8]
    assert make_policy("static-usage-limit").ceilings(0.5, 2).tolist() == [1.0, 1.0]


# --- registry ----------------------------------------------------------------------------

EXPECTED = {
    "admission": {"always-admit", "legacy", "probabilistic"},
    "usage-limit": {"static-usage-limit", "priority-holdback", "soft-reflective-ceiling"},
    "routing": {"random", "round-robin", "jsq", "vllm-dp", "least-tokens", "llm-d", "llm-d-predicted-latency",
                "bailian", "bailian-sampling", "dynamo", "aibrix", "sglang-cache-aware", "lmetric",
                "lmetric-no-detector", "preble", "polyserve"},
    "scaling": {"fixed", "hpa-kv", "hpa-queue", "queue-aware"},
    "pd": {"pd-aggregated", "pd-always", "pd-llmd", "pd-dynamo"},
}


@pytest.mark.parametrize("role", sorted(EXPECTED))
def test_all_baselines_registered_with_description(role):
    registered = list_policies(role)
    assert EXPECTED[role] <= set(registered)
    for name in EXPECTED[role]:
        policy = make_policy(name, role=role)
        assert policy.name == name and policy.description


def test_unknown_policy_lists_known_names():
    with pytest.raises(ConfigError) as err:
        make_policy("no-such-policy", role="routing")
    message = str(err.value)
    assert "no-such-policy" in message and "lmetric" in message and "jsq" in message


def test_bad_keyword_and_wrong_role():
    with pytest.raises(ConfigError, match="unknown parameter 'alpha'; jsq takes no parameters"):
        make_policy("jsq:alpha=1")
    with pytest.raises(ConfigError, match="expected 'routing'"):
        make_policy("legacy", role="routing")
