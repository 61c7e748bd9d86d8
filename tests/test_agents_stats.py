"""RL-evaluation statistics (IQM, stratified bootstrap, probability of improvement)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")

from llmsched_gym.evaluation.stats import iqm, probability_of_improvement, stratified_bootstrap  # noqa: E402


def _iqm_by_hand(x):
    x = np.sort(np.asarray(x, float).ravel())
    k = len(x) // 4
    return x[k:len(x) - k].mean()


def test_iqm_is_the_middle_half_mean():
    rng = np.random.default_rng(0)
    for n in (1, 3, 4, 5, 8, 25, 101):
        x = rng.lognormal(size=n)
        assert iqm(x) == pytest.approx(_iqm_by_hand(x), rel=1e-12)
    assert iqm([1, 2, 3, 100]) == 2.5  # the outlier is cut
    np.testing.assert_allclose(iqm(np.arange(20.0).reshape(2, 10), axis=1), [4.5, 14.5])


def test_stratified_bootstrap_interval():
    rng = np.random.default_rng(1)
    scores = rng.normal(10.0, 1.0, size=(5, 5))
    v, lo, hi = stratified_bootstrap(scores)
    assert v == pytest.approx(_iqm_by_hand(scores))
    assert lo < v < hi and hi - lo < 3.0
    assert stratified_bootstrap(scores) == (v, lo, hi)  # deterministic
    assert stratified_bootstrap(scores, seed=1) != (v, lo, hi)
    # one run (a deterministic baseline): the interval is over evaluation seeds only
    b = np.array([1.0, 2.0, 3.0, 4.0])
    v1, lo1, hi1 = stratified_bootstrap(b)
    assert v1 == pytest.approx(2.5) and 1.0 <= lo1 < v1 < hi1 <= 4.0
    # a constant matrix has a zero-width interval
    assert stratified_bootstrap(np.full((3, 4), 7.0)) == (7.0, 7.0, 7.0)
    # the seeds are the strata: one bad seed for every run widens the interval, one bad
    # run also does (both are resampled)
    s2 = np.ones((5, 5))
    s2[:, 0] = 100.0
    assert stratified_bootstrap(s2, np.mean)[2] > 1.0
    with pytest.raises(ValueError):
        stratified_bootstrap(np.zeros((2, 2, 2)))


def test_probability_of_improvement_matches_the_pairwise_count():
    rng = np.random.default_rng(2)
    agent = rng.normal(0.0, 1.0, size=(5, 4))
    base = rng.normal(0.3, 1.0, size=(3, 4))
    by_hand = np.mean([np.mean((agent[:, s][:, None] < base[:, s][None, :])
                               + 0.5 * (agent[:, s][:, None] == base[:, s][None, :])) for s in range(4)])
    p, lo, hi = probability_of_improvement(agent, base)
    assert p == pytest.approx(by_hand, rel=1e-12)
    assert 0.0 <= lo <= p <= hi <= 1.0
    assert probability_of_improvement(agent, base, lower_is_better=False)[0] == pytest.approx(1 - by_hand)
    # a deterministic baseline (one value per seed), with ties counting 1/2
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert probability_of_improvement([[1.0, 2.0], [3.0, 2.0]], [2.0, 2.0])[0] == pytest.approx(0.5)
        assert probability_of_improvement(np.zeros((3, 2)), [1.0, 1.0]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        probability_of_improvement(np.zeros((3, 2)), [1.0, 1.0, 1.0])
