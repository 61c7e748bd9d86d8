"""The one policy interface shared by baselines, trained agents and user policies.

Three roles, each seeing only a :class:`~llmsched_gym.gateway.view.RouterView`:

* :class:`AdmissionPolicy` - admit or reject an arriving request;
* :class:`UsageLimitPolicy` - per-band ceilings for the dispatch loop (flow control);
* :class:`RoutingPolicy` - an instance for a dispatched request.

A fourth role, ``scaling`` (:class:`llmsched_gym.autoscaling.ScalingPolicy`), sizes the
fleet once per scaling interval (``compare --scaler``, ``llmsched/Autoscaling-v0``). A
fifth, ``pd`` (:class:`PDPolicy`), decides per request whether a cluster with a prefill
pool disaggregates it (docs/architecture.md, "Prefill/decode disaggregation"). A sixth,
``gateway`` (:class:`GatewayController`), takes the three gateway decisions together and
drives the whole simulation (a trained Gateway-v0 model, ``gateway=agent:PATH``).

Policies are registered by name (:func:`register_policy`) and built with
:func:`make_policy`; every constant is a constructor keyword with the published default.

A *policy combination* (:func:`parse_policy`, a :class:`PolicySpec`) sets some of the
three roles; the roles it leaves out keep the scenario's defaults. It is given as

* a dict ``{"router": ..., "flow_control": ..., "admission": ..., "label": ...}``
  (any subset; ``flow_control=None`` dispatches on arrival);
* a string of ``+``-separated parts, each ``role=spec`` or a bare policy ``spec``
  whose role is looked up in the registry: ``"lmetric"``,
  ``"lmetric+soft-reflective-ceiling"``, ``"router=jsq+flow_control=none"``,
  ``"llm-d:prefix_weight=2,queue_weight=1"``. Roles: ``router`` (alias ``routing``),
  ``flow_control`` (aliases ``flow-control``, ``usage-limit``, ``fc``), ``admission``,
  ``scaler`` (aliases ``scaling``, ``autoscaler``; runs the cell autoscaled), ``pd``,
  ``gateway`` (alone: it sets routing, flow control and admission itself).
  ``label=NAME`` names the combination (default: the string itself).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import ConfigError
from ..validation import check_call_kwargs, check_name
from .view import RequestInfo, RouterView


class Policy:
    """Base of all policies. ``role`` is ``admission``, ``usage-limit`` or ``routing``."""

    role: str = ""
    name: str = ""
    description: str = ""

    def __init_subclass__(cls, **kwargs):
        """A policy constructed directly (not through :func:`make_policy`) checks its
        arguments against the same declared types and ranges."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _checked_init(cls, init)

    def reset(self, num_instances: int, rng: np.random.Generator) -> None:
        """Called before each simulation; drop any state from an earlier run."""

    def bind(self, view: RouterView) -> None:
        """Called once per simulation, after ``reset``, with the gateway's live view.

        The simulator refreshes that object in place before every decision, so a policy
        whose call carries no view (``UsageLimitPolicy.ceilings``) can keep and read it.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class AdmissionPolicy(Policy):
    role = "admission"

    def admit(self, request: RequestInfo, view: RouterView) -> bool:
        raise NotImplementedError


class UsageLimitPolicy(Policy):
    """Ceilings per band (band 0 = highest priority) for the dispatch loop (docs/architecture.md).

    ``ceilings`` is called once per dispatch cycle and may advance internal state (a
    tick). ``stationary(saturation)`` returns True when repeated calls at this
    saturation return the same ceilings, so the gateway may skip cycles until the
    saturation changes.
    """

    role = "usage-limit"

    def ceilings(self, saturation: float, num_bands: int) -> np.ndarray:
        raise NotImplementedError

    def stationary(self, saturation: float) -> bool:
        return True


class RoutingPolicy(Policy):
    """Pick an instance for a request. Hooks let a router keep its own state."""

    role = "routing"
    #: A compiled router whose choice the simulator offers as ``view.suggest`` (a trained
    #: agent's ``hint`` observation; ``Simulator(hint=...)``); None: none.
    hint: str | None = None

    def route(self, request: RequestInfo, view: RouterView) -> int:
        raise NotImplementedError

    def on_dispatch(self, request: RequestInfo, instance: int, view: RouterView) -> None:
        """After the request was sent to ``instance`` (update router-side indexes)."""

    def on_finish(self, request_id: int, instance: int) -> None:
        """After a dispatched request left ``instance`` (finished, dropped, or evicted by the gateway)."""


class PDPolicy(Policy):
    """Whether to disaggregate a request on a cluster with a prefill pool.

    The decision runs inside the compiled engine (``compiled_form()``: a ``PD_DECIDE_*``
    code of :mod:`~llmsched_gym.engine.layout` and its parameters); :meth:`disaggregate`
    states the same rule in Python. ``disaggregates`` False (``pd-aggregated``): the
    cluster's instances all serve whole requests, its pools ignored.
    """

    role = "pd"
    disaggregates: bool = True

    def disaggregate(self, uncached_tokens: int, prefill_queue: int) -> bool:
        """The decision for a request with ``uncached_tokens`` prompt tokens not cached on
        the decode instance the router chose, with ``prefill_queue`` requests waiting on
        the prefill pool (not yet scheduled there)."""
        raise NotImplementedError

    def compiled_form(self) -> tuple[int, tuple]:
        raise NotImplementedError


class GatewayController(Policy):
    """Admission, flow control and routing decided together, once per control interval,
    by one controller that runs the simulation itself (as ``llmsched/Gateway-v0`` does).

    The harness hands it a cell's scenario (at the cell's exact rate) and seed;
    :meth:`run` returns the finished :class:`~llmsched_gym.simulator.Simulator`, whose
    summary is the cell's result like any other cell's.
    """

    role = "gateway"

    def run(self, scenario, seed: int):
        raise NotImplementedError


def _checked_init(cls, init):
    sig = inspect.signature(init)

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        if type(self) is cls:  # the constructor called; a base's, called from it, was given checked values
            try:
                given = sig.bind(self, *args, **kwargs).arguments
            except TypeError as e:
                raise ConfigError(f"policy {cls.name or cls.__name__!r}: {e}") from None
            given.pop(next(iter(sig.parameters)))  # self
            check_call_kwargs(f"policy {cls.name or cls.__name__!r}", init, given, label=cls.name or cls.__name__,
                              skip=("self",))
        init(self, *args, **kwargs)

    return checked


_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register_policy(name: str, factory: Callable[..., Policy] | None = None, *, overwrite: bool = False):
    """Register a policy class or factory under ``name``; usable as a decorator."""

    def do(f):
        if name in _REGISTRY and not overwrite and _REGISTRY[name] is not f:
            raise ConfigError(f"policy name {name!r} is already registered")
        _REGISTRY[name] = f
        return f

    return do(factory) if factory is not None else do


POLICY_ENTRY_POINTS = "llmsched_gym.policies"
_plugins_loaded = False


def _load_builtin() -> None:
    """Import the modules that register policies: every entry point of the
    ``llmsched_gym.policies`` group (the package's own ``baselines`` and ``agents.policy``,
    and any third-party package that declares one). The registry imports no plugin by
    name; a source tree used without installing falls back to the two bundled modules."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib import import_module
    from importlib.metadata import entry_points

    names = [ep.value for ep in entry_points(group=POLICY_ENTRY_POINTS)] or ["baselines", "agents.policy"]
    for module in names:
        import_module(module)


