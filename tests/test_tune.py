"""``llmsched-gym tune`` (llmsched_gym/evaluation/tune.py, issue 13 item 2): search spaces,
objectives and constraints are parsed and checked with one-line errors; a search is
deterministic for a fixed seed, reports its best trial, and that spec runs in ``compare``."""

from __future__ import annotations

import json
import math
import sys

import pytest

from llmsched_gym.cli import main
from llmsched_gym.errors import ConfigError, MissingExtraError
from llmsched_gym.evaluation.tune import parse_constraint, parse_objective, parse_space, tune

#: A short search: chatbot at half load over a 5 s window (16 instances), 5 trials x 2 seeds.
SHORT = ["--scenario", "chatbot", "--load", "0.5", "--duration", "5", "--seeds", "2"]
TUNE = ["tune", *SHORT, "--space", "bailian:lam=0..1", "--trials", "5", "--startup-trials", "2", "--workers", "1"]


def _trials(out) -> dict:
    return json.loads((out / "trials.json").read_text())


def test_tune_is_deterministic_reports_the_best_trial_and_its_spec_runs_in_compare(tmp_path):
    pytest.importorskip("optuna", reason="the [tune] extra is not installed (pip install -e '.[tune]')")
    a, b = tmp_path / "a", tmp_path / "b"
    assert main([*TUNE, "--out", str(a)]) == 0
    assert main([*TUNE, "--out", str(b), "--no-plots"]) == 0
    ta, tb = _trials(a), _trials(b)
    assert ta == tb  # same seed, same trials, same results
    assert (a / "trials.csv").read_text() == (b / "trials.csv").read_text()
    trials = ta["trials"]
    assert [t["trial"] for t in trials] == list(range(5))
    assert len({t["bailian.lam"] for t in trials}) > 1  # it searched
    assert all(0 <= t["bailian.lam"] <= 1 for t in trials)
    best = json.loads((a / "best.json").read_text())
    spec = (a / "best.txt").read_text().strip()
    assert spec == best["spec"] == ta["best"]["spec"] == f"bailian:lam={best['params']['bailian.lam']!r}"
    assert best["objective"] == min(t["objective"] for t in trials)
    assert best["objective"] == next(t for t in trials if t["spec"] == spec)["objective"]
    assert (a / "objective-vs-bailian.lam.png").stat().st_size > 0
    # a different sampler seed samples differently
    assert main([*TUNE, "--out", str(tmp_path / "c"), "--no-plots", "--sampler-seed", "1"]) == 0
    assert [t["bailian.lam"] for t in _trials(tmp_path / "c")["trials"]] != [t["bailian.lam"] for t in trials]

    # the best spec runs in compare, on the same seeds, with the same objective value
    cmp = tmp_path / "compare"
    assert main(["compare", *SHORT, "--policies", f"{spec};jsq", "--no-plots", "--workers", "1",
                 "--out", str(cmp)]) == 0
    rows = [r for r in json.loads((cmp / "results.json").read_text())["rows"]
            if r["policy"] == spec and r["class"] == "all"]
    assert len(rows) == 2
    assert sorted(r["ttft_mean"] for r in rows)[0] <= best["objective"] <= sorted(r["ttft_mean"] for r in rows)[1]
    assert best["objective"] == pytest.approx(sum(r["ttft_mean"] for r in rows) / 2, rel=1e-12)  # median of 2


def test_joint_space_constraint_and_integer_parameter(tmp_path):
    pytest.importorskip("optuna", reason="the [tune] extra is not installed (pip install -e '.[tune]')")
    space = tmp_path / "space.yaml"
    space.write_text("aibrix:\n  imbalance: {low: 1, high: 64, log: true}\n  std_factor: [0.5, 2]\n")
    kw = dict(load=0.5, overrides={"duration_s": 5}, seeds=[0, 1], trials=4, startup_trials=2, workers=1)
    res = tune("chatbot", [str(space)], "0.7*ttft_p99+0.3*tpot_p99",
               constraints=["throughput_rps>=0.99*jsq", "ttft_mean<=10"], **kw)
    assert all(isinstance(t["aibrix.imbalance"], int) and 1 <= t["aibrix.imbalance"] <= 64 for t in res.trials)
    assert [c["reference"] for c in res.meta["constraints"]] == ["jsq", None]
    assert res.meta["constraints"][0]["bound"] > 0
    feasible = [t for t in res.trials if t["feasible"]]
    assert feasible and res.best["objective"] == min(t["objective"] for t in feasible)
    for t in res.trials:  # the objective is the weighted sum of the medians
        assert t["objective"] == pytest.approx(0.7 * t["ttft_p99:all"] + 0.3 * t["tpot_p99:all"])
        assert t["feasible"] == (t["throughput_rps:all"] >= res.meta["constraints"][0]["bound"]
                                 and t["ttft_mean:all"] <= 10)
    # batches of trials run through the backend together; a trial that repeats one reuses it
    batched = tune("chatbot", [str(space)], "ttft_mean", batch=2, **kw)
    assert len(batched.trials) == 4 and batched.meta["batch"] == 2
    assert batched.meta["evaluated"] == len({t["spec"] for t in batched.trials})


