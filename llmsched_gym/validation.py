"""One validation layer for every entry point.

CLI flags, policy specs (``NAME:key=value``), scenario YAML and ``make_scenario``
keywords, environment keywords, trace options and output paths are all checked with the
helpers here *before* any simulation starts. A bad value raises
:class:`~llmsched_gym.errors.ConfigError` (a ``ValueError``) whose message is one line
naming the field, the value and what is allowed, e.g.::

    policy 'llm-d': prefix_weight='abc' is invalid; it must be a finite number in [0, 1000000]
        (llm-d takes queue_weight: float in [0, 1000000] = 2.0, ...)

The CLI prints that line and exits with code 2 (see docs/architecture.md, "Bad input").

Types come from annotations and are checked with pydantic in strict mode (no string to
number, no bool to int, no non-finite floats); ranges come from rule tables kept next to
what they check (``CLUSTER_RULES`` / ``ENGINE_RULES`` / ``GATEWAY_RULES`` in
:mod:`llmsched_gym.simulator`, ``SCENARIO_OVERRIDE_RULES`` in :mod:`llmsched_gym.scenarios`,
``FLAG_RULES`` in :mod:`llmsched_gym.flags`, ``ENV_KEYWORDS`` in
:mod:`llmsched_gym.envs.core`), upper bounds included (the ``MAX_*`` limits below); a
policy declares each parameter's range in its constructor's annotation (:func:`ranged`,
``Fraction``, ``Weight``, ...). The checkers here are generic: the lowest layer, importing
nothing of the package but :mod:`llmsched_gym.errors`.
Results are written atomically (:func:`atomic_write_text`): a temporary file in the
target directory, then ``os.replace``, so a failed write never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import numbers
import os
import tempfile
import types
import typing
from pathlib import Path

from annotated_types import Interval

from .errors import ConfigError, MissingExtraError, OutputError

#: How to install the reinforcement-learning extra (torch, stable-baselines3, sb3-contrib).
RL_INSTALL = 'pip install -e ".[rl]"'
#: How a CPU-only machine gets the CPU build of torch (before the extra).
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
RL_MODULES = ("torch", "stable_baselines3", "sb3_contrib")


def invalid(field: str, value, want: str) -> ConfigError:
    """``field=value is invalid; want`` as a ConfigError."""
    return ConfigError(f"{field}={value!r} is invalid; {want}")


# ====================================================================== limits
# Upper bounds of sizes, rates and counts, each well beyond any real serving cluster: a
# slip (1e9 for 1e3, an extra zero) is an error before anything is allocated or
# simulated, not an allocation of terabytes or a run that never ends.
MAX_INSTANCES = 1024  # instances (GPU groups) behind one gateway
MAX_QPS = 100_000.0  # requests/s into one cluster
MAX_LOAD = 10.0  # times the cluster's capacity
MAX_SECONDS = 30 * 86400.0  # simulated seconds: a month
MAX_REQUESTS = 10_000_000  # requests in one simulation
MAX_TOKENS = 2**24  # tokens of one request (a 16M context)
MAX_SEEDS = 1000  # seeds of one run or study
MAX_SEED = 2**31 - 1
MAX_WORKERS = 1024  # worker processes or Ray CPUs
MAX_KV_BLOCKS = 2**32  # KV blocks per instance (billions of tokens)
MAX_CPU_KV_GB = 100_000.0  # a CPU KV tier: 100 TB
MAX_LINK_GBPS = 10_000.0  # a host or KV link, GB/s
MAX_TIME_SCALE = 1e6  # a trace's inter-arrival times stretched or squeezed by at most this
#: What an upper-bound error adds, so the user sees why the limit is there.
LIMIT_WHY = "larger is beyond what any real cluster or study needs"


# Declared ranges of policy parameters: a constructor annotates each parameter once
# (``lam: Fraction = 0.6``), and that one declaration is what ``make_policy`` (and so
# the EPP import and export) validates and what ``llmsched-gym policies`` lists.
def ranged(tp, *, gt=None, ge=None, lt=None, le=None):
    """``tp`` restricted to a range, e.g. ``ranged(int, ge=0, le=64)``."""
    return typing.Annotated[tp, Interval(gt=gt, ge=ge, lt=lt, le=le)]


Fraction = ranged(float, ge=0, le=1)
Weight = ranged(float, ge=0, le=1e6)  # a score weight or factor
PositiveWeight = ranged(float, gt=0, le=1e6)
Seconds = ranged(float, gt=0, le=MAX_SECONDS)
NonNegativeSeconds = ranged(float, ge=0, le=MAX_SECONDS)
Tokens = ranged(int, ge=1, le=MAX_TOKENS)  # a token or block count
NonNegativeTokens = ranged(int, ge=0, le=MAX_TOKENS)
Count = ranged(int, ge=1, le=MAX_REQUESTS)


# ====================================================================== numbers and names
def _fmt(x) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))  # 2592000, not 2.592e+06
    return f"{x:g}" if isinstance(x, float) else str(x)


def _range_text(gt, ge, lt, le) -> str:
    if ge is not None and le is not None:
        return f"in [{_fmt(ge)}, {_fmt(le)}]"
    if gt is not None and le is not None:
        return f"in ({_fmt(gt)}, {_fmt(le)}]"
    parts = [f"{op} {_fmt(v)}" for op, v in ((">", gt), (">=", ge), ("<", lt), ("<=", le)) if v is not None]
    return " and ".join(parts)


def check_number(field: str, value, *, gt=None, ge=None, lt=None, le=None, integer: bool = False,
                 none_ok: bool = False, finite: bool = True, why: str | None = None):
    """``value`` as an int (``integer``) or float in the given range, else ConfigError.

    Rejects bools, strings and (unless ``finite=False``) NaN and infinities. ``none_ok``
    lets None through (returned as None). ``why`` follows an upper-bound error (why the
    bound is there).
    """
    if value is None and none_ok:
        return None
    kind = "an integer" if integer else ("a finite number" if finite else "a number")
    rng = _range_text(gt, ge, lt, le)
    want = f"it must be {kind}" + (f" {rng}" if rng else "") + (" (or none)" if none_ok else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise invalid(field, value, want)
    if integer:
        if not isinstance(value, numbers.Integral):
            raise invalid(field, value, want)
        v = int(value)
    else:
        v = float(value)
        if math.isnan(v) or (finite and not math.isfinite(v)):
            raise invalid(field, value, want)
    if (gt is not None and not v > gt) or (ge is not None and not v >= ge):
        raise invalid(field, value, want)
    if (lt is not None and not v < lt) or (le is not None and not v <= le):
        raise invalid(field, value, f"{want}; {why}" if why else want)
    return v


#: The rule of a seed (``check_number(field, v, **SEED)``).
SEED = {"integer": True, "ge": 0, "le": MAX_SEED, "why": LIMIT_WHY}


def check_seed(field: str, value) -> int:
    """A seed: an integer in [0, MAX_SEED]."""
    return check_number(field, value, **SEED)


def check_name(field: str, value, *, none_ok: bool = False, what: str = "a name") -> str | None:
    """A non-empty string (surrounding blanks are an error too)."""
    if value is None and none_ok:
        return None
    if isinstance(value, str) and not value.strip():
        raise invalid(field, value, f"it must not be empty; give {what}")
    if not isinstance(value, str):
        raise invalid(field, value, f"it must be {what} (a string)")
    return value


def check_choice(field: str, value, allowed) -> str:
    """``value`` if it is one of ``allowed`` (listed in the error)."""
    allowed = list(allowed)
    if isinstance(value, (list, dict, set)) or value not in allowed:
        raise invalid(field, value, f"allowed: {', '.join(map(str, allowed))}")
    return value


def check_keys(field: str, d, allowed, *, what: str = "key") -> dict:
    """``d`` if it is a mapping whose keys are all in ``allowed``."""
    allowed = list(allowed)
    if not isinstance(d, dict):
        raise invalid(field, d, f"it must be a mapping with keys among {', '.join(allowed)}")
    unknown = [k for k in d if k not in allowed]
    if unknown:
        raise ConfigError(f"{field}: unknown {what}(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}")
    return d


# ====================================================================== typed values (pydantic)
_NONE = type(None)
_NAMES = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string", dict: "a mapping",
          list: "a list", tuple: "a list", _NONE: "none"}


def split_range(tp) -> tuple[object, str]:
    """(base annotation, range text) of ``Annotated[base, Interval(...)]``; else (tp, "")."""
    if typing.get_origin(tp) is not typing.Annotated:
        return tp, ""
    base, *meta = typing.get_args(tp)
    rng = [_range_text(m.gt, m.ge, m.lt, m.le) for m in meta if isinstance(m, Interval)]
    return base, " ".join(filter(None, rng))


def describe_type(tp) -> str:
    """What a value of annotation ``tp`` looks like, in words (for error messages)."""
    base, rng = split_range(tp)
    if rng:
        return f"{describe_type(base)} {rng}"
    tp = base
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        words = [describe_type(a) for a in args if a is not _NONE] + (["none"] if _NONE in args else [])
        return " or ".join(dict.fromkeys(words))
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if origin is not None:
        return _NAMES.get(origin, getattr(origin, "__name__", str(tp)))
    return _NAMES.get(tp, f"a {getattr(tp, '__name__', str(tp))}")


def type_name(tp) -> str:
    """Short annotation text: ``float``, ``int | None``."""
    if tp is None or tp is inspect.Parameter.empty:
        return ""
    base, rng = split_range(tp)
    if rng:
        return f"{type_name(base)} {rng}"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if tp is _NONE:
        return "None"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


@functools.lru_cache(maxsize=None)
def _adapter(tp):
    """A strict pydantic TypeAdapter for ``tp`` (None where pydantic cannot build one)."""
    try:
        from pydantic import ConfigDict, TypeAdapter

        return TypeAdapter(tp, config=ConfigDict(strict=True, allow_inf_nan=False, arbitrary_types_allowed=True))
    except Exception:  # an annotation pydantic has no schema for: the type is not checked
        return None


def _plain(v):
    """numpy scalars as Python scalars (so strict validation accepts them); arrays, even
    of one element, stay arrays."""
    if type(v).__module__ == "numpy" and hasattr(v, "item") and getattr(v, "shape", None) == ():
        try:
            return v.item()
        except (TypeError, ValueError):
            return v
    return v


def type_ok(value, tp) -> tuple[bool, object]:
    """``(True, validated value)`` if ``value`` matches annotation ``tp``, else ``(False, value)``."""
    if tp is None or tp is inspect.Parameter.empty or tp is typing.Any or tp is object:
        return True, value
    try:
        hash(tp)
    except TypeError:
        return True, value
    ad = _adapter(tp)
    if ad is None:
        return True, value
    from pydantic import ValidationError

    try:
        return True, ad.validate_python(_plain(value))
    except ValidationError:
        return False, value


def check_typed(field: str, value, tp):
    """``value`` validated against annotation ``tp`` (strict), else ConfigError."""
    ok, v = type_ok(value, tp)
    if not ok:
        raise invalid(field, value, f"it must be {describe_type(tp)}")
    return v


# ====================================================================== call signatures
def _hints(obj) -> dict:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        return typing.get_type_hints(target, include_extras=True)  # keeps declared ranges (Annotated)
    except Exception:
        return {}


def signature_params(func) -> list[tuple[str, object, object]]:
    """``[(name, annotation, default)]`` of a callable's keyword parameters.

    A parameter without an annotation takes its default's type (bool, int, float, str).
    """
    try:
        return list(_signature_params(func))
    except TypeError:  # unhashable callable
        return list(_signature_params.__wrapped__(func))


@functools.lru_cache(maxsize=512)
def _signature_params(func) -> tuple:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return ()
    hints = _hints(func)
    out = []
    for name, p in sig.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) or name == "self":
            continue
        tp = hints.get(name)
        if tp is None and type(p.default) in (bool, int, float, str):
            tp = type(p.default)
        out.append((name, tp, p.default))
    return tuple(out)


def _accepts_var_keywords(func) -> bool:
    try:
        return _var_keywords(func)
    except TypeError:  # unhashable callable
        return _var_keywords.__wrapped__(func)


@functools.lru_cache(maxsize=512)
def _var_keywords(func) -> bool:
    try:
        return any(p.kind == p.VAR_KEYWORD for p in inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return True


def describe_params(params) -> str:
    """``a: float = 1.0, b: int = 4`` for :func:`signature_params` output."""
    parts = []
    for name, tp, default in params:
        t = type_name(tp)
        s = name + (f": {t}" if t else "")
        if default is not inspect.Parameter.empty:
            s += f" = {default!r}"
        parts.append(s)
    return ", ".join(parts)


def check_call_kwargs(owner: str, func, kwargs: dict, *, what: str = "parameter", label: str | None = None,
                      skip=()) -> dict:
    """Check keyword arguments against ``func``'s signature before calling it.

    Unknown names, missing required parameters and values of the wrong type raise a
    ConfigError that lists the parameters ``func`` takes (``owner`` prefixes the
    message, ``label`` names the callable in the listing). Returns the validated kwargs.
    """
    params = [p for p in signature_params(func) if p[0] not in skip]
    label = label or owner
    takes = f"{label} takes {describe_params(params)}" if params else f"{label} takes no {what}s"
    names = {p[0] for p in params}
    if not _accepts_var_keywords(func):
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise ConfigError(f"{owner}: unknown {what}{'s' if len(unknown) > 1 else ''} "
                              f"{', '.join(map(repr, unknown))}; {takes}")
    out = dict(kwargs)
    for name, tp, default in params:
        if name not in kwargs:
            if default is inspect.Parameter.empty:
                raise ConfigError(f"{owner}: missing {what} {name!r}; {takes}")
            continue
        ok, v = type_ok(kwargs[name], tp)
        if not ok:
            raise ConfigError(f"{owner}: {name}={kwargs[name]!r} is invalid; it must be {describe_type(tp)} ({takes})")
        out[name] = v
    return out


def checked_keywords(obj):
    """Decorator for a public function or class: a call with an unknown, missing or
    repeated argument is a ConfigError naming what it takes, like every other bad input,
    not Python's TypeError."""
    if inspect.isclass(obj):
        obj.__init__ = _checked(obj.__init__, obj.__name__)
        return obj
    return _checked(obj, obj.__qualname__)