def list_policies(role: str | None = None) -> dict[str, Callable[..., Policy]]:
    """Registered policies by name, optionally only those of one role."""
    _load_builtin()
    return {
        k: v for k, v in sorted(_REGISTRY.items())
        if role is None or getattr(v, "role", None) == role
    }


def make_policy(spec: "str | Policy", role: str | None = None, **kwargs) -> Policy:
    """Build a policy from a name (``"lmetric"``), a name with parameters
    (``"static-usage-limit:threshold=0.8"``) or return an instance unchanged."""
    if isinstance(spec, Policy):
        policy = spec
    else:
        name, _, params = str(spec).partition(":")
        # "agent:PATH" names a trained model file rather than key=value parameters.
        parsed = {"path": params} if name == "agent" and params and "=" not in params else _parse_params(name, params)
        kwargs = {**parsed, **kwargs}
        registry = list_policies()
        if name not in registry:
            known = ", ".join(k for k, v in registry.items() if role is None or v.role == role)
            raise ConfigError(f"unknown policy {name!r}" + (f" for role {role!r}" if role else "") + f"; known: {known}")
        factory = registry[name]
        # Names and types against the constructor's signature (the error lists them).
        kwargs = check_call_kwargs(f"policy {name!r}", factory, kwargs, label=name)
        try:
            policy = factory(**kwargs)
        except TypeError as e:
            raise ConfigError(f"policy {name!r}: bad parameters {kwargs}: {e}") from None
        except ConfigError as e:  # a range check in the constructor: say whose
            if type(e) is not ConfigError or str(e).startswith(("policy ", "agent")):
                raise
            raise ConfigError(f"policy {name!r}: {e}") from None
        policy.name = policy.name or name
    if role is not None and policy.role != role:
        # a trained model's role is its environment's: say where it goes in a combination
        hint = f" (this trained model takes the {_REGISTRY_ROLE[policy.role]} role)" \
            if isinstance(spec, str) and spec.startswith("agent:") and policy.role in _REGISTRY_ROLE else ""
        raise ConfigError(f"policy {policy.name!r} is a {policy.role!r} policy, expected {role!r}{hint}")
    return policy


