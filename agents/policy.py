"""Trained agents as gateway policies: ``make_policy("agent:PATH")``.

``PATH`` is a training output directory (``model.zip``, ``vecnormalize.pkl``,
``agent.json``; see :mod:`agents.train`), its ``best/`` directory, or any model zip
(``model.zip``, ``best/best_model.zip``, a checkpoint ``checkpoints/model_N_steps.zip``),
each with the VecNormalize statistics saved with it (:func:`agent_files`). The model acts through
the same policy interface as every baseline, so ``llmsched-gym compare --policies
'jsq;lmetric;agent:PATH'`` evaluates it with the harness, on the same paired seeds:

* a Routing model (``llmsched/Routing-v0``) becomes a :class:`AgentRouter`
  (``RoutingPolicy``), usable as ``agent:PATH`` or ``router=agent:PATH``;
* a FlowControl model becomes a :class:`AgentUsageLimit` (``UsageLimitPolicy``), or,
  trained with ``action="soft-reflective"`` (``--policy residual``), a
  :class:`AgentSoftReflective` (the soft-reflective ceiling with the model's ramp and
  period scale); the registry lists ``agent`` as a routing policy, so name the role:
  ``fc=agent:PATH`` (or ``flow_control=agent:PATH``);
* a Gateway-v0 model becomes a :class:`AgentGateway` (``GatewayController``), usable as
  ``gateway=agent:PATH`` (or ``agent:PATH``) and alone: it decides admission, flow
  control and routing together, in its own environment, on the cell's scenario and seed.

Observation: the policy builds *exactly* the environment's observation by running the
environment's own code (``llmsched_gym.envs.core``: ``Driver.write_obs``, the driver's
``_extra_obs`` and ``normalize_obs``) on a stand-in for the simulator that answers
from the :class:`~llmsched_gym.gateway.view.RouterView` the policy is handed (and the request
being routed), then applies the saved ``VecNormalize`` statistics. Actions are
deterministic (the mode of the policy distribution).

Routing models with the per-instance scorer (:mod:`agents.networks`) route clusters of
any size; flat-MLP models need the training cluster's instance count.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from agents.es.agent import EsAgent, is_es_agent
from baselines.flow_control import SoftReflectiveCeiling
from llmsched_gym.envs.core import (
    COMMON_KEYS,
    DRIVERS,
    HINT_KEY,
    INTERVAL_KEYS,
    ROUTING_KEYS,
    Driver,
    Setup,
    normalize_obs,
    raw_buffers,
    soft_reflective_params,
)
from llmsched_gym.envs.gateway import GatewayEnv
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.policy import GatewayController, RoutingPolicy, UsageLimitPolicy, register_policy
from llmsched_gym.validation import require_extra

_CACHE: dict = {}


# ====================================================================== loading
_CHECKPOINT = re.compile(r"^(?P<prefix>.*)_(?P<steps>\d+)_steps\.zip$")


def agent_files(path: "str | Path") -> tuple[Path, "Path | None", Path]:
    """``(model zip, VecNormalize statistics or None, agent.json)`` of an ``agent:PATH``.

    ``PATH`` may be

    * a training output directory (``model.zip``, ``vecnormalize.pkl``, ``agent.json``);
    * its ``best/`` directory (``best_model.zip`` and ``vecnormalize.pkl``, the statistics
      saved with that model);
    * any model zip: ``OUT/model.zip``, ``OUT/best/best_model.zip`` or a checkpoint
      ``OUT/checkpoints/model_N_steps.zip`` (statistics ``model_vecnormalize_N_steps.pkl``
      beside it).

    ``agent.json`` is looked up next to the model, then in the directory above. The
    statistics are None when none is saved beside the model; whether that is an error
    depends on the run's ``normalize`` settings (:class:`LoadedAgent`).
    """
    p = Path(path)
    if p.is_dir():
        cands = [p / "model.zip", p / "best_model.zip"]
        model_file = next((c for c in cands if c.is_file()), None)
        if model_file is None:
            ckpts = sorted((c for c in p.glob("checkpoints/*_steps.zip") if _CHECKPOINT.match(c.name)),
                           key=lambda c: int(_CHECKPOINT.match(c.name)["steps"]))
            hint = (f"; it has checkpoints (e.g. agent:{ckpts[-1]}) but no final model: the run did not finish"
                    if ckpts else "")
            raise ConfigError(f"agent:{path}: no model file in this directory (model.zip or best_model.zip){hint}")
    else:
        if not p.exists():
            raise ConfigError(f"agent:{path}: no model file or directory there (expected a training output "
                              f"directory, its best/ directory or a model .zip)")
        if p.suffix != ".zip":
            raise ConfigError(f"agent:{path}: not a model; give a training output directory, OUT/best or a "
                              f"model .zip (model.zip, best_model.zip, checkpoints/model_N_steps.zip)")
        model_file = p
    d = model_file.parent
    vn_file = _expected_stats(model_file)
    meta_file = d / "agent.json"
    if not meta_file.is_file():
        meta_file = d.parent / "agent.json"  # best/ and checkpoints/
    if not meta_file.is_file():
        raise ConfigError(f"agent:{path}: no agent.json next to the model or in the directory above "
                          f"(written by llmsched-gym train)")
    return model_file, (vn_file if vn_file.is_file() else None), meta_file


class LoadedAgent:
    """A saved model, its VecNormalize statistics and its training metadata (see
    :func:`agent_files` for what ``path`` may be)."""

    def __init__(self, path: "str | Path"):
        import torch

        from agents.train import _algo_class

        model_file, vn_file, meta_file = agent_files(path)
        self.model_file, self.vecnormalize_file = model_file, vn_file
        self.meta = json.loads(meta_file.read_text())
        self.env_id = self.meta["env_id"]
        self.kind = {"llmsched/Routing-v0": "routing", "llmsched/FlowControl-v0": "flow_control",
                     "llmsched/Admission-v0": "admission", "llmsched/Gateway-v0": "gateway"}[self.env_id]
        norm_obs = bool((self.meta.get("normalize") or {}).get("norm_obs", True))
        if vn_file is None and norm_obs:
            raise ConfigError(f"agent:{path}: the model was trained on normalized observations but its "
                              f"VecNormalize statistics are missing (expected "
                              f"{_expected_stats(model_file)})")
        if torch.get_num_threads() > 1:
            torch.set_num_threads(1)  # tiny networks: one thread is fastest (and workers share cores)
        import agents.networks  # noqa: F401  (custom policy classes referenced by the saved model)

        self.model = _algo_class(self.meta["algo"]).load(str(model_file), device="cpu")
        self.vecnorm = None
        if vn_file is not None:
            with open(vn_file, "rb") as f:
                self.vecnorm = pickle.load(f)
            self.vecnorm.training = False
        self.obs_exclude = tuple(((self.meta.get("env_kwargs") or {}).get("observation") or {}).get("exclude", ()))
        self.control_interval = float((self.meta.get("env_kwargs") or {}).get("control_interval", 0.1))
        #: FlowControl: what the action sets ("ceilings" or "soft-reflective", the env's ``action``)
        self.flow_action = str((self.meta.get("env_kwargs") or {}).get("action", "ceilings"))

    def check_instances(self, num_instances: int) -> None:
        """A clear error, before a simulation starts, where a FlowControl agent meets a
        cluster of another size: its observation is per instance."""
        space = self.model.observation_space
        for k in COMMON_KEYS:
            if k.size == "I" and k.name in space.spaces and space[k.name].shape[0] != num_instances:
                raise ConfigError(
                    f"agent:{self.model_file.parent}: this {self.env_id} model was trained on "
                    f"{space[k.name].shape[0]} instances (observation {k.name!r} has one entry per instance); the "
                    f"cluster has {num_instances}. Train one for this cluster size (llmsched-gym train --instances "
                    f"{num_instances})")

    def normalize(self, obs: dict) -> dict:
        if self.vecnorm is not None and self.vecnorm.norm_obs:
            obs = self.vecnorm.normalize_obs(obs)
        return obs


def _expected_stats(model_file: Path) -> Path:
    m = _CHECKPOINT.match(model_file.name)
    name = f"{m['prefix']}_vecnormalize_{m['steps']}_steps.pkl" if m else "vecnormalize.pkl"
    return model_file.parent / name


def load_agent(path: "str | Path") -> "LoadedAgent | EsAgent":
    """Load (and cache per process) the agent saved at ``path`` (an SB3 model, or a
    CMA-ES residual: :class:`agents.es.agent.EsAgent`)."""
    if is_es_agent(path):  # a CMA-ES residual (llmsched-gym train --algo cmaes): numpy only
        meta = Path(path).resolve() / "agent.json"
        key = (str(meta), meta.stat().st_mtime)
        if key not in _CACHE:
            _CACHE[key] = EsAgent(path)
        return _CACHE[key]
    require_extra(f"agent:{path}")  # torch and stable-baselines3: the [rl] extra
    model_file, vn_file, _ = agent_files(Path(path).resolve())
    key = (str(model_file), model_file.stat().st_mtime, vn_file and (str(vn_file), vn_file.stat().st_mtime))
    if key not in _CACHE:
        _CACHE[key] = LoadedAgent(path)
    return _CACHE[key]


# ====================================================================== the env's observation from a view
class _ViewSim:
    """Stand-in for the simulator, answering the driver's observation code from a view."""

    def __init__(self, view, request=None, arrivals=None):
        self.view = view
        self.pending_info = request
        self.pending_route = None if request is None else request.id
        self.now = view.now
        self._arrivals = arrivals

    def current_view(self):
        return self.view

    def suggest(self, r: int) -> int:
        """The hint router's choice for the request being routed (the simulator's, via the view)."""
        if self.view.suggest is None:
            raise ConfigError("an agent trained with Routing-v0's hint routes only as a simulator's router, which "
                              "keeps the hint router for it (Simulator(hint=...))")
        return self.view.suggest(self.pending_info)

    def prefix_hit_tokens(self, request):
        return self.view.prefix_hit_tokens(request)


