"""The engine: vLLM-v1-like instances and the gateway as one compiled, batched event loop.

* :mod:`.config` - per-instance limits (:class:`EngineConfig`);
* :mod:`.state` - the batched state of C clusters in shared arrays (:class:`EngineState`);
* :mod:`.kernel` - the numba event loop over that state;
* :mod:`.steptime` - the step-time models lowered to compiled arithmetic;
* :mod:`.units` - prefix units and their dense keys;
* :mod:`.policies` - which gateway policies run in the kernel;
* :mod:`.jitcache` - numba's disk cache keyed on the engine's source, one compile per argument types;
* :mod:`.warmup` - compiling the event loop in two processes on a cold cache.
"""

from . import jitcache

jitcache.install()  # before any cached function of the package is defined

from .config import EngineConfig  # noqa: E402

__all__ = ["EngineConfig"]
