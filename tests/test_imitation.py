"""Imitation of the lookahead planner (agents/imitation): the batched labeller on Routing-v0's
native vector env labels exactly as the Simulator-path planner decides; behaviour cloning
learns a known rule; ``train --algo bc|dagger`` refuses bad input before simulating and is
deterministic."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

import llmsched_gym as g  # noqa: E402
from agents.imitation.collect import Dataset  # noqa: E402
from agents.imitation.fit import accuracy, act, fit  # noqa: E402
from agents.imitation.labeller import RoutingLabeller  # noqa: E402
from agents.imitation.run import build_model  # noqa: E402
from agents.train import main as train_main  # noqa: E402
from llmsched_gym.gateway.policy import make_policy  # noqa: E402

ENV = dict(scenario="chatbot", qps=40, instances=4, horizon=3.0)


def _vec(n: int):
    return gym.make_vec("llmsched/Routing-v0", num_envs=n, **ENV).unwrapped


@pytest.mark.parametrize("mode", ["oracle", "mpc"])
def test_batched_labels_are_the_planners_decisions(mode):
    """Two clusters labelled together, each acting on its label, route every request as the
    Simulator-path planner (``gateway=lookahead``) does on its own, request for request."""
    teacher = f"lookahead:mode={mode},horizon_s=1,base=preble" + (",samples=2" if mode == "mpc" else "")
    vec = _vec(2)
    labeller = RoutingLabeller(teacher, vec)
    vec.reset(seed=0, options={"workload_seed": [7, 8]})
    live, routes = np.ones(2, bool), [[], []]
    departs = 0
    while live.any():
        lab = labeller.label(np.flatnonzero(live))
        assert lab.costs.shape == (len(lab.clusters), 2 if mode == "mpc" else 1, 4)
        departs += int(np.sum(lab.label != lab.own))
        actions = vec.action_masks().argmax(axis=1)
        actions[lab.clusters] = lab.label
        for i, a in zip(lab.clusters, lab.label):
            routes[i].append(int(a))
        _, _, terminated, truncated, _ = vec.step(actions)
        live &= ~(terminated | truncated)
    assert departs > 10  # the planner's choices are not the heuristic's
    for i, seed in enumerate([7, 8]):
        sc = g.make_scenario("chatbot", qps=40, instances=4)
        sc.horizon_s = 3.0
        planner = make_policy(teacher, "gateway")
        t = planner.run(sc, seed).table
        assert planner.decisions == len(routes[i]) > 100
        np.testing.assert_array_equal(t.instance[~np.isnan(t.dispatch_t)], routes[i])


def _states(n_envs: int, seeds: list[int]) -> Dataset:
    """States of Routing-v0 visited under random valid actions, labelled with JSQ's rule
    (fewest in-flight requests, the first on ties), computed from the observation."""
    vec = _vec(n_envs)
    rng = np.random.default_rng(0)
    obs, _ = vec.reset(seed=0, options={"workload_seed": seeds})
    parts, live = [], np.ones(n_envs, bool)
    while live.any():
        masks = vec.action_masks()
        rows = np.flatnonzero(live)
        infl = np.where(masks, obs["in_flight"], np.inf)
        label = infl.argmin(axis=1)
        parts.append(Dataset({k: v[rows].copy() for k, v in obs.items()}, masks[rows].copy(), label[rows],
                             np.zeros((len(rows), masks.shape[1])), np.asarray(seeds)[rows], label[rows]))
        actions = np.where(rng.random(n_envs) < 0.5, label, rng.integers(0, masks.shape[1], n_envs))
        obs, _, terminated, truncated, _ = vec.step(actions)
        live &= ~(terminated | truncated)
    return Dataset.concat(parts)


def test_behaviour_cloning_learns_a_known_rule():
    data = _states(4, [0, 1, 2, 3])
    held = data.seeds == 3
    train, test = data.subset(np.flatnonzero(~held)), data.subset(np.flatnonzero(held))
    assert len(test) > 80 and len(np.unique(test.label)) == 4
    model = build_model(_vec(1), "agents.networks:MaskableScorerPolicy", {}, seed=0)

    def follows_rule() -> float:
        """Share of held-out states where the student picks an instance with the fewest
        in-flight requests (the scorer is permutation-equivariant: it cannot learn JSQ's
        lowest-index tie-break, only the rule)."""
        pick = act(model.policy, test.obs, test.masks)
        infl = np.where(test.masks, test.obs["in_flight"], np.inf)
        return float(np.mean(infl[np.arange(len(test)), pick] == infl.min(axis=1)))

    before = follows_rule()
    losses = fit(model.policy, train, epochs=40, batch_size=64, lr=3e-3, seed=0)
    assert losses[-1] < losses[0]
    assert follows_rule() >= 0.95 > before
    assert accuracy(model.policy, test) > 0.5  # the exact label, ties included


@pytest.mark.parametrize("argv, match", [
    (["--algo", "bc"], "needs --teacher"),
    (["--algo", "bc", "--teacher", "jsq"], "the teacher is the lookahead planner"),
    (["--algo", "bc", "--teacher", "lookahead:mode=replay"], "mode='replay'"),
    (["--algo", "bc", "--teacher", "lookahead:decision=flow"], "decision=flow"),
    (["--algo", "bc", "--teacher", "lookahead:base=llm-d"], "base=llm-d keeps books"),
    (["--algo", "maskable-ppo", "--teacher", "lookahead:base=preble"], "--teacher is for --algo bc or dagger"),
    (["--algo", "bc", "--env", "llmsched/FlowControl-v0", "--teacher", "lookahead:base=preble"], "--env"),
    (["--algo", "dagger", "--teacher", "lookahead:base=preble", "--set", "rounds=0"], "rounds >= 1"),
    (["--algo", "bc", "--teacher", "lookahead:base=preble", "--set", "rounds=2"], "needs --algo dagger"),
    (["--algo", "bc", "--teacher", "lookahead:base=preble", "--set", "epoch=3"], "'epoch' is not a bc setting"),
    (["--algo", "bc", "--teacher", "lookahead:base=preble", "--set", "target=cosine"], "target"),
    (["--algo", "bc", "--teacher", "lookahead:base=preble", "--set", "episodes=30", "--n-envs", "4"],
     "declared training seeds are 0-99"),
    (["--algo", "bc", "--teacher", "lookahead:base=preble", "--scenario", "chatbot,agent"], "one scenario"),
])
def test_bad_input_is_refused_before_simulating(argv, match, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_main(argv + ["--out", str(out), "--no-progress"]) == 2
    assert match in capsys.readouterr().err
    assert not out.exists()


def _run(out) -> dict:
    assert train_main(["--algo", "dagger", "--scenario", "chatbot", "--qps", "40", "--instances", "4",
                       "--env-set", "horizon=2", "--teacher", "lookahead:mode=mpc,samples=2,horizon_s=0.5,base=preble",
                       "--n-envs", "2", "--set", "episodes=1", "--set", "rounds=1", "--set", "epochs=3",
                       "--seed", "5", "--out", str(out), "--no-progress"]) == 0
    return json.loads((out / "agent.json").read_text())


def test_same_seed_same_agent(tmp_path):
    import torch as th

    from agents.policy import load_agent

    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    timing = ("labels_per_s",)
    assert ([{k: v for k, v in r.items() if k not in timing} for r in a["rounds"]]
            == [{k: v for k, v in r.items() if k not in timing} for r in b["rounds"]])
    assert a["labels"] == b["labels"] > 0
    assert set(a["training_workload_seeds"]) <= set(range(100)) and len(a["training_workload_seeds"]) == 4
    assert a["teacher"].startswith("lookahead:mode=mpc") and a["base"] == "preble" and a["complete"]
    pa, pb = (load_agent(tmp_path / x).model.policy.state_dict() for x in "ab")
    assert all(th.equal(pa[k], pb[k]) for k in pa)
    da, db = (Dataset.load(tmp_path / x / "labels.npz") for x in "ab")
    assert len(da) == a["labels"] and np.array_equal(da.label, db.label) and np.array_equal(da.costs, db.costs)


def test_shipped_agent_routes_through_the_harness():
    """The shipped imitation agent loads as ``agent:PATH`` and routes a short agent episode
    (on a training seed; its verdict on the evaluation seeds is in its REPRODUCE.json)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "agents" / "pretrained" / "routing-imitation-agent"
    rec = json.loads((path / "REPRODUCE.json").read_text())
    assert rec["evaluation"]["verdict"] == "beats" and rec["evaluation"]["cost_change"][2] < 0
    sc = g.make_scenario("agent")
    sc.horizon_s = 2.0
    t = sc.simulator(0, router=f"agent:{path}").run().table
    routed = t.instance[~np.isnan(t.dispatch_t)]
    assert len(routed) > 100 and len(np.unique(routed)) > 4
