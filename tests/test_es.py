"""CMA-ES on paired seeds (agents/es): residuals exact at theta = 0, deterministic paired
evaluation, an improvement on a tiny case, and the CLI's bad-input errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cmaes")

import llmsched_gym as g  # noqa: E402
from agents.es.paired import PairedEvaluator, evaluate_task  # noqa: E402
from agents.es.search import PopulationRunner, train_es  # noqa: E402
from llmsched_gym.envs.core import episode_cost, make_setup  # noqa: E402
from llmsched_gym.errors import ConfigError  # noqa: E402

ROUTING = dict(scenario="toolagent", horizon=4.0)
FLOW = dict(scenario="codegen", paper_qps=16, horizon=20.0, control_interval=1.0, action="soft-reflective")
TINY = dict(generations=3, popsize=4, seeds_per_gen=2, seed=0)


def _scenario(name: str, horizon: float, **kw):
    sc = g.make_scenario(name, **kw)
    sc.horizon_s = horizon
    return sc


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny CMA-ES run on toolagent (4 s episodes) and a copy of it with theta = 0."""
    out = tmp_path_factory.mktemp("es")
    rec = train_es("llmsched/Routing-v0", "toolagent", {}, {"horizon": 4.0}, TINY, out / "run",
                   select_seeds="80:83", log=lambda *a, **k: None)
    zero = out / "zero"
    zero.mkdir()
    (zero / "agent.json").write_text(json.dumps({**rec, "theta": [0.0] * rec["theta_dim"]}))
    return out / "run", zero, rec


def test_routing_theta0_is_lmetric_request_for_request():
    """In the native vector env, theta = 0 routes every request where lmetric-no-detector
    does (same instance, same first token); in a batch beside a candidate that differs, its
    episode cost is still lmetric-no-detector's on each seed."""
    sc = _scenario("toolagent", 4.0)
    setup = make_setup("routing", scenario=sc)
    ev = PairedEvaluator("llmsched/Routing-v0", ROUTING)
    refs = {seed: sc.simulator(seed, router="lmetric-no-detector").run() for seed in (5, 6)}
    for seed, ref in refs.items():
        ev.costs(np.zeros((1, 9)), [seed])  # one cluster: its tables are the episode's at its end
        got = ev._env.simulators[0]
        n = ref.arrived
        assert got.arrived == n > 50
        np.testing.assert_array_equal(got.table.instance[:n], ref.table.instance[:n])
        np.testing.assert_array_equal(got.table.first_token_t[:n], ref.table.first_token_t[:n])
    thetas = np.zeros((2, 9))
    thetas[1, 7] = 1.0
    cost = ev.costs(thetas, [5, 6])
    # the env sums its cost step by step, episode_cost in one pass: equal up to rounding
    np.testing.assert_allclose(cost[0], [episode_cost(refs[5], setup), episode_cost(refs[6], setup)], rtol=1e-12)
    assert not np.array_equal(cost[0], cost[1])


@pytest.mark.parametrize("router", ["llm-d-predicted-latency", "preble"])
def test_hint_base_theta0_is_the_hinted_router(router):
    """With Routing-v0's hint, theta = 0 is the hinted router: the same episode cost."""
    ev = PairedEvaluator("llmsched/Routing-v0", {**ROUTING, "hint": router})
    assert ev.residual.heuristic == router
    cost = ev.costs(np.zeros((1, 9)), [5])
    sc = _scenario("toolagent", 4.0)
    ref = sc.simulator(5, router=router).run()
    np.testing.assert_allclose(cost[0, 0], episode_cost(ref, make_setup("routing", scenario=sc)), rtol=1e-12)


def test_routing_theta0_agent_compares_equal_to_lmetric(tiny_run):
    """Through the harness, agent:PATH with theta = 0 has lmetric-no-detector's metrics."""
    from llmsched_gym.evaluation.harness import evaluate

    _, zero, _ = tiny_run
    table = evaluate("toolagent", f"lmetric-no-detector;agent:{zero}+label=agent", seeds=[7, 8],
                     overrides={"horizon_s": 4.0}, workers=1)
    rows = {(r["policy"], r["seed"], r["class"]): r for r in table.rows}
    n = 0
    for (pol, seed, cls), r in rows.items():
        if pol == "agent":
            ref = rows[("lmetric-no-detector", seed, cls)]
            for m in ("ttft_mean", "ttft_p99", "tpot_mean", "e2e_mean", "throughput_rps"):
                assert r[m] == ref[m] or (np.isnan(r[m]) and np.isnan(ref[m])), (seed, cls, m)
            n += 1
    assert n >= 2


