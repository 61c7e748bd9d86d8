"""Pricing decisions on forked copies of clusters: the one implementation of planning behind
the lookahead planner (:mod:`baselines.lookahead`) and the imitation labeller
(:mod:`agents.imitation.labeller`).

A decision is priced by copying its cluster once per option (and per sampled future),
applying each option in its copy, running every copy on for ``horizon_s`` seconds under
the base policies (all copies, of every cluster being priced, in one batched compiled
call), and charging each copy the environment's own cost over the requests that arrived
there (:func:`~llmsched_gym.envs.core.request_costs`). The clusters may be any slots of any
:class:`~llmsched_gym.engine.api.EngineState`: one ``Simulator``'s, or every cluster of a
native vector environment at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmsched_gym.engine.api import FINISHED, ST_TIME, EngineState
from llmsched_gym.envs.core import request_costs
from llmsched_gym.errors import ConfigError

#: Salt of the planner's generators (sampled futures, their draws).
MPC_SALT = 0x6D7063


@dataclass
class FutureModel:
    """What ``mode=mpc`` copies see instead of the true future of one episode.

    Args:
        arrivals: each sampled future's arrival times (the scenario's arrival model under
            fresh seeds), common to every option of a decision.
        horizon_s: seconds a copy runs past the decision.
        draws: the generator of the requests copied into each future and of the copies'
            own generators.
    """

    arrivals: list[np.ndarray]
    horizon_s: float
    draws: np.random.Generator

    @classmethod
    def of_scenario(cls, scenario, seed: int, samples: int, horizon_s: float, real: np.ndarray) -> "FutureModel":
        """The futures of the episode of workload seed ``seed``: ``samples`` workloads of the
        scenario under fresh seeds (``real``: the episode's own arrival times, which a
        sampled future must not be)."""
        seeds = np.random.SeedSequence([seed, MPC_SALT]).generate_state(samples) % 2**31
        out = [scenario.build_workload(int(s)).arrival_s for s in seeds]
        if any(len(a) == len(real) and np.array_equal(a, real) for a in out):
            raise ConfigError(f"lookahead mode=mpc samples futures from the scenario's arrival model, but "
                              f"scenario {scenario.name!r} replays the same arrivals under every seed (a trace); "
                              "use mode=oracle, or a synthetic workload")
        return cls(out, float(horizon_s), np.random.default_rng([seed, MPC_SALT]))

    @property
    def room(self) -> int:
        """The most sampled arrivals in any horizon: the spare request rows a copy needs."""
        return max((int(np.max(np.searchsorted(a, a + self.horizon_s, side="right") - np.arange(len(a)), initial=0))
                    for a in self.arrivals), default=0)

    def apply(self, copies: EngineState, state: EngineState, c: int, slot0: int, k: int) -> None:
        """Give the copies of cluster ``c`` of ``state`` in slots ``slot0 ..`` (``k`` options x
        ``len(arrivals)`` futures, future-major) each its future: the sampled arrivals of the
        next ``horizon_s`` seconds, each a copy of a request that has finished in ``c``
        (before any has, of one that has arrived), and a generator of its own."""
        now, ptr, r0 = float(state.clusters.now[c]), int(state.clusters.ptr[c]), int(state.req_off[c])
        finished = np.flatnonzero(state.requests.outcome[r0:r0 + ptr] == FINISHED)
        pool = finished if len(finished) else np.arange(ptr)
        for s, arrivals in enumerate(self.arrivals):
            times = arrivals[np.searchsorted(arrivals, now, side="right"):
                             np.searchsorted(arrivals, now + self.horizon_s, side="right")]
            like = pool[self.draws.integers(0, len(pool), len(times))] if len(pool) else np.zeros(0, np.int64)
            rng_seed = self.draws.integers(2**63)
            for j in range(slot0 + s * k, slot0 + (s + 1) * k):
                copies.replace_future(j, times if len(pool) else times[:0], like)
                copies.rngs[j] = np.random.default_rng(rng_seed)


class CopyPool:
    """The state of copies a planner reuses decision after decision (a new one only when a
    copy no longer fits its slot: another cluster count, a larger workload)."""

    def __init__(self):
        self.copies: EngineState | None = None

    def fork(self, state: EngineState, clusters: list[int], models: "list[FutureModel | None]", k: int,
             samples: int) -> EngineState:
        """``k`` options x ``samples`` futures copies of each of ``clusters`` of ``state``, in
        blocks of ``k * samples`` slots per cluster (future-major within a block); the copies
        of a cluster with a :class:`FutureModel` get its futures."""
        per = k * samples
        K = per * len(clusters)
        room = max((m.room for m in models if m is not None), default=0)
        c0 = self.copies
        if c0 is None or c0.num_clusters != K or not all(
                c0.holds(i * per, state, c) and int(c0.req_off[i * per + 1] - c0.req_off[i * per]) >=
                int(state.req_off[c + 1] - state.req_off[c]) + room for i, c in enumerate(clusters)):
            self.copies = state.forked(clusters, per, room=room)
        else:
            for i, c in enumerate(clusters):
                c0.fork(c, range(i * per, (i + 1) * per), source=state)
        for i, (c, m) in enumerate(zip(clusters, models)):
            if m is not None:
                m.apply(self.copies, state, c, i * per, k)
        return self.copies


@dataclass
class Pending:
    """A cluster waiting for a routing decision, as :func:`routing_costs` prices it.

    Args:
        c: the cluster's slot in its state.
        request: the request awaiting the decision (cluster-local row: ``Simulator.pending_route``).
        candidates: the instances to price it on (local indices).
        model: the sampled futures of ``mode=mpc`` (None: the copies see the true future).
    """

    c: int
    request: int
    candidates: list[int]
    model: FutureModel | None = None


def routing_costs(state: EngineState, pending: list[Pending], form, samples: int, horizon_s: float, setup,
                  pool: CopyPool) -> np.ndarray:
    """The environment cost of sending each pending request to each of its candidates:
    ``(len(pending), samples, candidates)``. Every cluster's copies are forked into one state
    (reused through ``pool``), routed, handed to the compiled router ``form`` and advanced
    ``horizon_s`` seconds past their cluster's clock in one call. Every pending cluster
    offers as many candidates, and a mpc one (``model`` set) has ``samples`` futures."""
    k = len(pending[0].candidates)
    if any(len(p.candidates) != k for p in pending):
        raise ValueError("every pending decision must offer as many candidates")
    copies = pool.fork(state, [p.c for p in pending], [p.model for p in pending], k, samples)
    per = k * samples
    for i, p in enumerate(pending):
        for j in range(i * per, (i + 1) * per):
            copies.set_policy(j, "router", form.code, form.params)
            slot = copies.cluster(j)
            slot.status, slot.log_finish = ST_TIME, 0  # the decision is answered; no Python router hears them
            copies.dispatch_to(j, int(copies.req_off[j]) + p.request, p.candidates[j % k])
    until = np.repeat([float(state.clusters.now[p.c]) + horizon_s for p in pending], per)
    return price_copies(copies, until, setup).reshape(len(pending), samples, k)


def price_copies(copies: EngineState, until: np.ndarray, setup) -> np.ndarray:
    """Each copy's environment cost after running on to ``until`` (one time per copy):
    :func:`~llmsched_gym.envs.core.request_costs` over the requests that arrived in it."""
    K = copies.num_clusters
    copies.advance(np.ones(K, bool), until)
    req, clu = copies.requests, copies.clusters
    out = np.empty(K)
    for j in range(K):
        rows = slice(int(clu.req0[j]), int(clu.req0[j] + clu.ptr[j]))  # the requests that arrived
        target = (req.finish if setup.reward == "e2e" else req.first)[rows]
        out[j] = request_costs(req.arrival[rows], target, req.outcome[rows], req.end[rows], req.priority[rows],
                               float(clu.now[j]), setup).sum()
    return out


def choose(costs: np.ndarray, base: int) -> int:
    """The option to act on, from each option's cost in each future (``samples`` x
    options): the cheapest in total if it is cheaper than the base heuristic's own option
    in every future, else the base's. With one future (``oracle``) that is the cheapest,
    the base's on a tie; with sampled ones, the planner departs from the heuristic only
    where every future agrees that it pays."""
    best = int(np.argmin(costs.sum(axis=0)))
    return best if np.all(costs[:, best] < costs[:, base]) else base