def _setup_for(kind: str, view, exclude=(), hint: str | None = None):
    """An environment ``Setup`` for the cluster the view describes (any size); ``hint``: the
    Routing env's ``hint`` router (its key observed)."""
    extra = ROUTING_KEYS + ([HINT_KEY] if hint is not None else []) if kind == "routing" else INTERVAL_KEYS
    keys = [k for k in COMMON_KEYS + extra if k.name not in set(exclude)]
    bands = tuple(view.band_priorities) or (0,)
    return Setup(kind=kind, scenario=SimpleNamespace(cluster=SimpleNamespace(engine=view.engine)), horizon=None,
                 reward="ttft", reward_scale=1.0, unserved_penalty_s=0.0, priority_weights={},
                 control_interval=0.1, router=None, flow_control=None, admission=None, normalize=True,
                 obs_keys=keys, num_instances=int(view.num_instances), band_priorities=bands,
                 sheddable=tuple(b for b, p in enumerate(bands) if p < 0))


class ObservationBuilder:
    """Builds the environment's normalized observation (batch of one) from a RouterView,
    with the environment's driver code (see the module docstring)."""

    def __init__(self, kind: str, view, exclude=(), hint: str | None = None):
        self.kind = kind
        self.setup = _setup_for(kind, view, exclude, hint)
        drv = DRIVERS[kind].__new__(DRIVERS[kind])

        Driver.__init__(drv, self.setup)
        drv._sim_bands = np.arange(len(self.setup.band_priorities), dtype=np.int64)
        drv._last_arrivals = np.zeros(len(self.setup.band_priorities))
        self.driver = drv
        self.raw = raw_buffers(self.setup, 1)
        self.key = (int(view.num_instances), tuple(view.band_priorities))

    def build(self, view, request=None, band_arrival_rate=None) -> dict:
        d = self.driver
        d.sim = _ViewSim(view, request)
        if band_arrival_rate is not None:
            d._last_arrivals = band_arrival_rate
        d.write_obs(self.raw, 0)
        d.sim = None
        return normalize_obs(self.setup, self.raw)


