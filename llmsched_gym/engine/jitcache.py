"""numba's disk cache keyed on the engine's source, and one compile per argument types.

**Cache key.** numba stamps a cached function with the hash of its own file only, but the
kernels fold constants from other files (:mod:`.layout`'s field indices, the step-time
and policy codes): after an edit there, a stale cache entry was loaded and indexed the
wrong fields (it segfaulted). :class:`EngineSourceLocator` stamps every cached function
of the package with the hash of all of ``engine/``'s sources and its own file, so any
edit in the engine invalidates every entry; the cache stays where numba would put it.

**One specialization per argument types.** A kernel function called with a constant
argument would be compiled once per constant; :func:`install` compiles it once for the
argument's type (89 specializations of the event loop's functions instead of 101).

Not done, measured: skipping the module-level -O3 of the functions called only inside the
kernel (the entry points optimize the linked whole) cut a cold compile from 59 to 41 s, but
BLIS's 50,000-request run took 1.04-1.09 s instead of 0.88 (docs/performance.md).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from numba.core import caching, dispatcher, types

_ENGINE = Path(__file__).resolve().parent
_PACKAGE = _ENGINE.parent

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


def install() -> None:
    """Register the locator (before any cached function is defined) and the one-per-types
    compile of kernel functions; once per process."""
    if EngineSourceLocator in _IMPL._locator_classes:
        return
    _IMPL._locator_classes.insert(0, EngineSourceLocator)
    compile_one = dispatcher.Dispatcher.compile

    def compile_unliteral(self, sig):
        if self.py_func.__module__ == _KERNEL and isinstance(sig, tuple):
            sig = tuple(types.unliteral(a) for a in sig)  # one specialization, not one per constant argument
        return compile_one(self, sig)

    dispatcher.Dispatcher.compile = compile_unliteral
