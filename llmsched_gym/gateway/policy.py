"""The one policy interface shared by baselines, trained agents and user policies.

Three roles, each seeing only a :class:`~llmsched_gym.gateway.view.RouterView`:

* :class:`AdmissionPolicy` - admit or reject an arriving request;
* :class:`UsageLimitPolicy` - per-band ceilings for the dispatch loop (flow control);
* :class:`RoutingPolicy` - an instance for a dispatched request.

Policies are registered by name (:func:`register_policy`) and built with
:func:`make_policy`; every constant is a constructor keyword with the published default.
"""

from __future__ import annotations

import inspect
from typing import Callable

import numpy as np

from ..errors import ConfigError
from .view import RequestInfo, RouterView


class Policy:
    """Base of all policies. ``role`` is ``admission``, ``usage-limit`` or ``routing``."""

    role: str = ""
    name: str = ""
    description: str = ""

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

    def route(self, request: RequestInfo, view: RouterView) -> int:
        raise NotImplementedError

    def on_dispatch(self, request: RequestInfo, instance: int, view: RouterView) -> None:
        """After the request was sent to ``instance`` (update router-side indexes)."""

    def on_finish(self, request_id: int, instance: int) -> None:
        """After a dispatched request left ``instance`` (finished or dropped)."""


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
        from ..validation import check_call_kwargs

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
        raise ConfigError(f"policy {policy.name!r} is a {policy.role!r} policy, expected {role!r}")
    return policy


def _parse_params(name: str, params: str) -> dict:
    out = {}
    for item in filter(None, params.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"policy {name!r}: parameter {item!r} must be key=value")
        try:
            out[key.strip().replace("-", "_")] = float(value) if "." in value or "e" in value else int(value)
        except ValueError:
            out[key.strip().replace("-", "_")] = {"true": True, "false": False}.get(value.lower(), value)
    return out


def policy_parameters(factory) -> dict:
    """Constructor keywords and defaults of a registered policy (for ``llmsched-gym policies``)."""
    sig = inspect.signature(factory)
    return {k: p.default for k, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}
