"""Routing-v0's ``hint=<router>`` observation: one-hot of that compiled router's choice in
the state the agent's own decisions produced. Always following it reproduces the router's
compiled run request for request (single env, native vector env, and a Python router that
rebuilds the observation as ``agent:PATH`` does)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym as g
from agents.policy import ObservationBuilder
from baselines.routing.simple import JSQRouter
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import RoutingPolicy, register_policy

ENV = "llmsched/Routing-v0"
KW = dict(scenario="chatbot", qps=60, horizon=4.0)  # LMetric's detector flags classes here
FIELDS = ("instance", "dispatch_t", "first_token_t", "finish_t", "outcome")
#: stateful, randomized and book-keeping routers
HINTED = ["lmetric", "round-robin", "preble", "jsq", "llm-d", "least-tokens", "bailian-sampling"]


def _compiled_run(env, router, workload_seed):
    sc = env.unwrapped.setup.scenario if hasattr(env, "unwrapped") else env.setup.scenario
    return sc.simulator(workload_seed, router=router, flow_control=None, admission="always-admit",
                        horizon_s=KW["horizon"]).run()


def _assert_same(table, heuristic, rows=slice(None)):
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(table, f)[rows], getattr(heuristic.table, f)[rows], err_msg=f)


@pytest.mark.parametrize("router", HINTED)
def test_following_the_hint_reproduces_the_router(router):
    env = gym.make(ENV, hint=router, **KW)
    obs, info = env.reset(seed=0, options={"workload_seed": 11})
    steps, over = 0, False
    while not over:
        h = obs["hint"]
        assert h.shape == (env.unwrapped.setup.num_instances,) and h.sum() == 1.0 and set(np.unique(h)) <= {0.0, 1.0}
        obs, _, terminated, truncated, info = env.step(int(h.argmax()))
        steps += 1
        over = terminated or truncated
    assert steps > 200
    assert not obs["hint"].any()  # no request pending at the end
    _assert_same(env.unwrapped.simulator.table, _compiled_run(env, router, 11))


@pytest.mark.parametrize("router", ["lmetric", "jsq", "preble"])
def test_vector_env_following_the_hint_reproduces_the_router(router):
    venv = gym.make_vec(ENV, num_envs=2, vectorization_mode="vector_entry_point", hint=router, **KW)
    obs, _ = venv.reset(seed=0, options={"workload_seed": [11, 12]})
    v = venv.unwrapped
    assert v._compiled  # the fused compiled step and observation pass
    sims, ended = list(v.simulators), {}
    start_next = v._next_episode

    def keep_table(i):  # the slot is reloaded with the next episode (autoreset)
        ended[i] = SimpleNamespace(**{f: getattr(sims[i].table, f).copy() for f in FIELDS})
        start_next(i)

    v._next_episode = keep_table
    while len(ended) < 2:
        obs, *_ = venv.step(obs["hint"].argmax(axis=1))
    for i, ws in enumerate((11, 12)):
        _assert_same(ended[i], _compiled_run(v, router, ws))


def test_hint_does_not_change_the_run_and_is_opt_in():
    """The same actions with and without the hint give the same run (the hint draws from its
    own generator); without ``hint`` the observation has no ``hint`` key."""
    plain = gym.make(ENV, **KW)
    hinted = gym.make(ENV, hint="jsq", **KW)
    assert "hint" not in plain.observation_space.spaces
    I = hinted.unwrapped.setup.num_instances
    assert hinted.observation_space["hint"] == gym.spaces.Box(0.0, 1.0, (I,), np.float32)
    rng = np.random.default_rng(0)
    o1, _ = plain.reset(seed=1)
    o2, _ = hinted.reset(seed=1)
    over = False
    while not over:
        a = int(rng.integers(I))
        o1, r1, t1, u1, _ = plain.step(a)
        o2, r2, t2, u2, _ = hinted.step(a)
        assert r1 == r2
        for k in o1:
            np.testing.assert_array_equal(o1[k], o2[k])
        over = t1 or u1
    _assert_same(hinted.unwrapped.simulator.table, plain.unwrapped.simulator)


def test_check_env_passes_with_a_hint():
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = gym.make(ENV, hint="lmetric", **{**KW, "horizon": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check(env.unwrapped, skip_render_check=True)
        sb3_check(env.unwrapped, warn=False)


class _PythonJSQ(JSQRouter):
    """JSQ as a subclass: it runs in Python."""


def test_bad_hints_are_clear_errors():
    with pytest.raises(ConfigError, match="unknown policy 'nope' for role 'routing'"):
        gym.make(ENV, hint="nope", **KW)
    register_policy("test-python-jsq", _PythonJSQ, overwrite=True)  # runs in Python: no compiled form
    with pytest.raises(ConfigError, match="hint='test-python-jsq' is a Python router; .* one of aibrix, "):
        gym.make(ENV, hint="test-python-jsq", **KW)
    with pytest.raises(ConfigError, match="applies to llmsched/Routing-v0 only"):
        gym.make("llmsched/FlowControl-v0", hint="lmetric", scenario="codegen", qps=10)
    with pytest.raises(ConfigError, match="routes itself"):
        g.make_scenario("codegen", qps=10).simulator(0, router="jsq", hint="lmetric")


class _FollowHint(RoutingPolicy):
    """A Python router that builds Routing-v0's observation as ``agent:PATH`` does and
    follows its hint key."""

    name = "follow-hint"

    def __init__(self, hint: str):
        self.hint = hint
        self.builder = None

    def route(self, request, view):
        if self.builder is None:
            self.builder = ObservationBuilder("routing", view, hint=self.hint)
        obs = self.builder.build(view, request)
        assert obs["hint"][0].sum() == 1.0
        return int(obs["hint"][0].argmax())


@pytest.mark.parametrize("router", ["lmetric", "preble", "jsq"])
def test_agent_observation_rebuild_follows_the_same_hint(router):
    """In ``compare`` an agent trained with ``hint`` is a Python router: its simulator keeps the
    hint router's books and offers its choice (``view.suggest``); followed, it is the router."""
    sc = g.make_scenario("chatbot", qps=KW["qps"])
    sc.horizon_s = KW["horizon"]
    follow = sc.simulator(11, router=_FollowHint(router), flow_control=None, admission="always-admit").run()
    heuristic = sc.simulator(11, router=router, flow_control=None, admission="always-admit").run()
    _assert_same(follow.table, heuristic)