def test_flow_theta0_is_soft_reflective_ceiling(tmp_path):
    """FlowControl: theta = 0 acts (0.5, 0.5), the soft-reflective ceiling: the same cost in
    the vector env and the same metrics through the harness (fc=agent:PATH)."""
    from llmsched_gym.evaluation.harness import evaluate

    ev = PairedEvaluator("llmsched/FlowControl-v0", FLOW)
    cost = ev.costs(np.zeros((1, ev.residual.dim)), [5])
    sc = _scenario("codegen", 20.0, paper_qps=16)
    ref = sc.simulator(5, flow_control="soft-reflective-ceiling").run()
    np.testing.assert_allclose(cost[0, 0], episode_cost(ref, make_setup("flow_control", scenario=sc)), rtol=1e-12)
    # priority weights as a weighted-cost run records them (JSON: the priorities become strings)
    env_kwargs = {**{k: v for k, v in FLOW.items() if k not in ("scenario", "paper_qps")},
                  "priority_weights": {0: 8.0, -1: 0.5}}
    meta = {"env_id": "llmsched/FlowControl-v0", "algo": "cmaes", "scenario": "codegen", "rate_kind": "paper_qps",
            "rates": [16], "env_kwargs": env_kwargs, "theta": [0.0] * ev.residual.dim}
    (tmp_path / "agent.json").write_text(json.dumps(meta))
    table = evaluate("codegen", f"soft-reflective-ceiling;fc=agent:{tmp_path}+label=agent", seeds=[5],
                     paper_qps=16, overrides={"horizon_s": 20.0}, workers=1)
    rows = {(r["policy"], r["class"]): r for r in table.rows}
    for (pol, cls), r in rows.items():
        if pol == "agent":
            assert r["ttft_p99"] == rows[("soft-reflective-ceiling", cls)]["ttft_p99"], cls


def test_gateway_theta0_is_the_centre_combination():
    """Gateway-v0: theta = 0 acts the centre action, the base combination (here lmetric with
    soft-reflective-ceiling and always-admit): the same cost as that combination's run."""
    kw = dict(scenario="codegen", paper_qps=16, horizon=20.0, flow_action="soft-reflective")
    ev = PairedEvaluator("llmsched/Gateway-v0", kw)
    cost = ev.costs(np.zeros((1, ev.residual.dim)), [5])
    sc = g.make_scenario("codegen", paper_qps=16)
    ref = sc.simulator(5, router="lmetric", flow_control="soft-reflective-ceiling", admission="always-admit",
                       horizon_s=20).run()
    setup = make_setup("gateway", **kw)
    np.testing.assert_allclose(cost[0, 0], episode_cost(ref, setup), rtol=1e-12)


def test_paired_evaluation_is_deterministic_and_split_invariant():
    """Same thetas and seeds -> the same costs, bit for bit: again in the same process, in a
    fresh evaluator, and split over two process-pool workers."""
    thetas = np.random.default_rng(3).normal(0, 0.3, (3, 9))
    task = ("llmsched/Routing-v0", ROUTING, thetas, [11, 12])
    a, steps = evaluate_task(task)
    b, _ = evaluate_task(task)
    c = PairedEvaluator("llmsched/Routing-v0", ROUTING).costs(thetas, [11, 12])
    runner = PopulationRunner("llmsched/Routing-v0", ROUTING, workers=2, backend="local")
    d = runner.costs(thetas, [11, 12])
    runner.close()
    assert steps > 0 and len(np.unique(a)) > 1
    for x in (b, c, d):
        np.testing.assert_array_equal(a, x)


def test_cmaes_improves_on_the_heuristic(tiny_run):
    """On toolagent, a few generations find a correction of LMetric that beats it on the
    selection seeds (kept apart from the generations' seeds); the run records its seeds."""
    _, _, rec = tiny_run
    assert rec["chosen"] != "heuristic"
    assert rec["selection"]["change_vs_heuristic"][rec["chosen"]] < 0
    assert len(rec["history"]) == 3 and rec["env_steps"] > 0
    used = {s for gen in rec["training_seeds"] for s in gen}
    assert used <= set(range(0, 80)) and not used & set(rec["selection"]["seeds"])


