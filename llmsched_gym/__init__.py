"""llmsched-gym: LLM-cluster request scheduling as a reinforcement-learning problem."""

from .errors import ConfigError, PolicyError, TraceFormatError
from .workload import Workload

__version__ = "0.1.0"
__all__ = ["ConfigError", "PolicyError", "TraceFormatError", "Workload", "__version__"]
