"""Seeded, vectorized synthetic workloads described by a small declarative spec.

A :class:`WorkloadSpec` combines an arrival process (:class:`ArrivalSpec`), token-length
distributions (:class:`LengthSpec`), priority classes (:class:`ClassSpec`) and a prefix
structure (:class:`PrefixSpec`); :func:`generate` turns it into a
:class:`~llmsched_gym.workloads.workload.Workload`. Specs map one-to-one onto YAML/JSON dicts via
``from_dict``/``to_dict``; every field is validated and errors name the field path
(``workload.arrival.rate``) and what is allowed.

Model of a request stream:

* The arrival process emits *units*: a single request or the first turn of a multi-turn
  session. Unit starts are a renewal process with unit-mean gaps (exponential, Gamma or
  Weibull with the given CV) mapped through the integrated rate curve (time rescaling),
  so the local rate is ``rate * curve(t)``. The unit rate is ``rate`` divided by the
  expected requests per unit, so ``rate`` is the request rate; ``cv`` is the CV of unit
  inter-arrival times (equal to the request CV when there are no sessions).
* A request's prompt is ``[system prompt of its group] [session history] [new tokens]``:
  ``input`` gives the new tokens per request, ``output`` the generated tokens. Turn
  ``k+1`` of a session has prompt = turn ``k``'s prompt + turn ``k``'s output + new
  tokens, and arrives open-loop ``output_k / decode_tokens_per_s + think`` seconds after
  turn ``k`` (an estimate of turn ``k``'s decode time plus an exponential think time).
* Prefix structure is chained block hashes over ``block_tokens``-token blocks, as in
  the Mooncake trace: the full blocks of a group's system prompt carry the group's ids;
  a session turn reuses the ids of the previous turn's full blocks; all other blocks
  get fresh ids.
* Generation starts a warm-up before ``t = 0`` (as long as the longest session) so that
  the request rate is stationary from ``t = 0``; requests before 0 are dropped.
"""

from __future__ import annotations

import inspect
import math
import sys
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..errors import ConfigError
from ..validation import MAX_QPS, MAX_REQUESTS, MAX_SECONDS, MAX_TOKENS
from .workload import Workload

PROCESSES = ("poisson", "gamma", "weibull")
DISTRIBUTIONS = ("fixed", "gaussian", "lognormal", "empirical")
#: Supported CV range of Gamma and Weibull inter-arrival times.
CV_RANGE = (0.05, 10.0)


# ---------------------------------------------------------------------------- validation


def _err(path: str, value, want: str) -> ConfigError:
    return ConfigError(f"{path}={value!r} is invalid; {want}")


def _num(path: str, v, *, lo: float | None = None, hi: float | None = None, strict: bool = False) -> float:
    """Check that ``v`` is a finite real number in ``[lo, hi]`` (``(lo, hi]`` when strict)."""
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float, np.integer, np.floating))
        or not math.isfinite(v)
    ):
        raise _err(path, v, "it must be a finite number")
    if lo is not None and (v <= lo if strict else v < lo):
        raise _err(
            path,
            v,
            f"it must be {'>' if strict else '>='} {lo}" + (f" and <= {hi}" if hi is not None else ""),
        )
    if hi is not None and v > hi:
        raise _err(path, v, f"it must be <= {hi}")
    return float(v)


def _int(path: str, v, *, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _err(path, v, "it must be an integer")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _err(path, v, "it must be an integer" + (f" >= {lo}" if lo is not None else "")
                   + (f" and <= {hi}" if hi is not None else ""))
    return int(v)


def _choice(path: str, v, allowed) -> str:
    if v not in allowed:
        raise _err(path, v, f"allowed: {', '.join(allowed)}")
    return v


def _keys(path: str, d, known) -> dict:
    """Check that ``d`` is a mapping whose keys are all in ``known``."""
    if not isinstance(d, dict):
        raise ConfigError(f"{path} must be a mapping with keys {', '.join(known)}, got {type(d).__name__}")
    unknown = [k for k in d if k not in known]
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; known keys: {', '.join(known)}"
        )
    return d


def _typed(path: str, v, cls):
    """Check that a nested spec has its spec type (a dict belongs in ``from_dict``)."""
    if not isinstance(v, cls):
        raise _err(path, v, f"it must be a {cls.__name__} (use WorkloadSpec.from_dict for plain dicts)")
    return v


