"""One validation layer for every entry point.

CLI flags, policy specs (``NAME:key=value``), scenario YAML and ``make_scenario``
keywords, environment keywords, trace options and output paths are all checked *before*
any simulation starts. A bad value raises :class:`~llmsched_gym.errors.ConfigError` (a
``ValueError``) whose message is one line naming the field, the value and what is
allowed, e.g.::

    cluster.instances=0 is invalid; it must be an integer in [1, 1024]
    policy 'llm-d': prefix_weight='abc' is invalid; it must be a finite number in [0, 1000000]
        (llm-d takes queue_weight: float in [0, 1000000] = 2.0, ...)

The CLI prints that line and exits with code 2 (see docs/architecture.md, "Bad input").

The rules are field types: a configuration is a pydantic model (:func:`config_dataclass`
for the configs, a ``BaseModel`` for the settings around them) whose annotations carry the
ranges (:func:`ranged`, and the shared types below: ``Instances``, ``Rate``, ``Duration``,
..., each with its upper bound, the ``MAX_*`` limits), validated strictly (no string to
number, no bool to int, no non-finite floats) once, when it is built; :func:`model_error`
turns pydantic's error into the one line. A policy declares each parameter's range in its
constructor's annotation, checked the same way (:func:`check_call_kwargs`). This is the
lowest layer: it imports nothing of the package but :mod:`llmsched_gym.errors`.
Results are written atomically (:func:`atomic_write_text`): a temporary file in the
target directory, then ``os.replace``, so a failed write never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

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
class SanityLimit:
    """Marks an upper bound that is a sanity limit (:data:`LIMIT_WHY`), not a physical one:
    an error above it says why the limit is there."""


class Described:
    """Annotation metadata: what a value of the annotated type looks like, in words, for a
    type whose structure says too little (``Annotated[dict[int, float], Described(...)]``)."""

    def __init__(self, text: str):
        self.text = text


def ranged(tp, *, gt=None, ge=None, lt=None, le=None, limit: bool = False):
    """``tp`` restricted to a range, e.g. ``ranged(int, ge=0, le=64)``; ``limit``: the
    upper bound is a sanity limit (its error adds :data:`LIMIT_WHY`)."""
    if limit:
        return typing.Annotated[tp, Interval(gt=gt, ge=ge, lt=lt, le=le), SanityLimit()]
    return typing.Annotated[tp, Interval(gt=gt, ge=ge, lt=lt, le=le)]


Fraction = ranged(float, ge=0, le=1)
Weight = ranged(float, ge=0, le=1e6)  # a score weight or factor
PositiveWeight = ranged(float, gt=0, le=1e6)
Seconds = ranged(float, gt=0, le=MAX_SECONDS)
NonNegativeSeconds = ranged(float, ge=0, le=MAX_SECONDS)
Tokens = ranged(int, ge=1, le=MAX_TOKENS)  # a token or block count
NonNegativeTokens = ranged(int, ge=0, le=MAX_TOKENS)
Count = ranged(int, ge=1, le=MAX_REQUESTS)

# The quantities every entry point shares (configs, scenario overrides, environment
# keywords, CLI flags): declared once, as the field types of the configuration models.
Instances = ranged(int, ge=1, le=MAX_INSTANCES, limit=True)
Rate = ranged(float, gt=0, le=MAX_QPS, limit=True)  # requests/s
LoadFactor = ranged(float, gt=0, le=MAX_LOAD, limit=True)  # times the cluster's capacity
Duration = ranged(float, gt=0, le=MAX_SECONDS, limit=True)  # simulated seconds
RequestCount = ranged(int, ge=1, le=MAX_REQUESTS, limit=True)
Seed = ranged(int, ge=0, le=MAX_SEED, limit=True)
SeedCount = ranged(int, ge=1, le=MAX_SEEDS, limit=True)
WorkerCount = ranged(int, ge=1, le=MAX_WORKERS, limit=True)
CpuKvGb = ranged(float, ge=0, le=MAX_CPU_KV_GB, limit=True)
LinkGbps = ranged(float, gt=0, le=MAX_LINK_GBPS, limit=True)
TimeScale = ranged(float, gt=0, le=MAX_TIME_SCALE)
#: A non-empty name (blanks alone are not a name).
Name = typing.Annotated[str, StringConstraints(pattern=r"\S")]


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


def check_seed(field: str, value) -> int:
    """A seed: an integer in [0, MAX_SEED]."""
    return check_typed(field, value, Seed)


def check_name(field: str, value, *, none_ok: bool = False, what: str = "a name") -> str | None:
    """A non-empty string (surrounding blanks are an error too)."""
    if value is None and none_ok:
        return None
    if isinstance(value, str) and not value.strip():
        raise invalid(field, value, f"it must not be empty; give {what}")
    if not isinstance(value, str):
        raise invalid(field, value, f"it must be {what} (a string)")
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
    if tp is Name:
        return "a non-empty string"
    if typing.get_origin(tp) is typing.Annotated:
        text = next((m.text for m in typing.get_args(tp)[1:] if isinstance(m, Described)), None)
        if text is not None:
            return text
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
    name = getattr(tp, "__name__", str(tp))
    return _NAMES.get(tp, f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}")


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
    try:
        return True, ad.validate_python(_plain(value))
    except ValidationError:
        return False, value


def check_typed(field: str, value, tp):
    """``value`` validated against annotation ``tp`` (strict), else ConfigError naming
    ``field``; above a sanity limit (:class:`SanityLimit`) the error says why it is there."""
    ok, v = type_ok(value, tp)
    if not ok:
        want = f"it must be {describe_type(tp)}"
        try:
            _adapter(tp).validate_python(_plain(value))
        except ValidationError as e:
            if e.errors()[0]["type"] in _ABOVE and _has_sanity_limit(tp):
                want += f"; {LIMIT_WHY}"
        raise invalid(field, value, want)
    return v


# ====================================================================== configuration models
#: How every configuration model validates: strict types (no string to number, no bool to
#: int), finite numbers, unknown fields refused.
STRICT = ConfigDict(strict=True, allow_inf_nan=False, arbitrary_types_allowed=True, extra="forbid")
#: pydantic's error types of a value above its upper bound.
_ABOVE = ("less_than", "less_than_equal")
_UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")
_MISSING = ("missing", "missing_argument", "missing_keyword_only_argument")


def _has_sanity_limit(tp) -> bool:
    """Whether annotation ``tp`` (or a member of its union) carries :class:`SanityLimit`."""
    if typing.get_origin(tp) is typing.Annotated:
        return any(isinstance(m, SanityLimit) for m in typing.get_args(tp)[1:])
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_has_sanity_limit(a) for a in typing.get_args(tp))
    return False


def _nested_model(tp):
    """The BaseModel that annotation ``tp`` holds (``M`` or ``M | None``), else None."""
    for t in typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _without_none(tp):
    """Annotation ``tp`` without its ``None`` alternative."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not _NONE]
        return args[0] if len(args) == 1 else typing.Union[tuple(args)]
    return tp


