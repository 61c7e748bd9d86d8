"""The engine: vLLM-v1-like instances and the gateway as one compiled, batched event loop.

* :mod:`.config` - per-instance limits (:class:`EngineConfig`);
* :mod:`.state` - the batched state of C clusters in shared arrays (:class:`EngineState`);
* :mod:`.kernel` - the numba event loop over that state;
* :mod:`.steptime` - the step-time models lowered to compiled arithmetic;
* :mod:`.units` - prefix units and their dense keys;
* :mod:`.policies` - which gateway policies run in the kernel;
* :mod:`.warmup` - compiling the event loop in two processes on a cold cache.
"""

from .config import EngineConfig

__all__ = ["EngineConfig"]