def _parse_params(name: str, params: str) -> dict:
    out = {}
    for item in filter(None, params.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"policy {name!r}: parameter {item!r} must be key=value")
        key = key.strip().replace("-", "_")
        if key in out:
            raise ConfigError(f"policy {name!r}: parameter {key!r} is given twice ({params!r}); give it once")
        try:
            out[key] = float(value) if "." in value or "e" in value else int(value)
        except ValueError:
            out[key] = {"true": True, "false": False}.get(value.lower(), value)
    return out


def policy_parameters(factory) -> dict:
    """Constructor keywords and defaults of a registered policy (for ``llmsched-gym policies``)."""
    sig = inspect.signature(factory)
    return {k: p.default for k, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}


def check_policy_ref(field: str, value, *, none_ok: bool = True) -> None:
    """A policy given as a name/spec string, a :class:`Policy` object, or (``none_ok``) None."""
    if value is None and none_ok or isinstance(value, Policy):
        return
    check_name(field, value, what="a policy name (see `llmsched-gym policies`)")


# ====================================================================== combinations
ROLE_KEYS = ("router", "flow_control", "admission", "scaler", "pd", "gateway")
_ROLE_ALIASES = {
    "router": "router", "routing": "router", "route": "router",
    "flow_control": "flow_control", "flow-control": "flow_control", "flowcontrol": "flow_control",
    "usage-limit": "flow_control", "usage_limit": "flow_control", "fc": "flow_control",
    "admission": "admission", "admit": "admission",
    "scaler": "scaler", "scaling": "scaler", "autoscaler": "scaler",
    "pd": "pd", "gateway": "gateway",
}
_REGISTRY_ROLE = {"routing": "router", "usage-limit": "flow_control", "admission": "admission", "scaling": "scaler",
                  "pd": "pd", "gateway": "gateway"}
_POLICY_ROLE = {"router": "routing", "flow_control": "usage-limit", "admission": "admission", "scaler": "scaling",
                "pd": "pd", "gateway": "gateway"}