def model_error(exc: ValidationError, owner, *, prefix: str = "", label: str | None = None,
                names: dict | None = None, what: str = "field") -> ConfigError:
    """The one-line ConfigError of a configuration model's ValidationError.

    ``owner`` is the model (a :func:`config_dataclass` or a ``BaseModel``). A field shows
    as ``prefix.field`` (or ``names[field]``, e.g. the CLI flag that set it) with its value
    and what its annotation allows; unknown names list what the model takes (``label``
    says whose, ``what`` calls them fields or keywords); a check of the model's own (a
    nested config, a cross-field rule) raised a ConfigError whose message is kept, under
    ``prefix``.
    """
    errors = exc.errors(include_url=False)
    e = next((x for x in errors if x["type"] in _UNKNOWN), errors[0])
    # Walk the error's location down the nested models: the field it names and its annotation.
    path, model, tp = [], owner, None
    for part in e["loc"]:
        if isinstance(part, int) and not path and not issubclass(owner, BaseModel):  # a positional argument
            part = list(model_fields(owner))[part]
        if model is None or part not in model_fields(model):
            break
        tp = model_fields(model)[part]
        path.append(part)
        model = _nested_model(tp) if len(path) < len(e["loc"]) else model
    dotted = ".".join(str(p) for p in path)
    if e["type"] in _UNKNOWN:
        parent = model_fields(model)
        where = ".".join(filter(None, [prefix, ".".join(map(str, path[:-1]))]))
        unknown = [x["loc"][-1] for x in errors if x["type"] in _UNKNOWN and x["loc"][:-1] == e["loc"][:-1]]
        whose = label if len(e["loc"]) == 1 else where
        whose = whose or (f"{prefix} ({owner.__name__})" if prefix else owner.__name__)
        return ConfigError(f"{whose}: unknown {what}{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(map(repr, unknown))}; allowed: {', '.join(parent)}")
    if e["type"] in _MISSING:
        return ConfigError(f"{label or prefix or owner.__name__}: missing required {what} {e['loc'][-1]!r}")
    if e["type"] == "value_error" and isinstance(e.get("ctx", {}).get("error"), ConfigError):
        message = str(e["ctx"]["error"])  # a nested config's or a cross-field check's, naming its field
        if dotted in (names or {}) and message.startswith(f"{dotted}="):  # the field's own value: by its flag
            return ConfigError(names[dotted] + message[len(dotted):])
        return ConfigError(f"{prefix}.{message}" if prefix and path else message)
    shown = (names or {}).get(dotted) or ".".join(filter(None, [prefix, dotted]))
    if dotted in (names or {}):  # a flag given a value: "or none" (leaving it out) is no choice to offer
        tp = _without_none(tp)
    if typing.get_origin(_without_none(tp)) is typing.Literal:  # a choice among names
        want = f"choose one of {', '.join(map(str, typing.get_args(_without_none(tp))))}"
    else:
        want = f"it must be {describe_type(tp)}"
    if e["type"] in _ABOVE and _has_sanity_limit(tp):
        want += f"; {LIMIT_WHY}"
    return ConfigError(f"{shown}={e['input']!r} is invalid; {want}")