def _checked(func, name: str):
    sig = inspect.signature(func)
    takes = ", ".join(p for p in sig.parameters if p != "self")

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:  # Python's message, without its qualified name
            why = str(e).replace(f"{func.__qualname__}() ", "").replace(f"{func.__name__}() ", "")
            raise ConfigError(f"{name}: {why}; it takes {takes}") from None
        return func(*args, **kwargs)

    return call


# ====================================================================== rule tables
#: The rule of a count that must be at least one (``check_number(field, v, **POSITIVE_INT)``).
POSITIVE_INT = {"integer": True, "ge": 1}
#: Rules of the quantities every entry point shares (flags, scenario keywords, YAML).
INSTANCES = {"integer": True, "ge": 1, "le": MAX_INSTANCES, "why": LIMIT_WHY}
QPS = {"gt": 0, "le": MAX_QPS, "why": LIMIT_WHY}
LOAD = {"gt": 0, "le": MAX_LOAD, "why": LIMIT_WHY}
SECONDS = {"gt": 0, "le": MAX_SECONDS, "why": LIMIT_WHY}
REQUESTS = {"integer": True, "ge": 1, "le": MAX_REQUESTS, "why": LIMIT_WHY}
SEEDS = {"integer": True, "ge": 1, "le": MAX_SEEDS, "why": LIMIT_WHY}
WORKERS = {"integer": True, "ge": 1, "le": MAX_WORKERS, "why": LIMIT_WHY}
CPU_KV_GB = {"ge": 0, "le": MAX_CPU_KV_GB, "why": LIMIT_WHY}
LINK_GBPS = {"gt": 0, "le": MAX_LINK_GBPS, "none_ok": True, "why": LIMIT_WHY}


