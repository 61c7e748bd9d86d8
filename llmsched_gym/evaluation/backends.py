"""Where many independent simulations run: this machine's processes, or a Ray cluster.

A backend maps a function over tasks and returns the results **in task order**, whatever
the number of workers and the order in which they finish; a callback sees each result as
it arrives (progress bars, incremental writes). The evaluation harness (``compare``,
``benchmarks/studies/reproduce.py``) runs its cells through one, and ``benchmarks/validation/capacities.py``
its capacity searches (one search is a sequence of dependent probes, so it is one task).

* :class:`LocalBackend` (``--backend local``, the default): a process pool on this
  machine, or this process alone with one worker.
* :class:`RayBackend` (``--backend ray``, the ``[ray]`` extra): Ray tasks, on a local Ray
  instance it starts (``--ray-address`` not given) or on a running cluster
  (``--ray-address auto`` or ``ray://host:port``). Every node needs this package
  installed; ``LLMSCHED_*`` environment variables (trace and cache directories) are
  passed on to the workers.

Before the first task, the driver compiles the engine's kernels
(:func:`~llmsched_gym.simulator.compile_kernels`; numba caches them on disk), and every
worker process warms up once more before its first task, so that workers load the
compiled kernels instead of all compiling them at once.
"""

from __future__ import annotations

import copy
import logging
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Sequence

from ..errors import ConfigError
from ..simulator import compile_kernels
from ..validation import check_number, require_extra

#: Backend names (``--backend``).
BACKENDS = ("local", "ray")

#: ``on_result(index, result)``: called once per task as its result arrives.
OnResult = Callable[[int, Any], None]


def _check_workers(workers) -> int | None:
    return None if workers is None else check_number("workers", workers, integer=True, ge=1)


class LocalBackend:
    """Processes on this machine (``concurrent.futures``).

    Args:
        workers: processes (default ``min(cpu count, tasks)``); 1 runs the tasks in this
            process, one after another.
        mp_context: multiprocessing context of the pool (default: the platform's).
    """

    name = "local"

    def __init__(self, workers: int | None = None, mp_context=None):
        self.requested = _check_workers(workers)
        self.mp_context = mp_context

    def workers(self, total: int) -> int:
        """How many processes run ``total`` tasks."""
        if self.requested is None:
            return max(1, min(os.cpu_count() or 1, total))
        return max(1, min(self.requested, total))

    def map(self, fn: Callable, tasks: Sequence, on_result: OnResult | None = None) -> list:
        """``[fn(t) for t in tasks]``, computed by the pool."""
        results: list = [None] * len(tasks)
        n = self.workers(len(tasks))
        if n <= 1:
            for i, t in enumerate(tasks):
                results[i] = fn(t)
                if on_result:
                    on_result(i, results[i])
            return results
        warm_up()  # once here: forked workers inherit the kernels, spawned ones load numba's cache
        with ProcessPoolExecutor(max_workers=n, mp_context=self.mp_context) as pool:
            futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
            for f in as_completed(futures):
                i = futures[f]
                results[i] = f.result()
                if on_result:
                    on_result(i, results[i])
        return results

    def close(self) -> None:
        """Nothing to release (the pool lives for one :meth:`map`)."""


class RayBackend:
    """Ray tasks, one per task, on a local instance or a running cluster.

    Args:
        workers: on a local instance it starts, its CPUs (default: every CPU); on a
            running cluster, at most this many tasks in flight (default: no limit; Ray
            schedules them on the cluster's CPUs).
        address: None starts a local Ray instance (shut down by :meth:`close`); ``auto``
            joins the cluster running on this machine; ``ray://host:port`` a remote one.
            If Ray is already initialized in this process, that instance is used as is.
    """

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None):
        require_extra("--backend ray", modules=("ray",), extra="ray")
        self.requested = _check_workers(workers)
        self.address = _check_ray_address(address)
        self._started = False

    def _ray(self):
        import ray

        if not ray.is_initialized():
            env = {k: v for k, v in os.environ.items() if k.startswith("LLMSCHED_")}
            local = self.address is None
            try:
                ray.init(address=self.address, num_cpus=self.requested if local else None,
                         include_dashboard=False if local else None, log_to_driver=False,
                         logging_level=logging.WARNING, runtime_env={"env_vars": env} if env else None)
            except (ConnectionError, RuntimeError, ValueError) as e:  # no cluster there, a version mismatch
                raise ConfigError(f"ray_address={self.address!r}: Ray could not join it ({' '.join(str(e).split())})") from None
            self._started = True
        return ray

    def workers(self, total: int) -> int:
        """How many tasks run at once: the instance's CPUs, or :attr:`requested` if fewer."""
        cpus = int(self._ray().cluster_resources().get("CPU", 1))
        return max(1, min(cpus, self.requested or cpus, total))

    def map(self, fn: Callable, tasks: Sequence, on_result: OnResult | None = None) -> list:
        """``[fn(t) for t in tasks]``, each a Ray task; results in task order."""
        ray = self._ray()
        results: list = [None] * len(tasks)
        if not tasks:
            return results
        warm_up()  # fills numba's disk cache that local workers load from
        remote = ray.remote(num_cpus=1)(_run_warm)
        limit = self.requested or len(tasks)
        queue = iter(enumerate(tasks))
        pending: dict = {}

        def submit() -> None:
            nxt = next(queue, None)
            if nxt is not None:
                pending[remote.remote(fn, nxt[1])] = nxt[0]

        for _ in range(limit):
            submit()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ready[0])
            # A copy: arrays Ray returns are read-only views of its object store, which
            # close() shuts down.
            results[i] = copy.deepcopy(ray.get(ready[0]))
            if on_result:
                on_result(i, results[i])
            submit()  # keep ``limit`` tasks in flight
        return results

    def close(self) -> None:
        """Shut down the Ray instance this backend started (one it joined stays up)."""
        if self._started:
            import ray

            ray.shutdown()
            self._started = False


def _check_ray_address(address: str | None) -> str | None:
    """``auto``, ``ray://HOST:PORT`` or ``HOST:PORT`` (None: a local instance); a HOST:PORT
    must accept a connection now, before any cell waits on Ray's own minute-long retries."""
    import socket

    if address is None or address == "auto":
        return address
    want = "use 'auto', ray://HOST:PORT or HOST:PORT (a running Ray cluster)"
    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, _, port = hostport.rpartition(":")
    if not host or "/" in hostport or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"ray_address={address!r} is invalid; {want}")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise ConfigError(f"ray_address={address!r}: nothing accepts connections at {host}:{port} "
                          f"({e.strerror or e}); {want}") from None
    return address


def make_backend(backend: "str | LocalBackend | RayBackend | None" = None, *, workers: int | None = None,
                 address: str | None = None, mp_context=None):
    """A backend by name (``local``, ``ray``), or ``backend`` itself if it is one."""
    if backend is None:
        backend = "local"
    if not isinstance(backend, str):
        return backend
    if backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is invalid; allowed: {', '.join(BACKENDS)}")
    if address is not None and backend != "ray":
        raise ConfigError(f"ray_address={address!r} applies to the ray backend only (backend={backend!r})")
    if backend == "ray":
        return RayBackend(workers, address)
    return LocalBackend(workers, mp_context)


_warm = False


def warm_up() -> None:
    """Compile (or load) the engine's kernels, once per process (on a cold cache it says
    so on stderr: callers with a progress display call it before showing it)."""
    global _warm
    if not _warm:
        compile_kernels()
        _warm = True


def _run_warm(fn: Callable, task):
    """One task in a Ray worker, after that worker's warm-up."""
    warm_up()
    return fn(task)
