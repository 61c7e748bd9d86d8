"""Imitation of the lookahead planner (``baselines/lookahead.py``) into the Routing scorer:
the batched labeller (:mod:`.labeller`), rollouts that record its labels (:mod:`.collect`),
behaviour cloning (:mod:`.fit`) and the ``train --algo bc|dagger`` pipeline (:mod:`.run`)."""