def check_fields(prefix: str, cls, values: dict, rules: dict, skip=()) -> None:
    """Each of ``values`` (fields of dataclass ``cls``) against its rule in ``rules``
    (keywords of :func:`check_number`) or, without one, its annotation."""
    hints = _class_hints(cls)
    for name, v in values.items():
        if name in skip:
            continue
        field = f"{prefix}.{name}" if prefix else name
        if name in rules:
            check_number(field, v, **rules[name])
        else:
            check_typed(field, v, hints.get(name))


@functools.lru_cache(maxsize=None)
def _class_hints(cls) -> dict:
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return {}


# ====================================================================== environments
#: Environment keywords besides the scenario overrides (see docs/environments.md).
def require_extra(feature: str, modules=RL_MODULES, extra: str = "rl") -> None:
    """Raise MissingExtraError (one line: what is missing and how to install it) unless
    every module of ``modules`` imports."""
    import importlib

    missing = []
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError:
            missing.append(m.replace("_", "-"))
    if missing:
        how = RL_INSTALL if extra == "rl" else f'pip install -e ".[{extra}]"'
        raise MissingExtraError(f"{feature} needs the [{extra}] extra ({', '.join(missing)} not installed): {how}"
                                + (f" (CPU-only machines: {CPU_TORCH} first)" if "torch" in missing else ""))