def _plain(v):
    """Tuples and numpy scalars to plain lists/numbers, so ``to_dict`` is YAML-safe."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v.item() if isinstance(v, np.generic) else v


class _Spec:
    """``from_dict``/``to_dict`` shared by the spec dataclasses.

    Nested specs are listed in ``_nested`` (field -> parser of the raw value); all other
    fields are taken as given and checked by ``validate``.
    """

    _nested: dict = {}

    @classmethod
    def from_dict(cls, d, path: str = ""):
        """Build and validate a spec from a plain dict; ``path`` prefixes error messages."""
        path = path or cls._default_path
        names = [f.name for f in fields(cls)]
        _keys(path, d, names)
        kwargs = {k: (cls._nested[k](v, f"{path}.{k}") if k in cls._nested else v) for k, v in d.items()}
        spec = cls(**kwargs)
        spec.validate(path)
        return spec

    def to_dict(self) -> dict:
        """The spec as a plain dict (lists, numbers, strings) that ``from_dict`` accepts."""
        return _plain(asdict(self))


# ---------------------------------------------------------------------------- lengths


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz-Stegun 7.1.26 erf, |error| < 1.5e-7; numpy has no erf)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)


@dataclass
class LengthSpec(_Spec):
    """A distribution of positive integer lengths (tokens, turns).

    Attributes:
        dist: ``fixed`` (always ``mean``), ``gaussian`` (``mean``, ``std``), ``lognormal``
            (``mean`` and ``std`` of the lognormal itself, not of its log) or
            ``empirical`` (uniform over ``values``, or with ``weights``).
        mean, std: parameters of the distribution before rounding and clipping.
        min, max: samples are rounded and clipped to ``[min, max]`` (``max=None``: no cap);
            clipping moves the mean, see :meth:`mean_value`.
        values, weights: the support and (optional) weights of ``empirical``.

    In a dict, a bare number is shorthand for ``{dist: fixed, mean: number}``.
    """

    dist: str = "fixed"
    mean: float = 1.0
    std: float = 0.0
    min: int = 1
    max: int | None = None
    values: list[int] | None = None
    weights: list[float] | None = None

    _default_path = "length"

    @classmethod
    def from_dict(cls, d, path: str = "") -> LengthSpec:
        if isinstance(d, (int, float)) and not isinstance(d, bool):
            d = {"dist": "fixed", "mean": d}
        return super().from_dict(d, path)

    def validate(self, path: str = "length") -> None:
        """Raise ConfigError naming ``path.<field>`` for an invalid field."""
        _choice(f"{path}.dist", self.dist, DISTRIBUTIONS)
        lo = _int(f"{path}.min", self.min, lo=1, hi=MAX_TOKENS)
        if self.max is not None and _int(f"{path}.max", self.max, lo=1, hi=MAX_TOKENS) < lo:
            raise _err(f"{path}.max", self.max, f"it must be >= {path}.min ({lo})")
        if self.dist == "empirical":
            if not isinstance(self.values, (list, tuple, np.ndarray)) or len(self.values) == 0:
                raise _err(
                    f"{path}.values", self.values, "dist 'empirical' needs a non-empty list of integers >= 1"
                )
            for i, v in enumerate(self.values):
                _int(f"{path}.values[{i}]", v, lo=1, hi=MAX_TOKENS)
            if self.weights is not None:
                if not isinstance(self.weights, (list, tuple, np.ndarray)) or len(self.weights) != len(
                    self.values
                ):
                    raise _err(
                        f"{path}.weights", self.weights, f"it must be a list of {len(self.values)} numbers"
                    )
                for i, w in enumerate(self.weights):
                    _num(f"{path}.weights[{i}]", w, lo=0.0)
                if sum(self.weights) <= 0:
                    raise _err(f"{path}.weights", self.weights, "the weights must not all be 0")
            return
        for name in ("values", "weights"):
            if getattr(self, name) is not None:
                raise _err(f"{path}.{name}", getattr(self, name), "it only applies to dist 'empirical'")
        _num(f"{path}.mean", self.mean, lo=0.0, strict=True, hi=MAX_TOKENS)
        _num(f"{path}.std", self.std, lo=0.0)

    def _clip(self, x: np.ndarray) -> np.ndarray:
        hi = np.inf if self.max is None else self.max
        return np.clip(np.rint(x), self.min, hi).astype(np.int64)

    def _lognormal_params(self) -> tuple[float, float]:
        sigma2 = math.log1p((self.std / self.mean) ** 2)
        return math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` samples (int64) drawn with ``rng``."""
        if self.dist == "empirical":
            p = None if self.weights is None else np.asarray(self.weights, float) / np.sum(self.weights)
            return self._clip(rng.choice(np.asarray(self.values, np.int64), n, p=p))
        if self.dist == "fixed" or self.std == 0:
            return self._clip(np.full(n, float(self.mean)))
        if self.dist == "gaussian":
            return self._clip(rng.normal(self.mean, self.std, n))
        mu, sigma = self._lognormal_params()
        return self._clip(rng.lognormal(mu, sigma, n))

    def pmf(self) -> tuple[np.ndarray, np.ndarray]:
        """Support and probabilities of the rounded, clipped samples.

        Unbounded Gaussian/lognormal tails are cut where the remaining mass is < 1e-9.
        """
        if self.dist == "empirical":
            v = self._clip(np.asarray(self.values, float))
            w = np.ones(len(v)) if self.weights is None else np.asarray(self.weights, float)
            uniq, inv = np.unique(v, return_inverse=True)
            return uniq, np.bincount(inv, w) / w.sum()
        if self.dist == "fixed" or self.std == 0:
            return self._clip(np.array([float(self.mean)])), np.ones(1)
        if self.dist == "gaussian":
            cdf = lambda x: _norm_cdf((x - self.mean) / self.std)  # noqa: E731
            tail = self.mean + 6.1 * self.std
        else:
            mu, sigma = self._lognormal_params()
            cdf = lambda x: _norm_cdf((np.log(np.maximum(x, 1e-300)) - mu) / sigma)  # noqa: E731
            tail = math.exp(mu + 6.1 * sigma)
        hi = int(min(self.max if self.max is not None else math.inf, max(math.ceil(tail), self.min)))
        v = np.arange(self.min, hi + 1)
        edges = cdf(np.append(v - 0.5, v[-1] + 0.5))
        edges[0], edges[-1] = 0.0, 1.0  # clipping puts both tails on the end values
        return v, np.diff(edges)

    def mean_value(self) -> float:
        """Expected value of the rounded, clipped samples."""
        v, p = self.pmf()
        return float(v @ p)