def test_space_syntax():
    sp = parse_space(["llm-d:queue_weight=0..5,kv_weight=0..5,prefix_weight=0.1..5:log,block_tokens=64",
                      "static-usage-limit:threshold=0.5..1"])
    assert [r.role for r in sp.roles] == ["router", "flow_control"]
    assert [p.key for p in sp.params] == ["llm-d.queue_weight", "llm-d.kv_weight", "llm-d.prefix_weight",
                                          "static-usage-limit.threshold"]
    assert sp.params[2].log and not sp.params[0].log
    values = {"llm-d.queue_weight": 1.0, "llm-d.kv_weight": 2, "llm-d.prefix_weight": 0.5,
              "static-usage-limit.threshold": 0.75}
    spec = sp.spec(values, {"admission": "legacy"})
    assert spec == ("llm-d:block_tokens=64,queue_weight=1.0,kv_weight=2.0,prefix_weight=0.5"
                    "+static-usage-limit:threshold=0.75+admission=legacy")
    assert parse_space("aibrix:imbalance=1..64:log").params[0].integer  # an int parameter: integers
    assert parse_space("llm-d:block_tokens=16..128:int").params[0].integer
    p = parse_space("bailian:lam=0..1").params[0]
    assert p.value(0.123456789) == 0.1235 and p.value(0.999999) == 1.0  # 4 digits, within the range
    assert parse_space("bailian:lam=0..1").spec({"bailian.lam": 0.7}, {"flow_control": None}) == \
        "bailian:lam=0.7+flow_control=none"


@pytest.mark.parametrize("space, needle", [
    ("bailian:lambda=0..1", "unknown parameter 'lambda'; bailian takes lam: float in [0, 1] = 0.6"),
    ("bailian:lam=0..2", "lam=2.0 is invalid; it must be a finite number in [0, 1]"),
    ("bailian:lam=1..0", "low bound 1.0 must be below the high bound 0.0"),
    ("bailian:lam=x..1", "low bound 'x' is not a number"),
    ("bailian:lam=0..1:cubic", "unknown option 'cubic'; allowed after the range: log, int"),
    ("bailian:lam", "'lam' must be PARAM=LOW..HIGH"),
    ("bailian", "nothing to search"),
    ("aibrix:imbalance=1.5..64", "searched over integers; low bound 1.5"),
    ("aibrix:imbalance=0..64:log", "a :log range needs a low bound > 0"),
    ("lmetric:detector=0..1", "lmetric.detector is a bool parameter"),
    ("nosuch:x=0..1", "unknown policy 'nosuch'"),
    ("router=bailian:lam=0..1", "write POLICY:PARAM=LOW..HIGH"),
    ("missing-space.yaml", "cannot read the file"),
])
def test_bad_spaces_are_one_line_errors_naming_the_field(space, needle):
    with pytest.raises(ConfigError) as e:
        parse_space(space)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and msg.startswith("--space ")


def test_bad_yaml_spaces_and_joint_roles(tmp_path):
    f = tmp_path / "s.yaml"
    for text, needle in (("bailian: {lam: {low: 0}}", "missing 'high'"), ("bailian: {lam: [0, 1, 2]}", "[low, high]"),
                         ("bailian: {lam: {low: 0, high: 1, step: 2}}", "unknown key(s) 'step'"),
                         ("- bailian", "expected a mapping of policy names"), ("bailian: [", "not valid YAML")):
        f.write_text(text)
        with pytest.raises(ConfigError, match=None) as e:
            parse_space(str(f))
        assert needle in str(e.value) and str(e.value).startswith(f"--space {f}"), str(e.value)
    with pytest.raises(ConfigError, match="two policies for the router"):
        parse_space(["bailian:lam=0..1", "aibrix:imbalance=1..8"])