# ====================================================================== output paths
def _nearest_existing(p: Path) -> Path:
    q = p
    while not q.exists() and q.parent != q:
        q = q.parent
    return q


def _probe_writable(field: str, target, d: Path) -> None:
    if not d.is_dir():
        raise OutputError(f"{field}={str(target)!r} is invalid; {d} exists and is not a directory")
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".llmsched-gym-probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OutputError(f"{field}={str(target)!r} is invalid; cannot write in {d} ({e.strerror or e})") from None


def _path_checked(check):
    """An OSError of the check itself (a name too long, a component not a directory) is
    an OutputError naming the field."""

    @functools.wraps(check)
    def run(field: str, path, *args, **kwargs):
        try:
            return check(field, path, *args, **kwargs)
        except OSError as e:
            raise OutputError(f"{field}={str(path)!r} is invalid; {e.strerror or e}") from None

    return run


#: What an error about existing results says (the CLI's flag for replacing them).
FORCE_HINT = "give --force to replace it, or another path"


@_path_checked
def check_output_file(field: str, path, *, force: bool = True) -> Path:
    """A file path results can be written to: not a directory, its directory creatable and
    writable, and (``force=False``) not an existing file. Checked before a run; creates
    nothing."""
    if path is None or not str(path).strip():
        raise invalid(field, "" if path is None else str(path), "give a file path, e.g. results.json")
    p = Path(path).expanduser()
    if p.is_dir():
        raise OutputError(f"{field}={str(path)!r} is invalid; it is a directory, give a file path inside it")
    if p.exists() and not p.is_file():
        raise OutputError(f"{field}={str(path)!r} is invalid; it exists and is not a regular file")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"{field}={str(path)!r} is invalid; the file is not writable")
    if p.exists() and not force:
        raise OutputError(f"{field}={str(path)!r}: the file exists; {FORCE_HINT}")
    _probe_writable(field, path, _nearest_existing(p.parent.resolve() if p.parent != Path("") else Path.cwd()))
    return p


