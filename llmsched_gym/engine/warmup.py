"""Compiling the event loop on a cold numba cache with two processes.

numba compiles the event loop (:func:`~llmsched_gym.engine.kernel.advance`) as one call
tree, and optimizes each function again inside every caller it is linked into: about
80 s on one core. The tree's largest subtrees are independent, and a function compiled
in one process is found in numba's disk cache by another. So on a cold cache
:func:`~llmsched_gym.simulator.compile_kernels` has a second process compile one subtree
(:data:`BACKGROUND`: the gateway's dispatch with every router) while it compiles another
(:data:`FOREGROUND`: iteration planning, completion and scrapes), then compiles the rest,
which loads both from the cache: about 65 s instead of 80 on two cores.
"""

from __future__ import annotations

import inspect

import numba
import numpy as np
from numba import types

from . import kernel

#: Subtrees of the event loop's call tree compiled by the second process / by this one.
BACKGROUND = ("_dispatch",)
FOREGROUND = ("_enqueue", "_complete", "scrape")

_SCALARS = {"c": types.int64, "r": types.int64, "g": types.int64, "t": types.float64}


def signature(name: str, state) -> tuple:
    """The argument types kernel function ``name`` is called with inside the event loop:
    the engine state's arrays by parameter name, the cluster's random generator, and
    int64 indices / float64 times."""
    out = []
    for p in inspect.signature(getattr(kernel, name).py_func).parameters:
        if p == "rng":
            out.append(numba.typeof(state.rngs).dtype)
        elif isinstance(getattr(state, p, None), np.ndarray):
            out.append(numba.typeof(getattr(state, p)))
        else:
            out.append(_SCALARS[p])
    return tuple(out)


def compile_subtrees(names, state) -> None:
    """Compile (or load from the disk cache) the kernel functions ``names`` for the
    engine state's types."""
    for name in names:
        getattr(kernel, name).compile(signature(name, state))


def cache_is_cold() -> bool:
    """Whether numba's disk cache has no valid entry for the event loop (a fresh install,
    or an edit anywhere in the engine: see :mod:`.jitcache`); False if that cannot be told."""
    if kernel.advance.signatures:
        return False  # compiled in this process
    try:
        return not kernel.advance._cache._cache_file._load_index()
    except AttributeError:  # numba's cache internals moved: compile in one process
        return False
