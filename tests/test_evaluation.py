"""Evaluation harness, statistics, figures and the `compare` subcommand (issue 5)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import llmsched_gym
from llmsched_gym import cli, evaluate
from llmsched_gym.errors import ConfigError
from llmsched_gym.evaluation.harness import METRIC_COLUMNS, Study, make_figures, parse_policies, parse_policy
from llmsched_gym.evaluation.stats import bootstrap_ci, paired_change, summarize_rows

ROOT = Path(__file__).resolve().parents[1]
SHORT = {"duration_s": 20.0}


def _close(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


# ---------------------------------------------------------------- evaluate == run
def test_cell_equals_standalone_run(tmp_path):
    table = evaluate("codegen", ["router=jsq"], [1], qps=8, workers=1)
    path = tmp_path / "run.json"
    assert cli.main(["run", "--scenario", "codegen", "--qps", "8", "--seed", "1", "--router", "jsq",
                     "--json", str(path)]) == 0
    ref = json.loads(path.read_text())[0]  # --json writes a list, one summary per seed
    assert {r["class"] for r in table} == set(ref["classes"])
    for row in table:
        want = ref["classes"][row["class"]]
        for k in METRIC_COLUMNS:
            assert _close(row[k], want[k]), (row["class"], k, row[k], want[k])
        assert row["router"] == "jsq" and row["seed"] == 1 and row["qps"] == pytest.approx(8.0)


def test_parallel_equals_serial_and_paired_seeds():
    kw = dict(qps=[6, 12], overrides=SHORT, samples=True)
    pols = "static-usage-limit;soft-reflective-ceiling"
    serial = evaluate("codegen", pols, 2, workers=1, **kw)
    parallel = evaluate("codegen", pols, 2, workers=2, **kw)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_seconds"} for r in rows]  # noqa: E731
    assert strip(serial.rows) == strip(parallel.rows)
    # paired seeds: every policy sees the same requests (same arrivals per class)
    for seed in (0, 1):
        reqs = {r["policy"]: r["requests"] for r in serial.filter(seed=seed, point="qps=6", class_="critical")}
        assert len(set(reqs.values())) == 1
    assert set(serial.samples) == {("codegen", p, q) for p in ("qps=6", "qps=12")
                                   for q in ("static-usage-limit", "soft-reflective-ceiling")}
    csv_text = serial.to_csv()
    assert csv_text.splitlines()[0].startswith("scenario,point,")
    assert len(csv_text.splitlines()) == len(serial) + 1


def test_paired_seeds_run_as_one_batch_bit_for_bit():
    from llmsched_gym.evaluation import harness

    plan = harness._plan("codegen", "jsq;soft-reflective-ceiling", 3, qps=8, overrides=SHORT)
    tasks = plan["tasks"]
    assert harness._batches(tasks, 1) == [[0, 1, 2], [3, 4, 5]]  # the seeds of a policy together
    assert len(harness._batches(tasks, 4)) == 4  # split while there are idle workers
    for part in (tasks[:3], tasks[3:]):
        batched = harness._run_cells(part)
        alone = [harness._cell_result(t, t["scenario"].simulator(t["seed"], **t["policy"]).run()) for t in part]
        for b, a in zip(batched, alone):
            b["cell"].pop("wall_seconds"), a["cell"].pop("wall_seconds")
            assert json.dumps(b, sort_keys=True) == json.dumps(a, sort_keys=True)


# ---------------------------------------------------------------- statistics
def test_confidence_intervals_shrink_with_more_seeds():
    table = evaluate("codegen", ["llm-d"], 24, qps=8, overrides=SHORT, workers=1)

    def mean_width(metric, n):
        """Average 95% CI width of the median over disjoint groups of n seeds."""
        rows = table.filter(class_="all").rows
        widths = []
        for g in range(0, 24, n):
            stats = summarize_rows([r for r in rows if g <= r["seed"] < g + n], (metric,))
            widths.append(stats[0]["ci_high"] - stats[0]["ci_low"])
            assert stats[0]["n"] == n
        return float(np.mean(widths))

    for metric in ("ttft_mean", "e2e_p90", "throughput_rps"):
        w3, w6, w12 = mean_width(metric, 3), mean_width(metric, 6), mean_width(metric, 12)
        assert w12 < w3 and w12 < w6, (metric, w3, w6, w12)


def test_bootstrap_and_paired_change_are_deterministic():
    x = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    assert bootstrap_ci(x, seed=3) == bootstrap_ci(x, seed=3)
    med, lo, hi = bootstrap_ci(x)
    assert med == 3.0 and lo <= med <= hi
    assert bootstrap_ci([5.0]) == (5.0, 5.0, 5.0)
    assert all(math.isnan(v) for v in bootstrap_ci([]))
    b = np.array([1.0, 2.0, 4.0, 8.0])
    c, clo, chi = paired_change(0.5 * b, b)  # exact halving on every seed: no uncertainty
    assert c == pytest.approx(-0.5) and clo == pytest.approx(-0.5) and chi == pytest.approx(-0.5)
    with pytest.raises(ValueError):
        paired_change([1.0], [1.0, 2.0])


def test_summarize_rows_change_vs_baseline():
    rows = [{"scenario": "s", "point": "qps=1", "policy": p, "class": "all", "seed": s, "qps": 1.0, "rate": 1.0,
             "ttft_mean": v * (1 + s)} for p, v in (("a", 1.0), ("b", 2.0)) for s in range(4)]
    stats = summarize_rows(rows, ("ttft_mean",), baseline="a")
    b = next(r for r in stats if r["policy"] == "b")
    assert b["change"] == pytest.approx(1.0) and b["change_low"] == pytest.approx(1.0)
    a = next(r for r in stats if r["policy"] == "a")
    assert a["change"] == 0.0 and a["n"] == 4


# ---------------------------------------------------------------- policy syntax
def test_policy_syntax():
    assert parse_policy("lmetric").kwargs() == {"router": "lmetric"}
    assert parse_policy("soft-reflective-ceiling").kwargs() == {"flow_control": "soft-reflective-ceiling"}
    s = parse_policy("lmetric+soft-reflective-ceiling+admission=probabilistic")
    assert s.kwargs() == {"router": "lmetric", "flow_control": "soft-reflective-ceiling", "admission": "probabilistic"}
    s = parse_policy("router=llm-d:prefix_weight=2,queue_weight=1+fc=none+label=p2")
    assert s.label == "p2" and s.kwargs() == {"router": "llm-d:prefix_weight=2,queue_weight=1", "flow_control": None}
    assert parse_policy({"router": "jsq", "flow_control": None}).label == "jsq+flow_control=none"
    assert [p.label for p in parse_policies("jsq; lmetric ;llm-d")] == ["jsq", "lmetric", "llm-d"]
    for bad in ("nosuch", "router=nosuch", "jsq+lmetric", "colour=red", "router=none", "jsq;jsq",
                "router=soft-reflective-ceiling"):
        with pytest.raises(ConfigError):
            parse_policies(bad)


def test_results_as_a_dataframe():
    """``evaluate(..., as_frame=True)`` and ``ResultTable.to_frame()``: the same rows as a
    pandas DataFrame (the [pandas] extra), the table's meta in its attrs."""
    pytest.importorskip("pandas")
    kw = dict(qps=2, overrides={"duration_s": 2}, workers=1)
    table = evaluate("codegen", "jsq;lmetric", 1, **kw)
    frame = evaluate("codegen", "jsq;lmetric", 1, as_frame=True, **kw)
    assert list(frame.columns) == table.columns and len(frame) == len(table)
    assert frame["policy"].tolist() == table.column("policy") and frame.attrs["meta"]["cells"] == table.meta["cells"]
    np.testing.assert_array_equal(frame["ttft_mean"].to_numpy(float), np.array(table.column("ttft_mean"), float))


