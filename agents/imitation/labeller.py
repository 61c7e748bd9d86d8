"""The lookahead planner as a teacher: routing labels for every cluster of a native vector env.

At a step of ``llmsched/Routing-v0``'s native vector env every cluster waits for a routing
decision. :meth:`RoutingLabeller.label` forks each waiting cluster into one slot per
candidate instance (x sampled futures under ``mode=mpc``), all clusters' copies in one
``EngineState``, prices them in one batched call with the environment's own cost
(:func:`baselines.planning.routing_costs`, the planner's own code) and returns the cost
of every candidate and the planner's choice (:func:`baselines.planning.choose`, against
the base heuristic's own choice, which a Python copy of the base router, kept informed of
every dispatch and finish as the planner's is, gives).

The teacher is a ``lookahead`` spec (``baselines/lookahead.py``): ``lookahead:mode=mpc,
samples=2,horizon_s=1,base=preble``; ``mode=oracle`` sees each episode's true future.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from baselines.lookahead import LookaheadPlanner
from baselines.planning import CopyPool, FutureModel, Pending, choose, routing_costs
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import make_policy


def make_teacher(spec: str) -> LookaheadPlanner:
    """The planner a ``--teacher`` spec names; a clear error for anything that cannot label
    routing decisions."""
    if not isinstance(spec, str) or spec.split(":", 1)[0].strip() != "lookahead":
        raise ConfigError(f"--teacher {spec!r} is invalid; the teacher is the lookahead planner: "
                          "'lookahead:mode=mpc,samples=2,horizon_s=1,base=HEURISTIC' (or mode=oracle)")
    try:
        planner = make_policy(spec, "gateway")
    except ConfigError as e:
        raise ConfigError(f"--teacher {spec!r} is invalid: {e}") from None
    if planner.decision != "routing":
        raise ConfigError(f"--teacher {spec!r} plans decision={planner.decision}, but llmsched/Routing-v0's "
                          "action is a routing decision; use decision=routing (the default)")
    if planner.form.needs:
        raise ConfigError(f"--teacher {spec!r}: base={planner.base} keeps books in the engine state "
                          f"({', '.join(planner.form.needs)}) that Routing-v0's clusters (router='external') do not "
                          "build; choose a base without them (preble, llm-d-predicted-latency, lmetric-no-detector, "
                          "jsq, least-tokens, ...)")
    return planner


@dataclass
class Labels:
    """The teacher's answer for some clusters of a vector env.

    Args:
        clusters: the clusters labelled (vector env indices).
        costs: environment cost of each candidate in each sampled future, ``(n, samples, K)``.
        candidates: the instances priced per cluster, ``(n, K)``.
        own: the base heuristic's own choice per cluster (an instance).
        label: the planner's choice per cluster (an instance).
    """

    clusters: np.ndarray
    costs: np.ndarray
    candidates: np.ndarray
    own: np.ndarray
    label: np.ndarray


class RoutingLabeller:
    """The lookahead planner ``teacher`` labelling clusters of a Routing-v0 native vector env.

    Args:
        teacher: a ``lookahead:`` spec (:func:`make_teacher`).
        vec: the vector env (``gymnasium.make_vec("llmsched/Routing-v0", ...).unwrapped``),
            before its first ``reset``: each driver gets a Python copy of the base router
            as its observer (it hears every dispatch and finish; the env's steps then run
            cluster by cluster, on the same shared state).
    """

    def __init__(self, teacher: str, vec):
        if getattr(vec, "kind", None) != "routing":
            raise ConfigError("the imitation labeller needs llmsched/Routing-v0's native vector env")
        self.planner = make_teacher(teacher)
        self.vec = vec
        for d in vec.drivers:
            d.observer = make_policy(self.planner.base, "routing")
        vec.refresh_observers()
        self.pool = CopyPool()
        self._models: dict[int, tuple[object, FutureModel | None]] = {}
        self.labels, self.seconds = 0, 0.0

    def _model(self, i: int) -> FutureModel | None:
        """Cluster ``i``'s sampled futures for its current episode (``mode=mpc``), built once per episode."""
        if self.planner.mode != "mpc":
            return None
        d = self.vec.drivers[i]
        key, model = self._models.get(i, (None, None))
        if key is not d.sim:
            model = FutureModel.of_scenario(self.vec.setup.scenario, d.seed, self.planner.samples,
                                            self.planner.horizon_s, d.sim.workload.arrival_s)
            self._models[i] = (d.sim, model)
        return model

    def label(self, clusters) -> Labels:
        """Price every candidate instance of the pending request of each of ``clusters``
        (vector env indices, each waiting for a routing decision) and pick as the planner does."""
        start = time.perf_counter()
        p, vec = self.planner, self.vec
        clusters = np.asarray(clusters, np.int64)
        sims = [vec.drivers[i].sim for i in clusters]
        own = np.array([int(vec.drivers[i].observer.route(s.pending_info, s.current_view()))
                        for i, s in zip(clusters, sims)], np.int64)
        first, serving = int(vec.batch.state.clusters.nprefill[sims[0].c]), sims[0].serving
        cands = [[int(o)] if p.candidates == "base" else list(range(first, serving)) for o in own]
        pending = [Pending(s.c, s.pending_route, c, self._model(int(i))) for i, s, c in zip(clusters, sims, cands)]
        costs = routing_costs(vec.batch.state, pending, p.form, p.samples, p.horizon_s, vec.setup, self.pool)
        label = np.array([c[choose(costs[n], c.index(int(own[n])))] for n, c in enumerate(cands)], np.int64)
        self.labels += len(clusters)
        self.seconds += time.perf_counter() - start
        return Labels(clusters, costs, np.array(cands, np.int64), own, label)