@dataclass(frozen=True)
class PolicySpec:
    """One policy combination: the roles it sets (others keep the scenario default)."""

    label: str
    roles: tuple = ()  # ((role, spec), ...) in ROLE_KEYS order

    def kwargs(self) -> dict:
        return dict(self.roles)

    def get(self, role: str, default=None):
        return dict(self.roles).get(role, default)


def _role_of_name(name: str) -> str:
    registry = list_policies()
    base = name.partition(":")[0]
    if base not in registry:
        known = "; ".join(f"{r}: {', '.join(list_policies(r))}" for r in ("routing", "usage-limit", "admission",
                                                                          "scaling", "pd"))
        raise ConfigError(f"unknown policy {base!r}; known policies - {known}")
    factory = registry[base]
    # A factory may decide its role from its argument (agent:PATH loads a model of either role).
    role_for = getattr(factory, "role_for", None)
    role = role_for(name.partition(":")[2]) if role_for and ":" in name else factory.role
    return _REGISTRY_ROLE[role]


def parse_policy(spec: "str | dict | PolicySpec") -> PolicySpec:
    """A :class:`PolicySpec` from a string, a dict or a :class:`Policy` (syntax: see the
    module docstring).

    Names are validated (a :class:`ConfigError` names the bad one and lists the known).
    """
    if isinstance(spec, PolicySpec):
        return spec
    roles: dict[str, Any] = {}
    label = None
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "label":
                label = check_name(f"policy combination {spec!r}: label", v, what="a name")
                continue
            role = _ROLE_ALIASES.get(str(k).lower())
            if role is None:
                raise ConfigError(f"policy combination {spec!r}: unknown role {k!r}; "
                                  "use router, flow_control, admission, scaler, pd, gateway")
            roles[role] = None if (role == "flow_control" and (v is None or str(v).lower() == "none")) else v
    elif isinstance(spec, Policy):
        roles[_REGISTRY_ROLE[spec.role]] = spec
        label = spec.name
    elif isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise ConfigError("empty policy combination")
        for part in text.split("+"):
            part = part.strip()
            if not part:
                raise ConfigError(f"policy combination {spec!r}: empty part between '+'")
            key, eq, value = part.partition("=")
            role = _ROLE_ALIASES.get(key.strip().lower()) if eq and ":" not in key else None
            if eq and key.strip().lower() == "label":
                label = value.strip()
                if not label or any(c in label for c in ";+"):
                    raise ConfigError(f"policy combination {spec!r}: label={value!r} is invalid; give a name "
                                      "(not empty, without ';' or '+')")
                continue
            if role is None:
                if eq and ":" not in key:
                    raise ConfigError(f"policy combination {spec!r}: unknown role {key.strip()!r}; "
                                      "use router=, flow_control=, admission=, scaler=, pd=, gateway= or label=")
                value = part
                role = None if value.lower() == "none" else _role_of_name(value)
                if role is None:
                    raise ConfigError(f"policy combination {spec!r}: 'none' needs a role, e.g. flow_control=none")
            value = value.strip()
            if role in roles:
                raise ConfigError(f"policy combination {spec!r} sets the {role} twice")
            roles[role] = None if (role == "flow_control" and value.lower() == "none") else value
        if label is None:
            label = text
    else:
        raise ConfigError(f"policy combination {spec!r}: expected a string or a dict")
    if "gateway" in roles and len(roles) > 1:
        others = ", ".join(f"{r}=" for r in roles if r != "gateway")
        raise ConfigError(f"policy combination {spec!r}: gateway= decides routing, flow control and admission "
                          f"together and runs alone; drop {others}")
    for role, value in roles.items():
        if value is None:
            if role != "flow_control":
                raise ConfigError(f"{role}=none is not allowed; only flow_control can be none")
            continue
        if not isinstance(value, Policy):
            make_policy(value, _POLICY_ROLE[role])  # validate now, before any simulation
    if label is None:
        label = "+".join(f"{r}=none" if v is None else str(getattr(v, "name", v)) for r, v in roles.items()) or "default"
    return PolicySpec(label, tuple((r, roles[r]) for r in ROLE_KEYS if r in roles))
