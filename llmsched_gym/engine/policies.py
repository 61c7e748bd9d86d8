"""Which policies run inside the compiled engine, and with which parameters.

A built-in policy opts in by defining ``compiled_form()`` on its own class (not
inherited, so a subclass that changes the behaviour falls back to Python), returning
its kernel code from :mod:`~llmsched_gym.engine.layout` and a tuple of float
parameters. Every other policy is asked in Python when its decision comes up.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import ADMIT_PY, FLOW_NONE, FLOW_PY, ROUTER_PY


@dataclass(frozen=True)
class PolicyCodes:
    router: int
    router_params: tuple
    flow: int
    flow_params: tuple
    admission: int
    admission_params: tuple


def compiled_form(policy, python_code: int) -> tuple[int, tuple]:
    """(code, params) of ``policy`` in the kernel, or ``(python_code, ())``."""
    if policy is None:
        return python_code, ()
    form = type(policy).__dict__.get("compiled_form")
    if form is None:
        return python_code, ()
    code, params = form(policy)
    return int(code), tuple(float(p) for p in params)


def lower_policies(router, flow, admission) -> PolicyCodes:
    """The kernel codes of a gateway's three policies (None router: external decisions)."""
    r = compiled_form(router, ROUTER_PY)
    f = (FLOW_NONE, ()) if flow is None else compiled_form(flow, FLOW_PY)
    a = compiled_form(admission, ADMIT_PY)
    return PolicyCodes(r[0], r[1], f[0], f[1], a[0], a[1])