def test_objective_and_constraint_syntax():
    o = parse_objective("0.7*ttft_p99:critical+0.3*tpot_p99-1e-3*goodput_rps")
    assert [(t.weight, t.metric, t.cls) for t in o.terms] == [(0.7, "ttft_p99", "critical"), (0.3, "tpot_p99", "all"),
                                                              (-1e-3, "goodput_rps", "all")]
    assert not o.maximize
    assert o.value({"ttft_p99:critical": 1.0, "tpot_p99:all": 2.0, "goodput_rps:all": 100.0}) == pytest.approx(1.2)
    assert parse_objective("max:goodput_rps:sheddable-p-2").maximize
    assert parse_objective("ttft_mean:critical-p1").terms[0].cls == "critical-p1"
    assert math.isnan(parse_objective("ttft_mean").value({"ttft_mean:all": math.nan}))
    c = parse_constraint("throughput_rps:sheddable >= 0.9*static-usage-limit:threshold=1.0")
    assert (c.term.key, c.op, c.factor, c.reference) == ("throughput_rps:sheddable", ">=", 0.9,
                                                         "static-usage-limit:threshold=1.0")
    c = parse_constraint("ttft_p99:critical<=0.5")
    assert c.bound == 0.5 and c.violation(0.4) < 0 < c.violation(0.6) and c.violation(math.nan) == math.inf
    for text, needle in (("ttft_foo", "unknown metric 'ttft_foo'"), ("ttft_mean tpot_mean", "cannot parse at"),
                         ("2*", "cannot parse"), ("", "give METRIC[:CLASS]")):
        with pytest.raises(ConfigError, match=None) as e:
            parse_objective(text)
        assert needle in str(e.value) and str(e.value).startswith("--objective"), str(e.value)
    for text, needle in (("throughput_rps>0.9", "write METRIC[:CLASS]>=BOUND"), ("x_rps>=1", "unknown metric"),
                         ("throughput_rps>=nan", "finite"), ("throughput_rps>=0.9*nosuch", "unknown policy 'nosuch'")):
        with pytest.raises(ConfigError) as e:
            parse_constraint(text)
        assert needle in str(e.value) and str(e.value).startswith("--constraint"), str(e.value)


@pytest.mark.parametrize("argv, needle", [
    (["--space", "bailian:lambda=0..1"], "--space 'bailian:lambda=0..1': policy 'bailian': unknown parameter"),
    (["--space", "bailian:lam=0..1", "--objective", "ttft_mean:sheddable"],
     "class 'sheddable' is invalid; scenario 'chatbot' has the classes critical, all"),
    (["--space", "bailian:lam=0..1", "--router", "jsq"], "the router is set by both --space (bailian) and --router"),
    (["--space", "bailian:lam=0..1", "--trials", "0"], "--trials=0 is invalid"),
    (["--space", "bailian:lam=0..1", "--batch", "0"], "--batch=0 is invalid"),
    (["--space", "bailian:lam=0..1", "--seeds", "0"], "--seeds=0 is invalid"),
])
def test_tune_cli_bad_input_exits_2_with_one_line(argv, needle, tmp_path, capsys):
    assert main(["tune", "--scenario", "chatbot", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_tune_without_the_extra_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` fails
    with pytest.raises(MissingExtraError, match=r"\[tune\] extra"):
        tune("chatbot", "bailian:lam=0..1", trials=1, seeds=1, load=0.5, overrides={"duration_s": 1})
    assert main(["tune", *SHORT, "--space", "bailian:lam=0..1", "--out", str(tmp_path)]) == 2
    assert 'pip install -e ".[tune]"' in capsys.readouterr().err


def test_tune_help_documents_the_syntax(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    out = capsys.readouterr().out
    for needle in ("bailian:lam=0..1", "aibrix:imbalance=1..64:log", "max:", "0.9*static-usage-limit", "best.txt"):
        assert needle in out
