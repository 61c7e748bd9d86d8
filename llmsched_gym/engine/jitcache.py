"""numba's disk cache keyed on the engine's source, and a leaner compile of the event loop.

**Cache key.** numba stamps a cached function with the hash of its own file only, but the
kernels fold constants from other files (:mod:`.layout`'s field indices, the step-time
and policy codes): after an edit there, a stale cache entry was loaded and indexed the
wrong fields (it segfaulted). :class:`EngineSourceLocator` stamps every cached function
of the package with the hash of all of ``engine/``'s sources and its own file, so any
edit in the engine invalidates every entry; the cache stays where numba would put it.

**Lean nested compiles.** numba compiles each jitted function as a library of its own and
finalizes it: it links in the libraries of everything the function calls, optimizes the
whole at -O3 and emits machine code. The event loop's call tree is 12 deep, so each
function is optimized again in every ancestor (7x the kernel's code in all). The functions
called only from other kernel functions need no optimization of their own: the ancestor
called from Python (:data:`ENTRY_POINTS`) optimizes the linked whole, inlining as before,
and IEEE arithmetic without fast-math is left exactly as written, so results are
bit-identical. :func:`install` skips their module-level -O3 (about a quarter of a cold
compile); every function is still compiled, cached and callable.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path

from numba.core import caching, codegen, dispatcher, types

_ENGINE = Path(__file__).resolve().parent
_PACKAGE = _ENGINE.parent

#: Kernel functions called from Python or from other modules' jitted code: compiled in full.
ENTRY_POINTS = frozenset({"advance", "scrape", "saturation_now", "dispatch_decided", "cached_tokens_all",
                          "cached_tokens", "fits_all", "kv_used_at", "pairwise_sum"})
_KERNEL = f"{__package__}.kernel"
_IMPL = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # _CacheImpl in older numba


def engine_source_hash() -> bytes:
    """SHA-256 over the engine's Python sources (names and contents, in name order)."""
    paths = sorted(_ENGINE.glob("*.py"))
    return _hash_files(tuple((str(p), *_stamp(p)) for p in paths))


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=8)
def _hash_files(files: tuple) -> bytes:
    """The hash of ``(path, mtime, size)`` files' names and contents (read once per stamp)."""
    h = hashlib.sha256()
    for path, *_ in files:
        h.update(Path(path).name.encode())
        h.update(Path(path).read_bytes())
    return h.digest()


class EngineSourceLocator(caching._CacheLocator):
    """numba's own locator for a function of this package (same cache directory), with a
    source stamp that also covers every file of ``engine/``."""

    def __init__(self, inner: caching._CacheLocator):
        self._inner = inner

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return (self._inner.get_source_stamp(), engine_source_hash())

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not Path(py_file).resolve().is_relative_to(_PACKAGE):
            return None
        for other in _IMPL._locator_classes:
            if other is not cls:
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None


_compiling = threading.local()  # the stack of functions being compiled in this thread


def _is_nested_kernel_function(py_func) -> bool:
    return py_func.__module__ == _KERNEL and py_func.__name__ not in ENTRY_POINTS


def install() -> None:
    """Register the locator (before any cached function is defined) and the lean nested
    compiles; once per process."""
    if EngineSourceLocator in _IMPL._locator_classes:
        return
    _IMPL._locator_classes.insert(0, EngineSourceLocator)
    compile_one = dispatcher.Dispatcher.compile
    optimize = codegen.CPUCodeLibrary._optimize_final_module

    def compile_tracked(self, sig):
        if self.py_func.__module__ == _KERNEL and isinstance(sig, tuple):
            sig = tuple(types.unliteral(a) for a in sig)  # one specialization, not one per constant argument
        stack = _compiling.__dict__.setdefault("stack", [])
        stack.append(self.py_func)
        try:
            return compile_one(self, sig)
        finally:
            stack.pop()

    def optimize_unless_nested(self):
        stack = getattr(_compiling, "stack", None)
        if stack and _is_nested_kernel_function(stack[-1]):
            return  # function-level passes ran; the entry point optimizes the linked whole
        optimize(self)

    dispatcher.Dispatcher.compile = compile_tracked
    codegen.CPUCodeLibrary._optimize_final_module = optimize_unless_nested