# ====================================================================== policies
def _model_of_kind(path: str, agent: "LoadedAgent | EsAgent | None", kind: str,
                   what: str) -> "LoadedAgent | EsAgent":
    """``agent`` (or the model at ``path``), which must be a model of environment ``kind``."""
    agent = agent or load_agent(path)
    if agent.kind != kind:
        raise ConfigError(f"agent:{path} is a {agent.env_id} model, not a {what} model")
    return agent


class AgentRouter(RoutingPolicy):
    """A trained Routing-v0 model as a routing policy (deterministic)."""

    name = "agent"
    description = "a trained RL agent: agent:PATH (a llmsched-gym train output directory or model.zip)"

    def __init__(self, path: str = "", agent: "LoadedAgent | EsAgent | None" = None):
        self.agent = _model_of_kind(path, agent, "routing", "routing")
        self.path = path
        #: trained with Routing-v0's ``hint``: the simulator keeps that router's books for it
        #: and its choice is observed, as in the environment (``view.suggest``)
        self.hint = (self.agent.meta.get("env_kwargs") or {}).get("hint")
        self._builder = None
        # a CMA-ES residual: numpy float64 logits
        self._logits = getattr(self.agent, "route_logits", None)
        ext = None if self._logits else self.agent.model.policy.features_extractor
        # float64 logits where the policy has them (the residual LMetric scorer: exact ties)
        self._scorer = getattr(ext, "decision_scores", None) or getattr(ext, "scores", None)

    def reset(self, num_instances: int, rng) -> None:
        self._builder = None

    def observation(self, request, view) -> dict:
        """The environment's observation (a batch of one) for routing ``request`` now."""
        b = self._builder
        if b is None or b.key != (int(view.num_instances), tuple(view.band_priorities)):
            b = self._builder = ObservationBuilder("routing", view, self.agent.obs_exclude, self.hint)
        return b.build(view, request)

    def route(self, request, view) -> int:
        obs = self.agent.normalize(self.observation(request, view))
        if self._logits is not None:
            return int(self._logits(obs)[0].argmax())
        if self._scorer is not None:
            # The per-instance scorer's logits, for a cluster of any size (SB3's predict
            # insists on the training observation shape).
            import torch as th

            with th.no_grad():
                s = self._scorer({k: th.as_tensor(v, dtype=th.float32) for k, v in obs.items()})
            return int(s[0].argmax())
        action, _ = self.agent.model.predict(obs, deterministic=True)
        return int(np.asarray(action).reshape(-1)[0])


