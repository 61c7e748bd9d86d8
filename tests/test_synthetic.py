"""Synthetic workloads match their spec: rates, CVs, lengths, shares, prefix structure."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from llmsched_gym.errors import ConfigError
from llmsched_gym.workloads.synthetic import (
    ArrivalSpec,
    ClassSpec,
    LengthSpec,
    PrefixSpec,
    WorkloadSpec,
    expected_input_tokens,
    expected_prefix_hit_ratio,
    generate,
)

N = 10_000


def _cv(w) -> float:
    gaps = np.diff(w.arrival_s)
    return float(gaps.std() / gaps.mean())


@pytest.mark.parametrize(
    "process, cv", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 2.0), ("weibull", 0.5), ("weibull", 2.0)]
)
def test_arrival_rate_and_cv(process, cv):
    w = generate(WorkloadSpec(arrival=ArrivalSpec(process, rate=8.0, cv=cv), num_requests=N), seed=3)
    assert len(w) == N
    assert w.mean_rate == pytest.approx(8.0, rel=0.05)
    assert _cv(w) == pytest.approx(cv, rel=0.06)


@pytest.mark.parametrize(
    "curve, period",
    [
        ({"kind": "burst", "start_s": 300, "duration_s": 100, "multiplier": 5, "ramp_s": 30}, None),
        ({"kind": "diurnal", "period_s": 400, "amplitude": 0.8}, None),
        ({"kind": "ramp", "start_s": 200, "end_s": 800, "end_multiplier": 3}, None),
        ([[0, 1], [100, 1], [100, 4], [200, 4], [200, 0.5], [300, 0.5]], 300.0),
    ],
)
def test_rate_curve_mean_rate(curve, period):
    spec = WorkloadSpec(
        arrival=ArrivalSpec("gamma", rate=10.0, cv=1.5, rate_curve=curve, curve_period_s=period),
        duration_s=1200,
    )
    w = generate(spec, seed=0)
    expected = float(spec.arrival.curve().integral(1200.0))  # rate x curve integral
    assert len(w) == pytest.approx(expected, rel=0.05)
    assert w.arrival_s.min() >= 0 and w.arrival_s.max() < 1200


def test_burst_is_where_the_curve_says():
    spec = WorkloadSpec(
        arrival=ArrivalSpec(
            rate=10.0, rate_curve={"kind": "burst", "start_s": 400, "duration_s": 200, "multiplier": 4}
        ),
        duration_s=1000,
    )
    counts, _ = np.histogram(generate(spec, 1).arrival_s, bins=5, range=(0, 1000))
    np.testing.assert_allclose(counts, [2000, 2000, 8000, 2000, 2000], rtol=0.08)


@pytest.mark.parametrize(
    "length, mean",
    [
        (LengthSpec("fixed", 300), 300),
        (LengthSpec("gaussian", 500, 250, min=2, max=1375), None),
        (LengthSpec("lognormal", 1200, 1500), 1200),
        (LengthSpec("empirical", values=[10, 100, 1000], weights=[1, 2, 1]), 302.5),
    ],
)
def test_token_lengths(length, mean):
    spec = WorkloadSpec(input=length, output=LengthSpec("lognormal", 200, 150, max=4000), num_requests=N)
    w = generate(spec, seed=5)
    want = length.mean_value()
    if mean is not None:
        assert want == pytest.approx(mean, rel=1e-3)
    assert w.input_tokens.mean() == pytest.approx(want, rel=0.03)
    assert w.output_tokens.mean() == pytest.approx(spec.output.mean_value(), rel=0.03)
    assert w.input_tokens.min() >= length.min
    assert expected_input_tokens(spec) == pytest.approx(want)


def test_class_shares_and_slos():
    classes = [ClassSpec("critical", 0, 0.3, 0.5, 0.05), ClassSpec("sheddable", -1, 0.7, 5.0)]
    w = generate(WorkloadSpec(classes=classes, num_requests=N), seed=2)
    assert (w.priority == 0).mean() == pytest.approx(0.3, abs=0.02)
    assert (w.priority == -1).mean() == pytest.approx(0.7, abs=0.02)
    assert w.slo_ttft_s == {0: 0.5, -1: 5.0} and w.slo_tpot_s == {0: 0.05}


def _groups_spec(zipf_s: float) -> WorkloadSpec:
    return WorkloadSpec(
        arrival=ArrivalSpec(rate=10.0),
        input=LengthSpec("lognormal", 400, 300),
        prefix=PrefixSpec(
            system_prompt_groups=300,
            system_prompt_tokens=LengthSpec("fixed", 900),
            zipf_s=zipf_s,
            system_prompt_share=0.8,
        ),
        num_requests=N,
    )


@pytest.mark.parametrize("zipf_s", [0.0, 1.0, 1.5])
def test_system_prompt_hit_ratio_matches_analytic(zipf_s):
    spec = _groups_spec(zipf_s)
    ratios = [generate(spec, seed).ideal_prefix_hit_ratio() for seed in range(4)]
    assert np.mean(ratios) == pytest.approx(expected_prefix_hit_ratio(spec), abs=0.004)


def _session_spec() -> WorkloadSpec:
    return WorkloadSpec(
        arrival=ArrivalSpec(rate=40.0),
        input=LengthSpec("lognormal", 200, 150, max=3000),
        output=LengthSpec("gaussian", 150, 60),
        classes=[ClassSpec("critical", 0, 0.5), ClassSpec("sheddable", -1, 0.5)],
        prefix=PrefixSpec(
            block_tokens=32,
            system_prompt_groups=10,
            system_prompt_tokens=500,
            zipf_s=1.0,
            system_prompt_share=0.5,
            session_share=0.6,
            turns=LengthSpec("lognormal", 4, 2, min=2, max=12),
            think_time_s=2.0,
            decode_tokens_per_s=100.0,
        ),
        num_requests=N,
    )


def test_sessions_match_spec_and_analytic_hit_ratio():
    spec = _session_spec()
    w = generate(spec, seed=4)
    assert len(w) == N
    assert w.mean_rate == pytest.approx(40.0, rel=0.05)
    assert (w.session_id >= 0).mean() == pytest.approx(0.6, abs=0.03)
    assert w.ideal_prefix_hit_ratio() == pytest.approx(expected_prefix_hit_ratio(spec), abs=0.01)
    assert w.input_tokens.mean() == pytest.approx(expected_input_tokens(spec), rel=0.03)


def test_session_turns_extend_the_previous_chain():
    w = generate(_session_spec(), seed=1)
    G = w.hash_block_tokens
    for s in range(20):
        (idx,) = np.nonzero(w.session_id == s)
        assert len(np.unique(w.priority[idx])) == 1 and len(np.unique(w.prefix_group[idx])) == 1
        for a, b in zip(idx[:-1], idx[1:]):
            assert w.arrival_s[b] > w.arrival_s[a]
            assert w.input_tokens[b] > w.input_tokens[a] + w.output_tokens[a]
            full = w.input_tokens[a] // G
            np.testing.assert_array_equal(w.hashes(b)[:full], w.hashes(a)[:full])
            assert not set(w.hashes(b)[full:]) & set(w.hashes(a))


def test_hash_ids_equal_exactly_when_token_prefixes_equal():
    """Rebuild each prompt as symbolic tokens and compare with the chained ids."""
    spec = _session_spec()
    spec.num_requests = 1500
    spec.prefix.system_prompt_tokens = LengthSpec("gaussian", 100, 40, min=1)
    spec.prefix.block_tokens = 16
    w = generate(spec, seed=9)
    G = w.hash_block_tokens
    # System prompt length per group: the ids of its full blocks are shared by all members.
    sys_len = {}
    for g in np.unique(w.prefix_group[w.prefix_group >= 0]):
        (members,) = np.nonzero(w.prefix_group == g)
        chains = [w.hashes(r) for r in members]
        n = min(len(c) for c in chains)
        same = np.all([c[:n] == chains[0][:n] for c in chains], axis=0)
        sys_len[g] = int(np.argmin(np.append(same, False))) * G
    id_of = {}
    for r in range(len(w)):
        g, s, P = w.prefix_group[r], w.session_id[r], int(w.input_tokens[r])
        owner = ("s", s) if s >= 0 else ("r", r)
        for k, h in enumerate(w.hashes(r)):
            end = min(P, (k + 1) * G)
            key = ("g", g, k) if g >= 0 and end <= sys_len[g] and end == (k + 1) * G else (owner, k, end)
            assert id_of.setdefault(key, h) == h
    assert len(set(id_of.values())) == len(id_of)


def test_same_seed_same_arrays():
    spec = _session_spec()
    a, b, c = generate(spec, 11), generate(spec, 11), generate(spec, 12)
    for name in (
        "arrival_s",
        "input_tokens",
        "output_tokens",
        "priority",
        "hash_ids",
        "hash_offsets",
        "session_id",
    ):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_dict_round_trip_and_yaml():
    spec = _session_spec()
    spec.arrival.rate_curve = {"kind": "diurnal", "period_s": 3600, "amplitude": 0.3}
    d = yaml.safe_load(yaml.safe_dump(spec.to_dict()))
    again = WorkloadSpec.from_dict(d)
    assert again == spec
    np.testing.assert_array_equal(generate(d, 0).arrival_s, generate(spec, 0).arrival_s)
    short = WorkloadSpec.from_dict({"input": 100, "prefix": {"system_prompt_tokens": 64}, "duration_s": 10})
    assert short.input == LengthSpec("fixed", 100) and short.prefix.system_prompt_tokens.mean == 64


@pytest.mark.parametrize(
    "d, needle",
    [
        ({"arrival": {"rate": -1}}, "workload.arrival.rate=-1 is invalid; it must be > 0"),
        (
            {"arrival": {"process": "hawkes"}},
            "workload.arrival.process='hawkes' is invalid; allowed: poisson, gamma, weibull",
        ),
        ({"arrival": {"cv": 2}}, "workload.arrival.cv=2"),
        ({"arrival": {"process": "gamma", "cv": 50}}, "workload.arrival.cv=50"),
        ({"arrival": {"rate_curve": {"kind": "spike"}}}, "workload.arrival.rate_curve.kind='spike'"),
        ({"arrival": {"rate_curve": {"kind": "burst", "start_s": 1}}}, "needs duration_s, multiplier"),
        ({"arrival": {"rate_curve": [[5, 1]]}}, "workload.arrival.rate_curve[0][0]"),
        ({"arrival": {"rate_curve": [[0, 1], [10, 0]]}}, "must not stay 0"),
        ({"arrival": {"rat": 3}}, "workload.arrival: unknown key(s) 'rat'; known keys: process, rate, cv"),
        (
            {"input": {"dist": "zipf"}},
            "workload.input.dist='zipf' is invalid; allowed: fixed, gaussian, lognormal, empirical",
        ),
        ({"input": {"dist": "gaussian", "mean": 10, "std": -1}}, "workload.input.std=-1"),
        ({"output": {"dist": "fixed", "mean": 5, "min": 10, "max": 3}}, "workload.output.max=3"),
        ({"input": {"dist": "empirical", "values": []}}, "workload.input.values"),
        ({"input": {"dist": "empirical", "values": [1, 0]}}, "workload.input.values[1]=0"),
        (
            {
                "classes": [
                    {"name": "a", "priority": 0, "share": 0.5},
                    {"name": "b", "priority": -1, "share": 0.4},
                ]
            },
            "workload.classes[*].share",
        ),
        ({"classes": [{"name": "a", "share": 1.0, "slo": 1}]}, "workload.classes[0]: unknown key(s) 'slo'"),
        ({"prefix": {"session_share": 1.5}}, "workload.prefix.session_share=1.5"),
        ({"prefix": {"turns": {"dist": "fixed", "mean": 0}}}, "workload.prefix.turns.mean=0"),
        ({"prefix": {"block_tokens": 0}}, "workload.prefix.block_tokens=0"),
        ({"num_requests": 10, "duration_s": 5}, "exactly one of num_requests and duration_s"),
        ({"num_requests": -5}, "workload.num_requests=-5"),
        ({"horizon": 5}, "workload: unknown key(s) 'horizon'; known keys: arrival, input, output"),
    ],
)
def test_bad_specs_name_the_field(d, needle):
    d = {"num_requests": 100, **d} if "duration_s" not in d and "num_requests" not in d else d
    with pytest.raises(ConfigError) as e:
        generate(d)
    assert needle in str(e.value)


def test_direct_dataclass_specs_are_validated():
    with pytest.raises(ConfigError, match=r"workload\.arrival\.rate"):
        generate(WorkloadSpec(arrival=ArrivalSpec(rate=0), num_requests=10))