def test_evaluate_is_exported():
    assert llmsched_gym.evaluate is evaluate
    with pytest.raises(ConfigError):
        evaluate("codegen", "jsq", 1, qps=[1], load=[0.5])
    with pytest.raises(ConfigError):
        evaluate("nosuch-scenario", "jsq", 1)


# ---------------------------------------------------------------- figures and CLI
def test_figures_render_with_labelled_axes(tmp_path, monkeypatch):
    import llmsched_gym.evaluation.plots as plots

    figs = []
    real_close = plots.plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig=None: figs.append(fig))
    table = evaluate("codegen", "static-usage-limit;soft-reflective-ceiling", 2, qps=[8, 20], overrides=SHORT,
                     samples=True, workers=1)
    st = Study("codegen", ["static-usage-limit", "soft-reflective-ceiling"], "static-usage-limit",
               classes=("critical",))
    files = make_figures(st, table, table.stats(baseline="static-usage-limit"), tmp_path)
    assert {f.name for f in files} == {"codegen-ttft-tpot-cdf.png", "codegen-change-vs-static-usage-limit.png",
                                       "codegen-load-sweep.png"}
    for f in files:
        assert f.exists() and f.stat().st_size > 10_000, f
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(figs) == 3
    for fig in figs:
        for ax in fig.axes:
            if ax.get_legend_handles_labels()[1] or ax.lines or ax.patches:
                assert ax.get_xlabel() and ax.get_ylabel(), fig
        assert any(ax.get_legend() for ax in fig.axes) or fig.legends  # change bars: one legend below the panels
        real_close(fig)