def _interval_action(policy, view, band_arrival_rate) -> np.ndarray:
    """The deterministic action of a FlowControl agent adapter (``policy._builder``,
    ``policy.agent``) for this view: the env's observation, normalized as in training."""
    b = policy._builder
    if b is None or b.key != (int(view.num_instances), tuple(view.band_priorities)):
        b = policy._builder = ObservationBuilder("flow_control", view, policy.agent.obs_exclude)
    obs = policy.agent.normalize(b.build(view, band_arrival_rate=band_arrival_rate))
    action, _ = policy.agent.model.predict(obs, deterministic=True)
    return np.asarray(action).reshape(-1)


class AgentUsageLimit(UsageLimitPolicy):
    """A trained FlowControl-v0 model as a usage-limit (flow-control) policy.

    The environment decides once per control interval (0.1 s by default); this policy
    recomputes its ceilings at the first dispatch cycle at or after each interval
    boundary and holds them in between. ``band_arrival_rate`` is the arrivals per band in
    the last control interval, as in the environment. It reads the gateway's live view,
    which the simulator binds (``Policy.bind``) and refreshes before every dispatch cycle.
    """

    name = "agent"
    description = "a trained FlowControl agent: fc=agent:PATH"

    def __init__(self, path: str = "", agent: "LoadedAgent | EsAgent | None" = None):
        self.agent = _model_of_kind(path, agent, "flow_control", "flow-control")
        self.path = path
        self.reset(0, None)

    def reset(self, num_instances: int, rng) -> None:
        if num_instances:
            self.agent.check_instances(num_instances)
        self._builder = None
        self._next_t = -np.inf
        self._values = None
        self._view = None

    def bind(self, view) -> None:
        self._view = view

    def stationary(self, saturation: float) -> bool:
        return False  # ceilings change at control-interval boundaries, not only with saturation

    def decide(self, view, band_arrival_rate) -> np.ndarray:
        """Ceilings per band (band 0 highest) for this view (the env's action -> ceilings)."""
        a = np.clip(np.asarray(_interval_action(self, view, band_arrival_rate), float), 0.0, 1.0)
        return np.minimum.accumulate(a)

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        view = self._view
        if view is None:
            raise ConfigError("agent usage-limit policy: not bound to a simulator's view (Policy.bind)")
        t = view.now
        if self._values is None or t >= self._next_t:
            ci = self.agent.control_interval
            self._values = self.decide(view, view.arrivals_since(t - ci) / ci)
            k = np.floor(t / ci + 1e-9)
            self._next_t = (k + 1) * ci
        return self._values


