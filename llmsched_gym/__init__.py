"""llmsched-gym: LLM-cluster request scheduling as a reinforcement-learning problem."""

from . import envs  # noqa: F401  (registers the gymnasium environments)
from .errors import ConfigError, PolicyError, TraceFormatError
from .evaluation import evaluate
from .workload import Workload

__version__ = "0.1.0"
__all__ = ["evaluate", "ConfigError", "PolicyError", "TraceFormatError", "Workload", "__version__"]
