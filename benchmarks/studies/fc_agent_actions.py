"""What a residual FlowControl agent does: the ramp and period scale it sets (docs/agents.md).

    python benchmarks/studies/fc_agent_actions.py [--agent agents/pretrained/fc-residual] [--seed 100] [--paper-qps 16]

Runs the agent (``fc=agent:PATH``, llm-d routing) on one codegen episode and summarizes the
parameters it applied at each decision (``AgentSoftReflective.history``): their median and
5-95% range, overall and by the cluster's saturation when decided, and how often they
differ from the published soft-reflective ceiling (ramp 1, period scale 1).
"""

from __future__ import annotations

import argparse

import numpy as np

from agents.policy import AgentSoftReflective
from llmsched_gym.scenarios import make_scenario


class RecordingSaturation(AgentSoftReflective):
    """The agent, also recording the cluster's saturation at each of its decisions."""

    def reset(self, num_instances: int, rng) -> None:
        super().reset(num_instances, rng)
        self.saturation: list[float] = []

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        n = len(self.history)
        out = super().ceilings(saturation, num_bands)
        if len(self.history) > n:
            self.saturation.append(float(saturation))
        return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent", default="agents/pretrained/fc-residual")
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--paper-qps", type=float, default=16.0)
    a = p.parse_args(argv)
    pol = RecordingSaturation(a.agent)
    sim = make_scenario("codegen", paper_qps=a.paper_qps).simulator(a.seed, router="llm-d", flow_control=pol)
    sim.run()
    h = np.array([(r, k) for _, r, k in pol.history])
    s = np.array(pol.saturation)
    print(f"{a.agent} on codegen paper_qps {a.paper_qps:g}, workload seed {a.seed}: {len(h)} decisions")

    def line(label, rows):
        if not len(rows):
            return
        q = np.percentile(rows, [5, 50, 95], axis=0)
        print(f"| {label} | {len(rows)} | {q[1, 0]:.2f} ({q[0, 0]:.2f}-{q[2, 0]:.2f}) "
              f"| {q[1, 1]:.2f} ({q[0, 1]:.2f}-{q[2, 1]:.2f}) |")

    print("| decisions | n | ramp, median (5-95%) | period scale, median (5-95%) |\n|---|---:|---|---|")
    line("all", h)
    for lo, hi in ((0.0, 0.5), (0.5, 0.8), (0.8, 1.0), (1.0, np.inf)):
        line(f"saturation {lo:g}-{hi:g}", h[(s >= lo) & (s < hi)])
    moved = np.abs(h - 1.0) > 0.05
    print(f"ramp off 1 by > 0.05 in {moved[:, 0].mean():.0%} of decisions, period scale in {moved[:, 1].mean():.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