class AgentSoftReflective(UsageLimitPolicy):
    """A FlowControl-v0 model trained with ``action="soft-reflective"`` (``--policy
    residual``) as a usage-limit policy: the soft-reflective ceiling whose ramp and period
    scale the model sets.

    An internal :class:`baselines.flow_control.SoftReflectiveCeiling` runs every dispatch
    cycle (its ``ceilings`` and ``stationary``: the same duty-cycle mechanism, one tick
    counter kept across parameter changes, as in the environment's engine). Once per
    control interval - at the first dispatch cycle at or after each interval boundary,
    like :class:`AgentUsageLimit` - the model's deterministic action is computed from the
    environment's observation and mapped to ``(ramp, period_scale)`` with the
    environment's own :func:`llmsched_gym.envs.core.soft_reflective_params`. The
    parameters apply from that cycle on. An untrained ``--policy residual`` model acts
    (0.5, 0.5), i.e. ramp 1 and period scale 1, and this policy then decides exactly as
    ``soft-reflective-ceiling`` (tests/test_agents_residual_fc.py).
    """

    name = "agent"
    description = "a trained FlowControl agent (soft-reflective action): fc=agent:PATH"

    def __init__(self, path: str = "", agent: "LoadedAgent | EsAgent | None" = None):
        self.agent = agent or load_agent(path)
        if self.agent.kind != "flow_control" or self.agent.flow_action != "soft-reflective":
            raise ConfigError(f"agent:{path} is not a FlowControl model with action='soft-reflective'")
        self.path = path
        self.history: list = []  # (time, ramp, period_scale) of every decision (diagnostics)
        self.reset(0, None)

    def reset(self, num_instances: int, rng) -> None:
        if num_instances:
            self.agent.check_instances(num_instances)
        self._builder = None
        self._next_t = -np.inf
        self._view = None
        self.inner = SoftReflectiveCeiling()
        self.history = []

    def bind(self, view) -> None:
        self._view = view

    def action(self, view, band_arrival_rate) -> np.ndarray:
        """The model's deterministic action (2,) for this view (float32, in [0, 1])."""
        return _interval_action(self, view, band_arrival_rate)

    def _update(self) -> None:
        view = self._view
        if view is None:
            raise ConfigError("agent usage-limit policy: not bound to a simulator's view (Policy.bind)")
        t = view.now
        if t >= self._next_t:
            ci = self.agent.control_interval
            a = self.action(view, view.arrivals_since(t - ci) / ci)
            # as the environment: validate_box clips to [0, 1] in float64, then the mapping
            a = np.minimum(np.maximum(a.astype(float), 0.0), 1.0)
            self.inner.ramp, self.inner.period_scale = soft_reflective_params(a)
            self.history.append((float(t), self.inner.ramp, self.inner.period_scale))
            self._next_t = (np.floor(t / ci + 1e-9) + 1) * ci

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        self._update()
        return self.inner.ceilings(saturation, num_bands)

    def stationary(self, saturation: float) -> bool:
        # The inner ceiling's own answer (called after ``ceilings`` at the same saturation):
        # the gateway then schedules its cycles exactly as for the compiled baseline. It only
        # sleeps while blocked *and* stationary, i.e. at saturation >= 1, where every band is
        # shut whatever the parameters, so a parameter change owed meanwhile changes nothing.
        return self.inner.stationary(saturation)