@_path_checked
def check_output_dir(field: str, path, *, force: bool = True) -> Path:
    """A directory results can be written into (existing or creatable, writable), and
    (``force=False``) not one that already holds files."""
    if path is None or not str(path).strip():
        raise invalid(field, "" if path is None else str(path), "give a directory path")
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise OutputError(f"{field}={str(path)!r} is invalid; it exists and is not a directory")
    held = sorted(q.name for q in p.iterdir()) if p.is_dir() else []
    if held and not force:
        raise OutputError(f"{field}={str(path)!r}: the directory already holds {len(held)} file(s) "
                          f"({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}); "
                          f"{FORCE_HINT.replace('it', 'them', 1)}")
    _probe_writable(field, path, _nearest_existing(p.resolve()))
    return p


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file, then ``os.replace``).

    Creates missing parent directories. On any failure the temporary file is removed,
    ``path`` keeps its old content (or stays absent), and an OutputError names it.
    """
    p = Path(path)
    tmp = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise OutputError(f"cannot write {p}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return p


def atomic_write_text(path, text: str) -> Path:
    """:func:`atomic_write_bytes` for text (UTF-8)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def fallback_dir(prefix: str = "llmsched-gym-") -> Path:
    """A fresh directory under the system temporary directory, for results that could not
    be written where asked (so a finished run is never lost)."""
    return Path(tempfile.mkdtemp(prefix=prefix))
