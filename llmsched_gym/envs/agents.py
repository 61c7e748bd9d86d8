"""Drive an environment with a baseline policy, through the same loop as an agent."""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..gateway.policy import Policy, make_policy
from ..gateway.view import RequestInfo
from .core import ENV_NAMES

_ROLES = {"routing": "routing", "flow_control": "usage-limit", "admission": "admission"}


class BaselineAgent:
    """A registered baseline acting in a single environment: ``action = agent.act(obs, info)``.

    Args:
        policy: a policy name (``"jsq"``, ``"llm-d:prefix_weight=2"``, ...) or instance,
            of the environment's role (routing / usage-limit / admission).
        env: the environment (wrappers are looked through).

    The agent reads the simulator's gateway view (``env.unwrapped.simulator``), not the
    normalized observation, so it makes exactly the baseline's decision:

    * Routing: ``policy.route(request, view)``; the policy is also reset at every
      episode start and receives the simulator's ``on_dispatch``/``on_finish`` hooks, so
      driving Routing-v0 with a baseline reproduces ``llmsched-gym run --router`` with
      that baseline for the same scenario and ``options={"workload_seed": seed}``.
    * FlowControl: ``policy.ceilings(saturation, B)`` sampled once per control interval
      (the simulator's own flow control evaluates it every dispatch cycle).
    * Admission: for each sheddable band, rejection probability 1 if the policy would
      reject a request of that band now, else 0.
    * Gateway: ``policy="centre"`` (the only choice) takes the centre action every
      interval, which is the environment's base combination of policies (its ``router``,
      ``flow_control`` and ``admission`` keywords; see :class:`~.gateway.GatewayEnv`).

    Create the agent before ``env.reset()`` (it attaches to every later episode).
    """

    def __init__(self, policy: "str | Policy", env):
        self.env = env.unwrapped
        self.kind = self.env.kind
        if self.kind not in _ROLES:  # a joint environment: its centre action is the baseline
            if policy != "centre":
                raise ConfigError(f"BaselineAgent on llmsched/{ENV_NAMES.get(self.kind, self.kind)}-v0 takes "
                                  f"policy='centre' (the environment's base combination), got {policy!r}")
            self.policy = None
            return
        self.policy = make_policy(policy, _ROLES[self.kind])
        driver = self.env.driver
        driver.observer = self.policy
        self.env._vec.refresh_observers()
        if driver.sim is not None:
            driver.attach_observer()

    def act(self, obs=None, info=None):
        setup = self.env.setup
        if self.policy is None:
            return setup.centre.copy()
        sim = self.env.simulator
        view = sim.current_view()
        if self.kind == "routing":
            return int(self.policy.route(sim.pending_info, view))
        if self.kind == "flow_control":
            c = np.asarray(self.policy.ceilings(view.saturation, len(setup.band_priorities)), float)
            return np.clip(c, 0.0, 1.0).astype(np.float32)
        out = np.zeros(len(setup.sheddable), np.float32)
        for k, b in enumerate(setup.sheddable):
            probe = RequestInfo(id=-1, arrival_s=sim.now, input_tokens=0, output_tokens=0,
                                expected_output_tokens=sim.expected_output, priority=setup.band_priorities[b],
                                hash_ids=np.zeros(0, np.int64), hash_block_tokens=0)
            out[k] = 0.0 if self.policy.admit(probe, view) else 1.0
        return out

    __call__ = act


def run_episode(env, agent, *, seed: int | None = None, options: dict | None = None):
    """Run one episode of ``agent`` (``agent.act(obs, info)``); returns (return, steps, last info)."""
    obs, info = env.reset(seed=seed, options=options)
    total, steps = 0.0, 0
    while True:
        obs, r, term, trunc, info = env.step(agent.act(obs, info))
        total += r
        steps += 1
        if term or trunc:
            return total, steps, info