def _as_length(v):
    """A bare number means a fixed length (so ``system_prompt_tokens=512`` works)."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return LengthSpec("fixed", v)
    return v


# ---------------------------------------------------------------------------- arrivals


def diurnal_curve(
    period_s: float = 86400.0, amplitude: float = 0.5, peak_s: float = 0.0, points: int = 48
) -> list[tuple[float, float]]:
    """Rate multiplier ``1 + amplitude * cos(2 pi (t - peak_s) / period_s)`` over one period.

    Args:
        period_s: length of a day (or of any cycle), seconds.
        amplitude: relative swing in [0, 1]; the multiplier averages 1.
        peak_s: time of the peak within the period.
        points: knots of the piecewise-linear approximation.
    """
    t = np.linspace(0.0, period_s, points + 1)
    m = 1.0 + amplitude * np.cos(2 * np.pi * (t - peak_s) / period_s)
    return [(float(a), float(b)) for a, b in zip(t, m)]


def burst_curve(
    start_s: float, duration_s: float, multiplier: float, ramp_s: float = 0.0
) -> list[tuple[float, float]]:
    """Multiplier 1, rising linearly over ``ramp_s`` to ``multiplier`` at ``start_s``,
    held for ``duration_s``, then falling back to 1 over ``ramp_s``.
    """
    end = start_s + duration_s
    return [
        (0.0, 1.0),
        (start_s - ramp_s, 1.0),
        (start_s, multiplier),
        (end, multiplier),
        (end + ramp_s, 1.0),
    ]


def ramp_curve(
    start_s: float, end_s: float, start_multiplier: float = 1.0, end_multiplier: float = 2.0
) -> list[tuple[float, float]]:
    """Multiplier ``start_multiplier`` until ``start_s``, linear to ``end_multiplier`` at ``end_s``."""
    return [(0.0, start_multiplier), (start_s, start_multiplier), (end_s, end_multiplier)]


#: Named curves usable as ``rate_curve: {kind: <name>, ...keyword arguments...}``.
CURVES = {"diurnal": diurnal_curve, "burst": burst_curve, "ramp": ramp_curve}


class _Curve:
    """A piecewise-linear rate ``rate * m(t)`` with exact integral and inverse.

    ``m`` holds its last value after the last knot, or repeats with ``period`` (the
    last knot is extended to ``period`` if it ends earlier). For ``t < 0`` it is ``m(0)``.
    """

    def __init__(self, rate: float, t: np.ndarray, m: np.ndarray, period: float | None):
        if period is not None and t[-1] < period:
            t, m = np.append(t, period), np.append(m, m[-1])
        self.rate, self.t, self.m, self.period = rate, t, m, period
        dt = np.diff(t)
        self.slope = np.divide(np.diff(m), dt, out=np.zeros_like(dt), where=dt > 0)
        self.L = np.concatenate([[0.0], np.cumsum(rate * dt * (m[:-1] + m[1:]) / 2)])
        self.m0 = float(m[t == t[0]][-1])  # the value just after 0 when knots repeat at 0

    def integral(self, x: np.ndarray) -> np.ndarray:
        """Expected number of events in ``[0, x]`` (negative for ``x < 0``)."""
        x = np.asarray(x, float)
        cycles = np.zeros_like(x)
        if self.period is not None:
            cycles = np.floor(np.maximum(x, 0) / self.period)
            x = x - cycles * self.period
        k = np.clip(np.searchsorted(self.t, x, side="right") - 1, 0, len(self.t) - 1)
        d = x - self.t[k]
        slope = np.append(self.slope, 0.0)[k]
        inside = self.rate * (self.m[k] * d + slope * d * d / 2)
        return np.where(x < 0, self.rate * self.m0 * x, cycles * self.L[-1] + self.L[k] + inside)

    def inverse(self, y: np.ndarray) -> np.ndarray:
        """Times ``t`` with ``integral(t) == y``."""
        y = np.asarray(y, float)
        cycles = np.zeros_like(y)
        if self.period is not None:
            cycles = np.floor(np.maximum(y, 0) / self.L[-1])
            y = y - cycles * self.L[-1]
        k = np.clip(np.searchsorted(self.L, y, side="right") - 1, 0, len(self.t) - 1)
        slope = np.append(self.slope, 0.0)[k]
        yy = (y - self.L[k]) / self.rate
        # Root of m_k d + s d^2 / 2 = yy in the form that is stable for s -> 0 and m_k -> 0.
        denom = self.m[k] + np.sqrt(np.maximum(self.m[k] ** 2 + 2 * slope * yy, 0.0))
        d = np.divide(2 * yy, denom, out=np.zeros_like(yy), where=denom > 0)
        seg_end = np.append(np.diff(self.t), np.inf)[k]
        t = self.t[k] + np.clip(d, 0.0, seg_end)
        t = t + cycles * (self.period or 0.0)
        return np.where(y < 0, y / (self.rate * self.m0) if self.m0 > 0 else 0.0, t)


@dataclass
class ArrivalSpec(_Spec):
    """When requests (units: single requests or session starts) arrive.

    Attributes:
        process: ``poisson``, ``gamma`` or ``weibull`` renewal process.
        rate: mean request rate (requests/s) where the rate curve is 1.
        cv: coefficient of variation of inter-arrival times; must be 1 for ``poisson``,
            in ``CV_RANGE`` for ``gamma``/``weibull`` (> 1 bursty, < 1 regular).
        rate_curve: time-varying multiplier of ``rate``: None (constant), a list of
            ``[t_s, multiplier]`` knots (piecewise linear, first at t=0, times
            non-decreasing, equal times make a step), or ``{kind: diurnal|burst|ramp,
            ...}`` with the keyword arguments of :data:`CURVES`. The mean rate over a
            horizon is ``rate`` times the curve's average over it.
        curve_period_s: repeat the curve with this period (``diurnal`` sets it).
    """

    process: str = "poisson"
    rate: float = 1.0
    cv: float = 1.0
    rate_curve: list | dict | None = None
    curve_period_s: float | None = None

    _default_path = "arrival"

    def validate(self, path: str = "arrival") -> None:
        _choice(f"{path}.process", self.process, PROCESSES)
        _num(f"{path}.rate", self.rate, lo=0.0, strict=True, hi=MAX_QPS)
        if self.process == "poisson":
            if _num(f"{path}.cv", self.cv) != 1.0:
                raise _err(
                    f"{path}.cv",
                    self.cv,
                    "process 'poisson' has cv 1; use 'gamma' or 'weibull' for another cv",
                )
        else:
            _num(f"{path}.cv", self.cv, lo=CV_RANGE[0])
            if self.cv > CV_RANGE[1]:
                raise _err(f"{path}.cv", self.cv, f"it must be in [{CV_RANGE[0]}, {CV_RANGE[1]}]")
        if self.curve_period_s is not None:
            _num(f"{path}.curve_period_s", self.curve_period_s, lo=0.0, strict=True)
        self.curve(path)

    def _knots(self, path: str) -> tuple[list, float | None]:
        """The curve's knots and repeat period, from either list or named form."""
        rc, period = self.rate_curve, self.curve_period_s
        if isinstance(rc, dict):
            kind = _choice(f"{path}.rate_curve.kind", rc.get("kind"), tuple(CURVES))
            params = inspect.signature(CURVES[kind]).parameters
            args = {k: v for k, v in rc.items() if k != "kind"}
            _keys(f"{path}.rate_curve", args, list(params))
            for k, v in args.items():
                if k == "points":
                    _int(f"{path}.rate_curve.points", v, lo=2)
                else:
                    _num(f"{path}.rate_curve.{k}", v, lo=0.0)
            missing = [k for k, p in params.items() if p.default is inspect.Parameter.empty and k not in args]
            if missing:
                raise ConfigError(f"{path}.rate_curve: kind {kind!r} needs {', '.join(missing)}")
            if kind == "diurnal":
                if args.get("amplitude", 0.5) > 1:
                    raise _err(f"{path}.rate_curve.amplitude", args["amplitude"], "it must be in [0, 1]")
                period = period or _num(
                    f"{path}.rate_curve.period_s", args.get("period_s", 86400.0), lo=0.0, strict=True
                )
            if kind == "burst" and args.get("ramp_s", 0.0) > args["start_s"]:
                raise _err(f"{path}.rate_curve.ramp_s", args["ramp_s"], "it must be <= start_s")
            if kind == "ramp" and args["end_s"] < args["start_s"]:
                raise _err(f"{path}.rate_curve.end_s", args["end_s"], "it must be >= start_s")
            return CURVES[kind](**args), period
        if not isinstance(rc, (list, tuple)) or len(rc) == 0:
            raise _err(
                f"{path}.rate_curve",
                rc,
                "use a list of [t_s, multiplier] pairs or {kind: " + "|".join(CURVES) + ", ...}",
            )
        for i, p in enumerate(rc):
            if not isinstance(p, (list, tuple)) or len(p) != 2:
                raise _err(f"{path}.rate_curve[{i}]", p, "each knot is a [t_s, multiplier] pair")
            _num(f"{path}.rate_curve[{i}][0]", p[0], lo=0.0)
            _num(f"{path}.rate_curve[{i}][1]", p[1], lo=0.0)
        return list(rc), period

    def curve(self, path: str = "arrival") -> _Curve:
        """The validated rate curve (``rate * multiplier``)."""
        if self.rate_curve is None:
            return _Curve(self.rate, np.zeros(1), np.ones(1), None)
        knots, period = self._knots(path)
        t, m = np.array(knots, float).T
        if t[0] != 0:
            raise _err(f"{path}.rate_curve[0][0]", knots[0][0], "the first knot must be at t=0")
        if np.any(np.diff(t) < 0):
            i = int(np.flatnonzero(np.diff(t) < 0)[0]) + 1
            raise _err(f"{path}.rate_curve[{i}][0]", knots[i][0], "knot times must be non-decreasing")
        if period is not None and t[-1] > period:
            raise _err(f"{path}.curve_period_s", period, f"it must be >= the last knot time {t[-1]}")
        if (m[-1] if period is None else m.max()) <= 0:
            raise _err(f"{path}.rate_curve", self.rate_curve, "the rate must not stay 0 forever")
        return _Curve(self.rate, t, m, period)

    def unit_gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` unit-mean inter-arrival gaps with the process's CV."""
        if self.process == "poisson":
            return rng.exponential(1.0, n)
        if self.process == "gamma":
            shape = self.cv**-2
            return rng.gamma(shape, 1.0 / shape, n)
        k = _weibull_shape(self.cv)
        return rng.weibull(k, n) / math.gamma(1 + 1 / k)


def _weibull_shape(cv: float) -> float:
    """Weibull shape ``k`` whose CV is ``cv`` (bisection on log k; CV falls as k grows)."""

    def cv_of(k: float) -> float:
        return math.sqrt(math.exp(math.lgamma(1 + 2 / k) - 2 * math.lgamma(1 + 1 / k)) - 1)

    lo, hi = math.log(0.05), math.log(200.0)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cv_of(math.exp(mid)) > cv else (lo, mid)
    return math.exp((lo + hi) / 2)


# ---------------------------------------------------------------------------- classes, prefix


@dataclass
class ClassSpec(_Spec):
    """A priority class.

    Attributes:
        name: display name (unique).
        priority: integer priority (unique; >= 0 critical, < 0 sheddable).
        share: fraction of sessions/single requests in this class; shares sum to 1.
        slo_ttft_s, slo_tpot_s: the class's SLOs in seconds (None: no SLO).
    """

    name: str = "standard"
    priority: int = 0
    share: float = 1.0
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None

    _default_path = "class"

    def validate(self, path: str = "class") -> None:
        if not isinstance(self.name, str) or not self.name:
            raise _err(f"{path}.name", self.name, "it must be a non-empty string")
        _int(f"{path}.priority", self.priority)
        _num(f"{path}.share", self.share, lo=0.0, hi=1.0)
        for name in ("slo_ttft_s", "slo_tpot_s"):
            if getattr(self, name) is not None:
                _num(f"{path}.{name}", getattr(self, name), lo=0.0, strict=True)


@dataclass
class PrefixSpec(_Spec):
    """Prefix structure: shared system prompts and multi-turn sessions.

    Attributes:
        block_tokens: tokens per hash block of the generated ``hash_ids``.
        system_prompt_groups: number of system-prompt groups (0: none).
        system_prompt_tokens: length of each group's prompt, drawn once per group
            (a LengthSpec, or an int in a dict).
        system_prompt_share: fraction of sessions/single requests that use a group.
        zipf_s: group popularity ~ 1 / rank**zipf_s (0: uniform).
        session_share: fraction of requests that belong to multi-turn sessions.
        turns: number of turns per session.
        think_time_s: mean (exponential) user think time between turns, seconds.
        decode_tokens_per_s: decode speed used to estimate a turn's service time; the
            next turn arrives ``output / decode_tokens_per_s + think`` after it.
    """

    block_tokens: int = 64
    system_prompt_groups: int = 0
    system_prompt_tokens: LengthSpec = field(default_factory=lambda: LengthSpec("fixed", 1024))
    system_prompt_share: float = 1.0
    zipf_s: float = 1.0
    session_share: float = 0.0
    turns: LengthSpec = field(default_factory=lambda: LengthSpec("fixed", 4))
    think_time_s: float = 10.0
    decode_tokens_per_s: float = 50.0

    _default_path = "prefix"

    def __post_init__(self) -> None:
        self.system_prompt_tokens = _as_length(self.system_prompt_tokens)
        self.turns = _as_length(self.turns)

    _nested = {"system_prompt_tokens": LengthSpec.from_dict, "turns": LengthSpec.from_dict}

    def validate(self, path: str = "prefix") -> None:
        _int(f"{path}.block_tokens", self.block_tokens, lo=1)
        _int(f"{path}.system_prompt_groups", self.system_prompt_groups, lo=0)
        _typed(f"{path}.system_prompt_tokens", self.system_prompt_tokens, LengthSpec).validate(
            f"{path}.system_prompt_tokens"
        )
        _num(f"{path}.system_prompt_share", self.system_prompt_share, lo=0.0, hi=1.0)
        _num(f"{path}.zipf_s", self.zipf_s, lo=0.0)
        _num(f"{path}.session_share", self.session_share, lo=0.0, hi=1.0)
        _typed(f"{path}.turns", self.turns, LengthSpec).validate(f"{path}.turns")
        _num(f"{path}.think_time_s", self.think_time_s, lo=0.0)
        _num(f"{path}.decode_tokens_per_s", self.decode_tokens_per_s, lo=0.0, strict=True)

    @property
    def enabled(self) -> bool:
        return (self.system_prompt_groups > 0 and self.system_prompt_share > 0) or self.session_share > 0

    def zipf_p(self) -> np.ndarray:
        p = np.arange(1, self.system_prompt_groups + 1, dtype=float) ** -self.zipf_s
        return p / p.sum()

    def session_unit_prob(self) -> float:
        """Probability that a unit is a session, so that ``session_share`` of requests are."""
        f, m = self.session_share, self.turns.mean_value()
        return f / (m * (1 - f) + f)


@dataclass
class WorkloadSpec(_Spec):
    """A synthetic workload: give exactly one of ``num_requests`` and ``duration_s``.

    Attributes:
        arrival: the arrival process.
        input: new prompt tokens per request (the whole prompt of a single request
            without a system prompt; system prompt and session history come on top).
        output: generated tokens per request.
        classes: priority classes with shares summing to 1.
        prefix: shared system prompts and sessions.
        num_requests: the first ``num_requests`` requests from t=0.
        duration_s: all requests arriving in ``[0, duration_s)``.
        name: label of the generated Workload.
    """

    arrival: ArrivalSpec = field(default_factory=ArrivalSpec)
    input: LengthSpec = field(default_factory=lambda: LengthSpec("fixed", 512))
    output: LengthSpec = field(default_factory=lambda: LengthSpec("fixed", 128))
    classes: list[ClassSpec] = field(default_factory=lambda: [ClassSpec()])
    prefix: PrefixSpec = field(default_factory=PrefixSpec)
    num_requests: int | None = None
    duration_s: float | None = None
    name: str = "synthetic"

    _default_path = "workload"

    def __post_init__(self) -> None:
        self.input = _as_length(self.input)
        self.output = _as_length(self.output)

    @staticmethod
    def _classes(v, path: str) -> list[ClassSpec]:
        if not isinstance(v, (list, tuple)):
            raise _err(path, v, "it must be a list of classes")
        return [ClassSpec.from_dict(c, f"{path}[{i}]") for i, c in enumerate(v)]

    _nested = {
        "arrival": ArrivalSpec.from_dict,
        "input": LengthSpec.from_dict,
        "output": LengthSpec.from_dict,
        "classes": _classes,
        "prefix": PrefixSpec.from_dict,
    }

    def validate(self, path: str = "workload") -> None:
        _typed(f"{path}.arrival", self.arrival, ArrivalSpec).validate(f"{path}.arrival")
        _typed(f"{path}.input", self.input, LengthSpec).validate(f"{path}.input")
        _typed(f"{path}.output", self.output, LengthSpec).validate(f"{path}.output")
        _typed(f"{path}.prefix", self.prefix, PrefixSpec).validate(f"{path}.prefix")
        if not isinstance(self.classes, (list, tuple)) or not self.classes:
            raise _err(f"{path}.classes", self.classes, "it must be a non-empty list of classes")
        for i, c in enumerate(self.classes):
            _typed(f"{path}.classes[{i}]", c, ClassSpec).validate(f"{path}.classes[{i}]")
        for attr in ("name", "priority"):
            vals = [getattr(c, attr) for c in self.classes]
            if len(set(vals)) != len(vals):
                raise _err(f"{path}.classes", vals, f"class {attr}s must be unique")
        total = sum(c.share for c in self.classes)
        if abs(total - 1.0) > 1e-6:
            shares = {c.name: c.share for c in self.classes}
            raise _err(f"{path}.classes[*].share", shares, f"shares must sum to 1 (they sum to {total:g})")
        if (self.num_requests is None) == (self.duration_s is None):
            raise ConfigError(f"{path}: give exactly one of num_requests and duration_s")
        if self.num_requests is not None:
            _int(f"{path}.num_requests", self.num_requests, lo=1, hi=MAX_REQUESTS)
        else:
            _num(f"{path}.duration_s", self.duration_s, lo=0.0, strict=True, hi=MAX_SECONDS)
        if not isinstance(self.name, str):
            raise _err(f"{path}.name", self.name, "it must be a string")

    def requests_per_unit(self) -> float:
        """Expected requests per unit (single request or session)."""
        pi = self.prefix.session_unit_prob()
        return 1 - pi + pi * self.prefix.turns.mean_value()

    def expected_units(self) -> float:
        """Expected number of units whose first request falls in the window."""
        if self.num_requests is not None:
            return self.num_requests / self.requests_per_unit()
        return float(self.arrival.curve().integral(self.duration_s)) / self.requests_per_unit()


# ---------------------------------------------------------------------------- generation


@dataclass(frozen=True)
class _Plan:
    """What generation needs of a validated spec that does not depend on the seed."""

    session_prob: float
    zipf_p: np.ndarray | None
    class_p: list
    unit_curve: _Curve
    n_units: int  # the first draw's unit count

    @staticmethod
    def of(spec: WorkloadSpec) -> _Plan:
        pre = spec.prefix
        curve = spec.arrival.curve()
        return _Plan(
            session_prob=pre.session_unit_prob(),
            zipf_p=pre.zipf_p() if pre.system_prompt_groups else None,
            class_p=[c.share for c in spec.classes],
            unit_curve=_Curve(curve.rate / spec.requests_per_unit(), curve.t, curve.m, curve.period),
            n_units=int(spec.expected_units() * 1.2) + 100,
        )


#: Plans of recently generated specs, by the spec's repr (its every field).
_PLANS: dict[str, _Plan] = {}


def _plan(spec: WorkloadSpec) -> _Plan:
    """The validated plan of ``spec``: episodes of an env regenerate the same spec with
    new seeds, and validating it and deriving its constants cost more than the draw."""
    with np.printoptions(threshold=sys.maxsize):  # arrays in full: a summarized repr would collide
        key = repr(spec)
    plan = _PLANS.get(key)
    if plan is None:
        spec.validate()
        if len(_PLANS) >= 256:
            _PLANS.clear()
        plan = _PLANS[key] = _Plan.of(spec)
    return plan


def _draw(spec: WorkloadSpec, plan: _Plan, seed: int, n_units: int) -> dict:
    """Units, their requests (in unit/turn order) and unit start times; see the module doc."""
    rng_units, rng_len, rng_arr = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    pre = spec.prefix
    U = n_units
    is_sess = rng_units.random(U) < plan.session_prob
    turns = np.where(is_sess, pre.turns.sample(rng_units, U), 1)
    G = pre.system_prompt_groups
    grouped = (rng_units.random(U) < pre.system_prompt_share) & (G > 0)
    group = np.where(grouped, rng_units.choice(max(G, 1), U, p=plan.zipf_p), -1)
    cls = rng_units.choice(len(spec.classes), U, p=plan.class_p)
    sys_len = pre.system_prompt_tokens.sample(rng_units, G)

    R = int(turns.sum())
    unit = np.repeat(np.arange(U), turns)
    first = np.cumsum(turns) - turns
    turn = np.arange(R) - first[unit]
    new = spec.input.sample(rng_len, R)
    out = spec.output.sample(rng_len, R)
    sys_tokens = np.where(group[unit] >= 0, sys_len[np.maximum(group[unit], 0)] if G else 0, 0)
    hist = np.concatenate([[0], np.cumsum(new + out)])
    prompt = sys_tokens + hist[:-1] - hist[first[unit]] + new
    think = rng_len.exponential(pre.think_time_s, R) if pre.think_time_s > 0 else np.zeros(R)
    delay = np.where(turn > 0, think + np.roll(out, 1) / pre.decode_tokens_per_s, 0.0)
    cum = np.cumsum(delay)
    offset = cum - cum[first[unit]]

    # Warm-up as long as the longest session, so the in-window rate is stationary.
    warmup = float(offset.max())
    unit_curve = plan.unit_curve
    tau = unit_curve.integral(-warmup) + np.cumsum(spec.arrival.unit_gaps(rng_arr, U))
    start = unit_curve.inverse(tau)
    return dict(
        unit=unit, turn=turn, group=group, cls=cls, is_sess=is_sess, sys_len=sys_len,
        sys_tokens=sys_tokens, prompt=prompt, out=out, arrival=start[unit] + offset, last_start=start[-1],
    )  # fmt: skip


def _hash_chains(d: dict, keep: np.ndarray, B: int) -> tuple[np.ndarray, np.ndarray]:
    """Chained block ids of the requests ``keep`` (in that order).

    Block ``k`` of a request is a group id if it is a full block of the group's system
    prompt; else it belongs to the first turn of the session in which it is a full
    block (so later turns reuse it), or to the request itself (fresh id).
    """
    unit, prompt = d["unit"], d["prompt"]
    R = len(prompt)
    nblk = -(-prompt // B)
    full = prompt // B
    grp_off = np.concatenate([[0], np.cumsum(d["sys_len"] // B)])
    blk_off = np.concatenate([[0], np.cumsum(nblk)])
    nb = nblk[keep]
    offsets = np.concatenate([[0], np.cumsum(nb)])
    r = np.repeat(keep, nb)
    k = np.arange(offsets[-1]) - np.repeat(offsets[:-1], nb)
    # Keys sort by unit then by full-block count (non-decreasing along a session's turns).
    big = int(full.max()) + 2
    pos = np.searchsorted(unit * big + full, unit[r] * big + k, side="right")
    same = unit[np.minimum(pos, R - 1)] == unit[r]
    owner = np.where((pos < R) & same, np.minimum(pos, r), r)
    g = d["group"][unit[r]]
    in_sys = k < d["sys_tokens"][r] // B
    ids = np.where(in_sys, grp_off[np.maximum(g, 0)] + k, grp_off[-1] + blk_off[owner] + k)
    return ids, offsets


def generate(spec: WorkloadSpec | dict, seed: int = 0) -> Workload:
    """Generate the workload ``spec`` describes; the same seed gives identical arrays.

    Args:
        spec: a WorkloadSpec or a dict for :meth:`WorkloadSpec.from_dict`.
        seed: seed of numpy's SeedSequence (independent streams for unit structure,
            token lengths and arrival gaps).
    """
    if isinstance(spec, dict):
        spec = WorkloadSpec.from_dict(spec)
    plan = _plan(spec)  # validates
    # Draw enough units to cover the window; double until they do (deterministic).
    n_units = plan.n_units
    while True:
        d = _draw(spec, plan, seed, n_units)
        arr = d["arrival"]
        if spec.duration_s is not None:
            if d["last_start"] >= spec.duration_s:
                cand = np.flatnonzero((arr >= 0) & (arr < spec.duration_s))
                keep = cand[np.argsort(arr[cand], kind="stable")]
                break
        else:
            cand = np.flatnonzero((arr >= 0) & (arr <= d["last_start"]))
            if len(cand) >= spec.num_requests:
                keep = cand[np.argsort(arr[cand], kind="stable")][: spec.num_requests]
                break
        n_units *= 2
    ids = offsets = None
    if spec.prefix.enabled:
        ids, offsets = _hash_chains(d, keep, spec.prefix.block_tokens)
    unit = d["unit"][keep]
    in_session = d["is_sess"][unit]
    session = np.full(len(keep), -1, np.int64)
    session[in_session] = np.unique(unit[in_session], return_inverse=True)[1]
    prio = np.array([c.priority for c in spec.classes], np.int64)
    return Workload(
        arrival_s=arr[keep],
        input_tokens=d["prompt"][keep],
        output_tokens=d["out"][keep],
        priority=prio[d["cls"][unit]],
        hash_ids=ids,
        hash_offsets=offsets,
        hash_block_tokens=spec.prefix.block_tokens if spec.prefix.enabled else 0,
        session_id=session,
        prefix_group=d["group"][unit],
        slo_ttft_s={c.priority: c.slo_ttft_s for c in spec.classes if c.slo_ttft_s is not None},
        slo_tpot_s={c.priority: c.slo_tpot_s for c in spec.classes if c.slo_tpot_s is not None},
        name=spec.name,
    )


# ---------------------------------------------------------------------------- analytics


def _mod_pmf(spec: LengthSpec, B: int) -> np.ndarray:
    """Distribution of ``X mod B`` for ``X ~ spec``."""
    v, p = spec.pmf()
    return np.bincount(v % B, p, minlength=B)


def _circ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Circular convolution (distribution of a sum mod B)."""
    return np.fft.irfft(np.fft.rfft(a) * np.fft.rfft(b), len(a))


def expected_input_tokens(spec: WorkloadSpec | dict) -> float:
    """Expected prompt length per request (system prompt + history + new tokens)."""
    if isinstance(spec, dict):
        spec = WorkloadSpec.from_dict(spec)
    return _expectations(spec)[0]


def expected_prefix_hit_ratio(spec: WorkloadSpec | dict) -> float:
    """Analytic token-weighted ideal prefix-hit ratio implied by ``spec``.

    The value :meth:`Workload.ideal_prefix_hit_ratio` converges to: system-prompt
    blocks hit except at each group's first use (expected distinct groups under Zipf
    popularity), and turn ``j >= 2`` of a session hits the full blocks of turn
    ``j-1``'s prompt. ``E[B floor(X/B)] = E[X] - E[X mod B]`` is exact, with the
    distribution of ``X mod B`` from circular convolutions of the lengths' pmfs. It
    averages over system-prompt lengths (drawn once per group in :func:`generate`) and
    ignores the window's edge (sessions cut by ``t = 0``), an ``O(session span /
    horizon)`` effect.
    """
    if isinstance(spec, dict):
        spec = WorkloadSpec.from_dict(spec)
    return _expectations(spec)[1]


def _expectations(spec: WorkloadSpec) -> tuple[float, float]:
    """(expected input tokens per request, expected ideal prefix-hit ratio)."""
    spec.validate()
    pre, B = spec.prefix, spec.prefix.block_tokens
    q = pre.system_prompt_share if pre.system_prompt_groups > 0 else 0.0
    pi = pre.session_unit_prob()
    En, Eo = spec.input.mean_value(), spec.output.mean_value()
    Es = pre.system_prompt_tokens.mean_value()
    s_full = Es - float(np.arange(B) @ _mod_pmf(pre.system_prompt_tokens, B))  # E[B floor(S/B)]
    tv, tp = pre.turns.pmf()
    m = pi * float(tv @ tp) + 1 - pi  # requests per unit
    pairs = pi * float((tv * (tv - 1) / 2) @ tp)  # E[T (T-1) / 2] per unit
    unit_input = m * (q * Es + En) + pairs * (En + Eo)
    if not pre.enabled:
        return unit_input / m, 0.0

    # Turn j >= 2 hits the full blocks of turn j-1's prompt X = S + (j-2)(n+o) + n.
    delta = np.zeros(B)
    delta[0] = 1.0
    s_mod = q * _mod_pmf(pre.system_prompt_tokens, B) + (1 - q) * delta
    n_mod = _mod_pmf(spec.input, B)
    c_mod = _circ(n_mod, _mod_pmf(spec.output, B))
    x_mod = _circ(s_mod, n_mod)
    session_hits = 0.0
    for j in range(2, int(tv.max()) + 1):
        p_reach = float(tp[tv >= j].sum())
        if p_reach <= 0:
            break
        ex = q * Es + (j - 2) * (En + Eo) + En
        session_hits += p_reach * (ex - float(np.arange(B) @ x_mod))
        x_mod = _circ(x_mod, c_mod)
    U = spec.expected_units()
    cold = s_full * float(np.sum(1 - (1 - q * pre.zipf_p()) ** U)) if q > 0 else 0.0
    hits = U * (q * s_full + pi * session_hits) - cold
    return unit_input / m, hits / (U * unit_input)