def test_cmaes_run_is_reproducible(tiny_run, tmp_path):
    """Same settings and seed: the same theta, bit for bit."""
    _, _, rec = tiny_run
    again = train_es("llmsched/Routing-v0", "toolagent", {}, {"horizon": 4.0}, TINY, tmp_path / "again",
                     select_seeds="80:83", log=lambda *a, **k: None)
    assert again["theta"] == rec["theta"] and again["history"][-1]["best"] == rec["history"][-1]["best"]


@pytest.mark.parametrize("argv, message", [
    (["--env", "llmsched/Admission-v0"], "has no residual policy"),
    (["--popsize", "1"], "--popsize"),
    (["--train-seeds", "150:160"], "outside the declared training seeds"),
    (["--select-seeds", "200:209"], "outside the declared training seeds"),
    (["--train-seeds", "0:9", "--select-seeds", "5:20"], "overlap"),
    (["--seeds-per-gen", "5", "--train-seeds", "0:3"], "--seeds-per-gen"),
    (["--scenario", "no-such-scenario"], "no-such-scenario"),
])
def test_cli_bad_input(argv, message, tmp_path, capsys):
    """Bad input is one clear error before any simulation, and nothing is written."""
    from llmsched_gym.cli import main

    out = tmp_path / "out"
    assert main(["train", "--algo", "cmaes", "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_es_flags_need_cmaes(capsys):
    from llmsched_gym.cli import main

    assert main(["train", "--algo", "ppo", "--popsize", "4"]) == 2
    assert "applies to --algo cmaes only" in capsys.readouterr().err


def test_unknown_env_is_refused(capsys):
    from llmsched_gym.cli import main

    with pytest.raises(SystemExit) as e:  # argparse's choices
        main(["train", "--algo", "cmaes", "--env", "llmsched/Nope-v0"])
    assert e.value.code == 2
    assert "llmsched/Nope-v0" in capsys.readouterr().err


def test_train_es_rejects_bad_settings(tmp_path):
    with pytest.raises(ConfigError, match="sigma"):
        train_es("llmsched/Routing-v0", "toolagent", {}, {"horizon": 4.0}, {"sigma": -1.0}, tmp_path / "x")


PRETRAINED = Path(__file__).resolve().parents[1] / "agents" / "pretrained"


def test_shipped_es_agents_load_as_policies():
    """Every shipped CMA-ES agent loads as agent:PATH in its role, with its evaluation record."""
    from llmsched_gym.gateway.policy import make_policy

    dirs = [d for d in PRETRAINED.iterdir() if (d / "agent.json").is_file()
            and json.loads((d / "agent.json").read_text())["algo"] == "cmaes"]
    assert dirs
    for d in dirs:
        rec = json.loads((d / "REPRODUCE.json").read_text())
        assert rec["evaluation"]["verdict"] == "beats" and rec["evaluation"]["cost_change"][2] < 0
        meta = json.loads((d / "agent.json").read_text())
        role = {"llmsched/Routing-v0": "routing", "llmsched/FlowControl-v0": "usage-limit",
                "llmsched/Gateway-v0": "gateway"}[meta["env_id"]]
        assert make_policy(f"agent:{d}", role).role == role


@pytest.mark.slow
def test_reproduce_shipped_es_agent(tmp_path):
    """The documented command retrains es-toolagent to the same theta, bit for bit."""
    import shlex
    import subprocess
    import sys

    d = PRETRAINED / "es-toolagent"
    rec = json.loads((d / "REPRODUCE.json").read_text())
    argv = shlex.split(rec["command"].replace("OUT", str(tmp_path / "run")))
    assert argv[:2] == ["llmsched-gym", "train"]
    subprocess.run([sys.executable, "-m", "llmsched_gym.cli", *argv[1:]], check=True, cwd=PRETRAINED.parents[1])
    got = json.loads((tmp_path / "run" / "agent.json").read_text())
    assert got["theta"] == json.loads((d / "agent.json").read_text())["theta"]