@functools.lru_cache(maxsize=None)
def model_fields(owner) -> dict:
    """``{field: annotation}`` of a configuration model (a ``BaseModel`` or a
    :func:`config_dataclass`), in declaration order, ranges included."""
    if isinstance(owner, type) and issubclass(owner, BaseModel):
        return {k: _annotated(f) for k, f in owner.model_fields.items()}
    hints = typing.get_type_hints(owner, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(owner)}


def _annotated(field_info):
    """A BaseModel field's annotation with its constraints (pydantic keeps them apart)."""
    if not field_info.metadata:
        return field_info.annotation
    return typing.Annotated[(field_info.annotation, *field_info.metadata)]


def validate_model(model: type[BaseModel], values: dict, *, prefix: str = "", label: str | None = None,
                   names: dict | None = None, what: str = "field") -> BaseModel:
    """``values`` validated by ``model`` (numpy scalars taken as Python ones); a bad value
    is a one-line ConfigError (:func:`model_error`)."""
    values = {k: _plain(v) for k, v in values.items()}
    try:
        return model.model_validate(values)
    except ValidationError as e:
        raise model_error(e, model, prefix=prefix, label=label, names=names, what=what) from None


def config_dataclass(prefix: str, *, frozen: bool = False):
    """Class decorator: a pydantic dataclass validated with :data:`STRICT` when it is built
    (``dataclasses.replace`` included) and never again, so a hot path pays nothing.

    The field annotations are the rules (types, ranges as :func:`ranged`); ``__post_init__``
    adds the cross-field ones. Errors are one-line ConfigErrors naming ``prefix.field``.
    """

    def wrap(cls):
        cls = pydantic_dataclass(cls, config=STRICT, frozen=frozen)
        build = cls.__init__

        @functools.wraps(build)
        def __init__(self, *args, **kwargs):
            kwargs = {k: _plain(v) for k, v in kwargs.items()}
            try:
                build(self, *args, **kwargs)
            except ValidationError as e:
                raise model_error(e, cls, prefix=prefix) from None

        cls.__init__ = __init__
        return cls

    return wrap


def from_mapping(cls):
    """Annotation metadata of a field holding a :func:`config_dataclass`: a mapping given
    for it is built with ``cls(**mapping)`` (its errors name the nested field)."""

    def build(value):
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return cls(**value)
        return value

    return BeforeValidator(build)


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


# ====================================================================== optional extras
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
