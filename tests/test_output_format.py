"""What a newcomer reads: tables, figures and progress totals (issue 12)."""

from __future__ import annotations

import io
import math
import re

import pytest


def test_run_table_has_no_duplicate_all_row_for_one_class(capsys):
    from llmsched_gym.cli import main

    assert main(["run", "--scenario", "codegen", "--qps", "2", "--horizon", "1"]) == 0
    two_classes = capsys.readouterr().out
    assert all(re.search(rf"│ +{c} │", two_classes) for c in ("critical", "sheddable", "all")), two_classes

    from llmsched_gym.cli.run import print_summary

    one = {"critical": _metrics(), "all": _metrics()}
    print_summary({"scenario": "x", "qps": 1.0, "seed": 0, "router": "jsq", "flow_control": None,
                    "admission": "always-admit", "classes": one, "prefix_hit_token_ratio": 0.0, "preemptions": 0,
                    "sim_seconds": 1.0, "wall_seconds": 0.1})
    out = capsys.readouterr().out
    assert re.search(r"│ +critical │", out) and not re.search(r"│ +all │", out), out


def _metrics():
    keys = ("requests", "finished", "rejected", "expired", "dropped", "in_flight")
    return {**{k: 0 for k in keys}, **{k: math.nan for k in (
        "ttft_mean", "ttft_p50", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_p99", "throughput_rps",
        "output_tokens_per_s")}}


def test_compare_table_names_policies_in_full_and_explains_columns():
    from rich.console import Console

    from llmsched_gym.cli.compare import print_study
    from llmsched_gym.evaluation.harness import Study, evaluate

    long = "static-usage-limit:threshold=0.95+label=static-usage-limit-threshold-0.95"
    table = evaluate("codegen", ["static-usage-limit", long], 1, qps=2, overrides={"duration_s": 2}, workers=1)
    buf = io.StringIO()
    print_study(Study("codegen", [], "static-usage-limit"), table, table.stats(baseline="static-usage-limit"),
                Console(file=buf, width=190))  # what `compare` uses when piped
    text = buf.getvalue()
    assert "static-usage-limit-threshold-0.95" in text  # the label in full, on one line
    assert "static-usage-li…" not in text
    assert "SLO:" in text and "rej+exp:" in text and "expired" in text


def _stats(kind: str):
    recs = []
    for i, rate in enumerate((0.3, 0.6)):
        for m in ("ttft_mean", "ttft_p99", "tpot_mean"):
            recs.append({"scenario": "s", "class": "all", "policy": "p", "point": f"{kind}={rate:g}",
                         "rate": rate, "qps": 10.0 * (i + 1), "metric": m, "median": 0.05 * (i + 1),
                         "ci_low": 0.04 * (i + 1), "ci_high": 0.06 * (i + 1), "change": 0.2, "change_low": 0.1,
                         "change_high": 0.3})
    return recs


@pytest.mark.parametrize("kind, label, x", [("load", "load (fraction", [0.3, 0.6]),
                                            ("paper_qps", "published QPS", [0.3, 0.6]),
                                            ("qps", "req/s", [10.0, 20.0])])
def test_load_sweep_axis_in_the_users_units(tmp_path, monkeypatch, kind, label, x):
    import matplotlib.pyplot as plt

    from llmsched_gym.evaluation import plots

    seen = {}
    real_close = plt.close

    def keep(fig):
        seen["fig"] = fig
        real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    plots.plot_load_sweep(_stats(kind), tmp_path / "sweep.png", scenario="s")
    ax = seen["fig"].axes[0]
    assert label in ax.get_xlabel()
    assert list(ax.lines[0].get_xdata()) == x
    ax.figure.canvas.draw()
    ticks = [t.get_text() for t in ax.get_yticklabels(which="both") if t.get_text()]
    assert ticks and not any("10^" in t or "times" in t for t in ticks), ticks
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_change_bar_labels_sit_beyond_the_error_bars(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from llmsched_gym.evaluation import plots

    seen = {}
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (seen.setdefault("fig", fig), real_close(fig)))
    stats = [dict(r, policy=pol) for r in _stats("load") for pol in ("base", "new")]
    for r in stats:
        r["metric"] = "ttft_p99"
    plots.plot_change_bars(stats, tmp_path / "bars.png", scenario="s", baseline="base", cls="all",
                           metrics=(("ttft_p99", "TTFT p99"),))
    ax = seen["fig"].axes[0]
    labels = [t for t in ax.texts if t.get_text().endswith("%")]
    assert labels
    for t in labels:  # change +20%, interval up to +30%: the label starts at or above 30
        assert t.xy[1] >= 30 - 1e-9