class AgentGateway(GatewayController):
    """A trained Gateway-v0 model as a gateway controller: ``gateway=agent:PATH``.

    The model sets admission, flow control and routing together, so it runs in its own
    environment. For a cell, :meth:`run` builds ``llmsched/Gateway-v0`` on the cell's
    scenario (its exact rate and overrides) with the keywords the model was trained with,
    except its training window (``duration_s``, ``num_requests``) and horizon: the
    scenario's own apply, as in every cell. It resets with ``workload_seed`` = the cell's
    seed, so the workload and the gateway's random draws are the harness's for that seed,
    and steps the deterministic action through the episode with the saved VecNormalize
    statistics. The finished simulator is the cell's result. An untrained ``--policy
    residual`` model acts the centre, and the cell then equals the base combination's,
    request for request (tests/test_gateway_env.py).
    """

    name = "agent"
    description = "a trained Gateway-v0 agent: gateway=agent:PATH"

    def __init__(self, path: str = "", agent: "LoadedAgent | EsAgent | None" = None):
        self.agent = _model_of_kind(path, agent, "gateway", "Gateway-v0")
        self.path = path

    def environment(self, scenario):
        """The model's environment on ``scenario`` (a Scenario): its training keywords
        without the training window and horizon, the scenario's own horizon."""
        self.agent.check_instances(scenario.cluster.instances)
        kwargs = {k: v for k, v in (self.agent.meta.get("env_kwargs") or {}).items()
                  if k not in ("duration_s", "num_requests", "horizon", "horizon_s")}
        return GatewayEnv(scenario=scenario, horizon=scenario.horizon_s, **kwargs)

    def run(self, scenario, seed: int):
        env = self.environment(scenario)
        obs, _ = env.reset(options={"workload_seed": int(seed)})
        while True:
            action, _ = self.agent.model.predict(self.agent.normalize({k: v[None] for k, v in obs.items()}),
                                                 deterministic=True)
            obs, _, terminated, truncated, _ = env.step(np.asarray(action).reshape(-1))
            if terminated or truncated:
                return env.simulator


def agent(path: str = "") -> "AgentRouter | AgentUsageLimit | AgentSoftReflective | AgentGateway":
    """``agent:PATH``: a trained model, as the policy of its environment's role."""
    if not path:
        raise ConfigError("agent needs a model path: agent:PATH (a llmsched-gym train output directory)")
    a = load_agent(path)
    if a.kind == "routing":
        return AgentRouter(path, a)
    if a.kind == "flow_control":
        return AgentSoftReflective(path, a) if a.flow_action == "soft-reflective" else AgentUsageLimit(path, a)
    if a.kind == "gateway":
        return AgentGateway(path, a)
    raise ConfigError(f"agent:{path}: {a.env_id} models are not usable as gateway policies yet")


agent.role = "routing"
agent.role_for = lambda path: {"flow_control": "usage-limit", "gateway": "gateway"}.get(load_agent(path).kind,
                                                                                      "routing")
agent.description = AgentRouter.description + "; a FlowControl model: fc=agent:PATH; a Gateway-v0 model: gateway=agent:PATH"
register_policy("agent", agent, overwrite=True)
