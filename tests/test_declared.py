"""The declared seeds: training and evaluation never overlap, and the learners read them."""

from agents.declared import evaluation_seeds, training_seeds


def test_training_and_evaluation_seeds_are_disjoint_and_as_declared():
    train, evaluation = training_seeds(), evaluation_seeds()
    assert (train.start, train.stop) == (0, 100) and evaluation == list(range(200, 210))
    assert not set(train) & set(evaluation)
    assert not set(train) & {100, 101, 102}  # the headroom table's seeds are never trained on