def test_train_steps_round_up_to_whole_rollouts():
    pytest.importorskip("stable_baselines3")
    from agents.train import rounded_timesteps

    assert rounded_timesteps("maskable-ppo", 60_000, 8, {"n_steps": 256}) == (
        61_440, "--timesteps 60,000 rounded up to 61,440: whole rollouts of 2,048 steps (n_steps 256 x 8 envs)")
    assert rounded_timesteps("ppo", 10, 8, {"n_steps": 256})[0] == 2048
    assert rounded_timesteps("sac", 30_000, 4, {}) == (30_000, "")
    assert rounded_timesteps("sac", 10, 4, {})[0] == 12


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_tables_fit_the_terminal_and_cut_no_value(width):
    """Any table at any terminal width: no line wider than the terminal, every value
    whole on one line (the parts repeat the row-naming columns)."""
    from rich.console import Console
    from rich.table import Table

    from llmsched_gym.cli.tables import print_table

    t = Table(title="a title naming what ran")
    headers = ["point", "policy"] + [f"metric number {i} (ms)" for i in range(12)]
    for h in headers:
        t.add_column(h, justify="right")
    rows = [[f"load={p}", pol] + [f"{1234.5678 * (i + 1) * p:.4f} ±{i}.{p}3 (+{i}%)" for i in range(12)]
            for p in (1, 2) for pol in ("jsq", "router=llm-d:prefix_weight=2+label=llmd-p2")]
    for r in rows:
        t.add_row(*r)
    buf = io.StringIO()
    print_table(t, Console(file=buf, width=width), keys=2)
    lines = buf.getvalue().splitlines()
    assert max(map(len, lines)) <= width
    for r in rows:
        for value in r[2:]:  # values whole on one line
            assert any(value in ln for ln in lines), (value, width)
    # row names whole too, wrapped within their column where the terminal is narrow
    policy_column = "".join(ln.split("│")[2].strip() for ln in lines if ln.count("│") >= 3)
    for r in rows:
        assert r[1] in policy_column, (r[1], width)
    assert sum(ln.count("load=1") for ln in lines) >= (2 if width >= 200 else 4)  # repeated in every part


@pytest.mark.parametrize("n_points", [1, 3, 8])
def test_change_bar_labels_clear_titles_and_each_other(tmp_path, monkeypatch, n_points):
    """At any number of load points: every label inside its panel (off the title), no two
    labels overlapping, and the legend over no panel."""
    import matplotlib.pyplot as plt

    from llmsched_gym.evaluation import plots

    seen = {}
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (seen.setdefault("fig", fig), real_close(fig)))
    stats = []
    for k in range(n_points):
        for pol in ("base", "a", "b"):
            for j, (m, _) in enumerate(plots.CHANGE_METRICS):
                c = 0.0 if j >= 2 else (-0.4 if pol == "a" else 0.3) * (k + 1) / n_points
                stats.append({"scenario": "s", "class": "critical", "policy": pol, "point": f"load={0.1 * (k + 1):g}",
                              "metric": m, "change": c, "change_low": c - 0.1, "change_high": c + 0.1})
    plots.plot_change_bars(stats, tmp_path / "bars.png", scenario="s", baseline="base")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = seen["fig"]
    FigureCanvasAgg(fig).draw()
    r = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(r)
    for ax in fig.axes:
        box = ax.get_window_extent(r)
        assert not legend.overlaps(box)
        labels = [t.get_window_extent(r) for t in ax.texts if t.get_text().endswith("%")]
        assert len(labels) == n_points * len(plots.CHANGE_METRICS)
        for b in labels:
            assert box.y0 <= b.y0 and b.y1 <= box.y1, "a label outside its panel (on the title)"
        for i, b in enumerate(labels):
            assert not any(b.overlaps(o) for o in labels[i + 1:]), "two labels overlap"


def test_headers_name_what_ran(tmp_path, capsys):
    """The rate as given (--paper-qps), every policy with its parameters (an
    --epp-config's weights, a spec's), and in compare the roles filled in for every entry."""
    from llmsched_gym.cli import main

    assert main(["run", "--scenario", "codegen", "--paper-qps", "16", "--horizon", "2",
                 "--router", "llm-d:prefix_weight=2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "paper-qps=16 (" in out and "router=llm-d:prefix_weight=2" in out
    epp = tmp_path / "epp.yaml"
    assert main(["policies", "--to-epp-config", "llm-d:prefix_weight=2+soft-reflective-ceiling", "--out", str(epp)]) == 0
    assert main(["run", "--scenario", "codegen", "--qps", "2", "--horizon", "2", "--epp-config", str(epp)]) == 0
    out = "".join(capsys.readouterr().out.split())  # the header may wrap anywhere
    assert "prefix_weight=2.0" in out and "flow-control=soft-reflective-ceiling" in out
    assert main(["compare", "--scenario", "pd-longprompt", "--qps", "2", "--duration", "3", "--seeds", "1",
                 "--no-plots", "--policies", "pd-always;pd-llmd:threshold=4000+label=llmd4k", "--router", "jsq",
                 "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "llmd4k = router=jsq, pd=pd-llmd:threshold=4000" in out and "pd-always = router=jsq, pd=pd-always" in out
