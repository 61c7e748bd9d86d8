"""Which policies run inside the compiled engine, and with which parameters.

A built-in policy opts in by defining ``compiled_form()`` on its own class (not
inherited, so a subclass that changes the behaviour falls back to Python), returning a
:class:`CompiledForm` (or a ``(code, params)`` pair): its kernel code from
:mod:`~llmsched_gym.engine.api`, its float parameters, and what the engine state must hold
for it. Every other policy is asked in Python when its decision comes up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .layout import ADMIT_PY, FLOW_NONE, FLOW_PY, ROUTER_PY


@dataclass(frozen=True)
class CompiledForm:
    """How a policy runs inside the engine.

    Args:
        code: its kernel code (``ROUTER_*``, ``FLOW_*``, ``ADMIT_*``, ``PD_DECIDE_*``).
        params: its parameters (at most the role's parameter rows, ``EngineState.set_policy``).
        needs: what the engine state must build for it: ``router_block_keys`` =
            ``(block_tokens, max_blocks)`` (a block-key index: llm-d's prefix index, SGLang's
            cache tree), ``prefix_classes`` = ``(prefix_blocks, block_tokens)`` (LMetric's
            hotspot detector).
    """

    code: int
    params: tuple = ()
    needs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyCodes:
    router: int
    router_params: tuple
    flow: int
    flow_params: tuple
    admission: int
    admission_params: tuple
    router_needs: dict = field(default_factory=dict)


def compiled_form(policy, python_code: int) -> CompiledForm:
    """How ``policy`` runs in the kernel (``CompiledForm(python_code)``: asked in Python)."""
    form = None if policy is None else type(policy).__dict__.get("compiled_form")
    if form is None:
        return CompiledForm(python_code)
    out = form(policy)
    if not isinstance(out, CompiledForm):
        out = CompiledForm(*out)
    return CompiledForm(int(out.code), tuple(float(p) for p in out.params), dict(out.needs))


def lower_policies(router, flow, admission) -> PolicyCodes:
    """The kernel codes of a gateway's three policies (None router: external decisions)."""
    r = compiled_form(router, ROUTER_PY)
    f = CompiledForm(FLOW_NONE) if flow is None else compiled_form(flow, FLOW_PY)
    a = compiled_form(admission, ADMIT_PY)
    return PolicyCodes(r.code, r.params, f.code, f.params, a.code, a.params, r.needs)
