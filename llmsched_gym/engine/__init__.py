"""The engine: vLLM-v1-like instances and the gateway as one compiled, batched event loop.

* :mod:`.config` - per-instance limits (:class:`EngineConfig`);
* :mod:`.state` - the batched state of C clusters in shared arrays (:class:`EngineState`);
* :mod:`.kernel` - the numba event loop over that state;
* :mod:`.steptime` - the step-time models lowered to compiled arithmetic;
* :mod:`.units` - prefix units and their dense keys;
* :mod:`.policies` - which gateway policies run in the kernel.
"""

from .config import EngineConfig

__all__ = ["EngineConfig", "compile_kernels"]


def compile_kernels() -> None:
    """Compile (or load from numba's disk cache) the engine's kernels now, by simulating
    two requests. Worker pools call it first, so that their processes find the kernels
    compiled (inherited or cached) instead of all compiling them at once."""
    from ..simulator import ClusterConfig, GatewayConfig, Simulator
    from ..workloads.workload import Workload

    w = Workload([0.0, 0.01], [64, 64], [4, 4], priority=[0, -1], hash_ids=[1, 2, 1, 3],
                 hash_offsets=[0, 2, 4], hash_block_tokens=16)
    Simulator(w, ClusterConfig(instances=2, kv_blocks=100),
              GatewayConfig(router="jsq", flow_control="soft-reflective-ceiling")).run()
