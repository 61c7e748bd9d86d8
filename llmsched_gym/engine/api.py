"""The engine's door: what code outside :mod:`llmsched_gym.engine` may use.

* the batched state and what it is built from: :class:`EngineState` (advance, scrape,
  saturation, dispatch decisions, ``forked`` / ``fork`` copies of a cluster, named field views
  ``state.requests`` / ``state.instances`` / ``state.clusters``), :class:`ClusterInputs` and
  the prefix keys of its workload (:func:`workload_keys`);
* per-request records: :class:`RequestTable` and the outcome codes;
* the codes a policy's ``compiled_form()`` returns (``ROUTER_*``, ``FLOW_*``, ``ADMIT_*``,
  ``PD_DECIDE_*``) and :func:`lower_policies`;
* the engine's configuration, :class:`EngineConfig`;
* compiling the event loop on a cold cache in two processes (:func:`cache_is_cold`,
  :func:`compile_subtrees` of :data:`FOREGROUND` / :data:`BACKGROUND`).

The field layout (:mod:`.fields`, :mod:`.layout`) and the kernels are internals:
``tests/test_layout.py`` lists the modules that still reach past this door, and fails on any
new one.
"""

from . import layout as _layout
from .config import EngineConfig
from .policies import CompiledForm, PolicyCodes, compiled_form, lower_policies
from .requests import (
    CRASHED,
    DROPPED,
    EVICTED,
    EXPIRED,
    FINISHED,
    IN_FLIGHT,
    OUTCOME_NAMES,
    REJECTED,
    TIMED_OUT,
    RequestTable,
    request_records,
)
from .state import ClusterInputs, EngineState, workload_keys
from .warmup import BACKGROUND, FOREGROUND, cache_is_cold, compile_subtrees

#: Kernel codes of the compiled policies and of a cluster's status (see docs/architecture.md).
CODE_PREFIXES = ("ROUTER_", "FLOW_", "ADMIT_", "PD_DECIDE_", "SAT_", "EVICT_", "ST_", "STALE_")
globals().update({k: v for k, v in vars(_layout).items() if k.startswith(CODE_PREFIXES)})
STATUS_NAMES = _layout.STATUS_NAMES

__all__ = ["BACKGROUND", "FOREGROUND", "cache_is_cold", "compile_subtrees", "ClusterInputs", "CompiledForm", "EngineConfig", "EngineState", "PolicyCodes", "RequestTable", "compiled_form",
           "lower_policies", "OUTCOME_NAMES", "STATUS_NAMES", "IN_FLIGHT", "FINISHED", "REJECTED", "EXPIRED",
           "DROPPED", "EVICTED", "TIMED_OUT", "CRASHED", "request_records", "workload_keys"]