def test_compare_cli_writes_outputs(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = cli.main(["compare", "--scenario", "codegen", "--qps", "6,14", "--policies",
                   "static-usage-limit;soft-reflective-ceiling", "--seeds", "2", "--duration", "20",
                   "--out", str(out), "--workers", "1"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "soft-reflective-ceiling" in text and str(out / "results.csv") in text
    data = json.loads((out / "results.json").read_text())
    assert len(data["rows"]) == 2 * 2 * 2 * 3  # points x policies x seeds x (critical, sheddable, all)
    assert any(s["metric"] == "ttft_p99" and s["policy"] == "soft-reflective-ceiling" for s in data["stats"])
    assert (out / "results.csv").read_text().count("\n") == len(data["rows"]) + 1
    assert len(list(out.glob("*.png"))) == 3


def test_shutting_the_sheddable_band_cannot_game_the_metrics(tmp_path, capsys):
    # A policy that never dispatches sheddable requests (they expire after the TTL) must
    # lose their SLO attainment and goodput, and must not look faster (issue 17).
    from llmsched_gym.evaluation.metrics import summarize

    sc = llmsched_gym.make_scenario("codegen", qps=16, duration_s=20.0)
    ref = summarize(sc.simulator(0, flow_control="static-usage-limit").run())
    shut = summarize(sc.simulator(0, flow_control="priority-holdback:cmin=0").run())
    r, s = ref["classes"], shut["classes"]
    assert s["sheddable"]["finished"] == 0 and s["sheddable"]["expired"] == s["sheddable"]["requests"]
    assert r["sheddable"]["slo_attainment"] > 0.9 and s["sheddable"]["slo_attainment"] == 0.0
    assert s["sheddable"]["goodput_rps"] == 0.0 and s["sheddable"]["throughput_rps"] == 0.0
    assert s["sheddable"]["ttft_censored"] == s["sheddable"]["requests"]
    for k in ("ttft_mean", "ttft_p50", "ttft_p99"):
        assert s["sheddable"][k] >= r["sheddable"][k] and s["all"][k] >= r["all"][k]
    assert s["sheddable"]["ttft_p50"] == pytest.approx(60.0)  # censored at the TTL
    # "all" uses each request's class SLO: only the critical share can still meet it
    crit_share = s["critical"]["requests"] / s["all"]["requests"]
    assert s["all"]["slo_attainment"] <= crit_share + 1e-9 < r["all"]["slo_attainment"]
    # rates are over the 20 s arrival window, not the 80 s it takes the band to expire
    assert shut["arrival_window_s"] == ref["arrival_window_s"] < 20.0 < 70.0 < shut["sim_seconds"]
    assert s["critical"]["throughput_rps"] == pytest.approx(r["critical"]["throughput_rps"], rel=0.02)

    out = tmp_path / "cmp"
    assert cli.main(["compare", "--scenario", "codegen", "--qps", "16", "--duration", "20", "--seeds", "1",
                     "--policies", "static-usage-limit;priority-holdback:cmin=0+label=shut", "--out", str(out),
                     "--workers", "1", "--no-plots"]) == 0
    assert "goodput" in capsys.readouterr().out
    rows = {(row["policy"], row["class"]): row for row in json.loads((out / "results.json").read_text())["rows"]}
    for cls in ("sheddable", "all"):
        for k in ("slo_attainment", "goodput_rps", "ttft_mean", "ttft_p99", "throughput_rps"):
            assert rows[("shut", cls)][k] == pytest.approx(s[cls][k]), (cls, k)
    assert rows[("shut", "sheddable")]["goodput_rps"] < 0.01 * rows[("static-usage-limit", "sheddable")]["goodput_rps"]


@pytest.mark.parametrize("argv", [
    ["--policies", "jsq;nosuch"],
    ["--scenario", "nosuch"],
    ["--policies", "jsq;lmetric", "--baseline", "llm-d"],
    ["--qps", "4,x"],
    ["--load", "0,0.5"],
    ["--seeds", "0"],
    ["--policies", "jsq", "--flow-control", "nosuch"],
])
def test_compare_bad_input_exit_2(argv, tmp_path, capsys):
    rc = cli.main(["compare", "--scenario", "codegen", "--out", str(tmp_path / "x"), *argv]
                  if "--scenario" not in argv else ["compare", "--out", str(tmp_path / "x"), *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert "error" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_compare_help_documents_syntax(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    text = capsys.readouterr().out
    for word in ("';'", "'+'", "router=", "flow_control", "label=", "--baseline", "--paper-qps"):
        assert word in text


# ---------------------------------------------------------------- the report
def test_results_report_and_figures_exist():
    report = ROOT / "docs" / "results.md"
    assert report.exists(), "run `python benchmarks/studies/reproduce.py`"
    text = report.read_text()
    assert "benchmarks/studies/reproduce.py" in text
    for section in ("Flow control", "Routing at 50% load", "Load sweep", "KV-cache hotspot"):
        assert section in text
    assert "agrees" in text
    figures = re.findall(r"\]\((figures/[^)]+\.png)\)", text)
    assert len(figures) >= 8
    for f in figures:
        p = report.parent / f
        assert p.exists() and p.stat().st_size > 10_000, p


def test_percentiles_equal_numpys_bit_for_bit():
    """The summaries' percentile shortcut is np.percentile's linear method exactly,
    including ties, single values and NaN."""
    from llmsched_gym.evaluation.metrics import PERCENTILES, percentiles

    rng = np.random.default_rng(3)
    for n in [*range(1, 120), 1000, 2001]:
        for x in (rng.lognormal(0, 2, n), rng.integers(0, 4, n).astype(float), rng.normal(0, 1, n)):
            assert np.array_equal(percentiles(x), np.percentile(x, PERCENTILES)), n
    x = np.array([1.0, np.nan, 2.0])
    assert np.isnan(percentiles(x)).all() and np.isnan(np.percentile(x, PERCENTILES)).all()


def test_lazy_summary_keeps_the_episode_after_its_slot_is_reused():
    """A LazySummary taken when an episode ends reads, whenever it is first read, the
    summary of that episode, although the next run in the same slot of the shared state
    has overwritten its records; and it reads like the summary's dict."""
    from llmsched_gym import SimulatorBatch, make_scenario
    from llmsched_gym.evaluation.metrics import LazySummary, summarize

    sc = make_scenario("codegen", qps=12.0)
    sims = [sc.simulator(s, router="jsq", horizon_s=20.0, batch=False) for s in (0, 1)]
    batch = SimulatorBatch(sims, slack=1.5).run()
    expected, lazy = summarize(sims[0]), LazySummary(sims[0])
    nxt, state = sc.simulator(5, router="jsq", horizon_s=20.0, batch=False), batch.state
    batch.replace(0, nxt)
    assert batch.state is state  # reloaded in place, not regrown
    batch.run()
    assert summarize(nxt) != expected  # the slot now holds another run
    assert lazy == expected and dict(lazy) == expected and lazy["classes"]["all"] == expected["classes"]["all"]
    assert len(lazy) == len(expected) and list(lazy) == list(expected)
