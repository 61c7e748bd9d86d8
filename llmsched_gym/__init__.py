"""llmsched-gym: LLM-cluster request scheduling as a reinforcement-learning problem.

``import llmsched_gym`` registers the built-in scenarios (:mod:`.builtin_scenarios`) and the
Gymnasium environments ``llmsched/Routing-v0``, ``llmsched/FlowControl-v0`` and
``llmsched/Admission-v0``.
"""

from . import builtin_scenarios, envs  # noqa: F401  (register the built-in scenarios, the gymnasium environments)
from .engine import EngineConfig
from .errors import ConfigError, PolicyError, TraceFormatError
from .evaluation.harness import evaluate
from .evaluation.metrics import summarize
from .gateway.policy import (
    AdmissionPolicy,
    RoutingPolicy,
    UsageLimitPolicy,
    list_policies,
    make_policy,
    register_policy,
)
from .scenarios import (
    Scenario,
    list_scenarios,
    load_scenario,
    make_scenario,
    measure_capacity,
    register_scenario,
)
from .simulator import ClusterConfig, GatewayConfig, Simulator, SimulatorBatch, simulate_batch
from .workloads.workload import Workload

__version__ = "0.1.0"
__all__ = [
    "AdmissionPolicy", "ClusterConfig", "ConfigError", "EngineConfig", "GatewayConfig", "PolicyError",
    "RoutingPolicy", "Scenario", "Simulator", "SimulatorBatch", "TraceFormatError", "UsageLimitPolicy", "Workload",
    "evaluate", "list_policies", "list_scenarios", "load_scenario", "make_policy", "make_scenario",
    "measure_capacity", "register_policy", "register_scenario", "simulate_batch", "summarize", "__version__",
]
