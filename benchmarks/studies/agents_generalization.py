"""Generalization of the Routing agents to loads and scenarios not seen in training.

    python benchmarks/studies/agents_generalization.py     # -> results/agents/generalization.json + a table

* the 5 chatbot-trained agents (load 0.5) on chatbot at loads 0.3 and 0.7;
* the curriculum agent (``--scenario chatbot,agent --load 0.3:0.7:3``, results/agents/routing-mix-s1)
  on coder at load 0.5 and on chatbot/agent at load 0.5.
Evaluation seeds 100-102 (loads) / 100-104 (scenarios), 60 s windows, IQM with 95% stratified bootstrap CI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_agents as T  # noqa: E402

from llmsched_gym.evaluation.harness import evaluate  # noqa: E402


def table(rows, scenario, point_rate, labels, groups, seeds, metric="ttft_mean"):
    out = []
    for name, members in groups.items():
        m = np.stack([np.array([next(r[metric] for r in rows if r["scenario"] == scenario and r["rate"] == point_rate
                                     and r["policy"] == p and r["seed"] == s and r["class"] == "all")
                                for s in seeds]) for p in members])
        v, lo, hi = T.stratified_bootstrap(m)
        out.append(f"| {scenario} | {point_rate:g} | {name} | {v * 1e3:.1f} [{lo * 1e3:.1f}, {hi * 1e3:.1f}] |")
    return out


def main() -> int:
    runs = T.OUT
    agents = [f"router=agent:{runs}/routing-chatbot-s{s}+label=agent-s{s}" for s in range(1, 6)]
    mix = f"router=agent:{runs}/routing-mix-s1+label=mix-s1"
    t1 = evaluate("chatbot", ["jsq", "lmetric", *agents, mix], [100, 101, 102], load=[0.3, 0.7],
                  overrides={"duration_s": 60.0}, workers=2)
    t2 = evaluate(["agent", "coder"], ["jsq", "lmetric", mix], [100, 101, 102, 103, 104], load=0.5,
                  overrides={"duration_s": 60.0}, workers=2)
    rows = [r for r in t1.rows + t2.rows if r["class"] == "all"]
    (T.OUT / "generalization.json").write_text(json.dumps(rows, indent=1, default=float))
    lines = ["| scenario | load | policy | TTFT mean, ms (IQM [95% CI]) |", "|---|---|---|---|"]
    groups = {"jsq": ["jsq"], "lmetric": ["lmetric"], "agent (chatbot@0.5, 5 seeds)": [f"agent-s{s}" for s in range(1, 6)],
              "curriculum agent (chatbot+agent@0.3-0.7, 1 seed)": ["mix-s1"]}
    for load in (0.3, 0.7):
        lines += table(rows, "chatbot", load, None, groups, [100, 101, 102])
    g2 = {"jsq": ["jsq"], "lmetric": ["lmetric"], "curriculum agent (chatbot+agent@0.3-0.7, 1 seed)": ["mix-s1"]}
    for sc in ("agent", "coder"):
        lines += table(rows, sc, 0.5, None, g2, [100, 101, 102, 103, 104])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
