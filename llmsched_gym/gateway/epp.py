"""llm-d ``EndpointPickerConfig`` in and out (docs/epp.md).

:func:`load_epp_config` reads an llm-d-router EndpointPickerConfig (``apiVersion:
llm-d.ai/v1alpha1``, ``llm-d.ai/v1`` or the deprecated
``inference.networking.x-k8s.io/v1alpha1``) and maps it to the policies this project
simulates: the scheduling profile's weighted ``queue-scorer``,
``kv-cache-utilization-scorer`` and ``prefix-cache-scorer`` (with its
``approx-prefix-cache-producer``) behind ``max-score-picker`` become the ``llm-d``
router, ``random-picker`` the ``random`` router; with the ``flowControl`` feature gate
the ``usageLimitPolicyPluginRef`` (``soft-reflective-ceiling-policy``,
``static-usage-limit-policy``, ``priority-holdback-policy``) becomes the flow control and
``defaultRequestTTL`` / the bands' ``maxRequests`` the gateway's TTL and band capacity;
without it llm-d's legacy admission gate applies, or the ``probabilistic-admitter``.
The saturation detector (``utilization-detector``, ``concurrency-detector``) is read
too. Any other plugin type, a ``pluginRef`` to an undefined plugin, or a field the
simulator cannot honour is a :class:`ConfigError` of one line naming it.

:func:`to_epp_config` goes the other way: it writes the EndpointPickerConfig that deploys
a policy combination (``llm-d:prefix_weight=2+soft-reflective-ceiling``), and reading it
back gives the same policies (:func:`canonical_policies` compares them).

Schema and plugin semantics follow llm-d-router (``apix/config/v1alpha1``,
``pkg/epp/config/loader``, ``pkg/epp/framework/plugins``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError
from .policy import _parse_params, list_policies, make_policy, parse_policy, policy_parameters
from .saturation import SaturationConfig

API_VERSIONS = ("llm-d.ai/v1alpha1", "llm-d.ai/v1", "inference.networking.x-k8s.io/v1alpha1")
KIND = "EndpointPickerConfig"
TOP_KEYS = ("apiVersion", "kind", "featureGates", "plugins", "schedulingProfiles", "dataLayer", "flowControl",
            "requestHandler", "saturationDetector", "parser")
#: Feature gates llm-d-router registers, with their defaults.
FEATURE_GATES = {"flowControl": False, "haPopulateNonLeaderDatastore": True}
FLOW_KEYS = ("maxBytes", "maxRequests", "defaultRequestTTL", "noEndpointRequestTTL", "defaultPriorityBand",
             "defaultNegativePriorityBand", "priorityBands", "usageLimitPolicyPluginRef", "saturationDetector",
             "enableEviction")
BAND_KEYS = ("priority", "maxBytes", "maxRequests", "fairnessPolicyRef", "orderingPolicyRef")

SCORERS = {"queue-scorer": "queue_weight", "kv-cache-utilization-scorer": "kv_weight",
           "prefix-cache-scorer": "prefix_weight"}
PICKERS = ("max-score-picker", "random-picker")
USAGE_LIMITS = ("soft-reflective-ceiling-policy", "static-usage-limit-policy", "priority-holdback-policy")
DETECTORS = ("utilization-detector", "concurrency-detector")
ADMITTERS = ("probabilistic-admitter",)
PREFIX_PRODUCER = "approx-prefix-cache-producer"
ORDERING, FAIRNESS = "fcfs-ordering-policy", "global-strict-fairness-policy"
#: Types with no effect on a simulated pool of identical, unlabeled decode endpoints.
NO_OPS = ("single-profile-handler", "decode-filter", "token-producer", "tokenizer", "metrics-data-source",
          "core-metrics-extractor", "openai-parser", "anthropic-parser", "vllmhttp-parser", "passthrough-parser")
SUPPORTED_TYPES = tuple(SCORERS) + PICKERS + (PREFIX_PRODUCER,) + USAGE_LIMITS + ADMITTERS + DETECTORS + (
    ORDERING, FAIRNESS) + NO_OPS
#: The parameters each mapped type takes (llm-d-router's names); None: any (ignored).
PARAMETERS: dict[str, tuple | None] = {
    "queue-scorer": None, "kv-cache-utilization-scorer": None,
    "prefix-cache-scorer": ("prefixMatchInfoProducerName", "matchLengthWeight", "matchLengthScaleTokens"),
    "max-score-picker": ("maxNumOfEndpoints",), "random-picker": ("maxNumOfEndpoints",),
    PREFIX_PRODUCER: ("autoTune", "blockSizeTokens", "blockSize", "maxPrefixBlocksToMatch", "maxPrefixTokensToMatch",
                      "lruCapacityPerServer"),
    "soft-reflective-ceiling-policy": (), "static-usage-limit-policy": ("threshold",),
    "priority-holdback-policy": ("minCeiling", "maxCeiling", "domain", "shape"),
    "probabilistic-admitter": ("queueDepthThreshold", "kvCacheUtilThreshold", "power", "k"),
    "utilization-detector": ("queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold", "headroom"),
    "concurrency-detector": ("maxConcurrency", "headroom", "concurrencyMode", "maxTokenConcurrency",
                             "inFlightLoadProducerName"),
    ORDERING: (), FAIRNESS: (),
}
#: llm-d-router defaults.
DEFAULT_TTL_S = 60.0
#: ``defaultRequestTTL: 0s`` (no eviction) as a finite TTL: longer than any simulation.
NO_EVICTION_TTL_S = 1e9
DEFAULT_BAND_CAPACITY = 5000
DEFAULT_SCORER_WEIGHT = 1.0
MIN_PREFIX_BLOCK_TOKENS = 64
PREFIX_DEFAULTS = {"autoTune": True, "blockSizeTokens": 16, "blockSize": 0, "maxPrefixBlocksToMatch": 2048,
                   "maxPrefixTokensToMatch": 131072, "lruCapacityPerServer": 31250}
UTILIZATION_DEFAULTS = {"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.8, "metricsStalenessThreshold": 0.2,
                        "headroom": 0.0}
ADMITTER_DEFAULTS = {"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.8, "power": 5.0, "k": 300.0}


# ====================================================================== the result
@dataclass
class EPPConfig:
    """The policies an EndpointPickerConfig deploys, as the simulator takes them.

    Attributes:
        router, flow_control, admission: policy specs (``flow_control`` None: no queue).
        ttl_s, band_capacity: the gateway's queue TTL and per-band capacity (None when
            the flowControl gate is off: no queue).
        saturation: the saturation detector's parameters (llm-d names plus ``kind``), or
            None for llm-d's default utilization detector (the simulator's).
        warnings: what llm-d would ignore in this file (printed by the CLI).
        source: the file (or label) it came from.
        eviction: ``flowControl.enableEviction`` (demand-driven in-flight eviction with
            llm-d's defaults, :mod:`llmsched_gym.gateway.eviction`).
    """

    router: str
    flow_control: str | None
    admission: str
    ttl_s: float | None = None
    band_capacity: int | None = None
    saturation: dict | None = None
    warnings: tuple = ()
    source: str = "EndpointPickerConfig"
    eviction: bool = False

    def policies(self) -> dict:
        """``{router, flow_control, admission}`` (Scenario.simulator keywords)."""
        return {"router": self.router, "flow_control": self.flow_control, "admission": self.admission}

    def gateway_kwargs(self) -> dict:
        """Every GatewayConfig field this config sets (policies, TTL, band capacity, detector,
        eviction)."""
        out = self.policies()
        if self.eviction:
            out["eviction"] = True
        if self.ttl_s is not None:
            out["ttl_s"] = self.ttl_s
        if self.band_capacity is not None:
            out["band_capacity"] = self.band_capacity
        if self.saturation is not None:
            key, value = _saturation_field(self.saturation, self.source)
            out[key] = value
        return out

    def spec(self, label: str | None = None) -> str:
        """A policy combination for ``compare --policies`` (roles only)."""
        parts = [f"router={self.router}", f"flow_control={self.flow_control or 'none'}", f"admission={self.admission}"]
        return "+".join(parts + ([f"label={label}"] if label else []))


def _saturation_field(sat: dict, source: str):
    """(GatewayConfig field, value) of a non-default saturation detector."""
    return "saturation", SaturationConfig.from_dict(dict(sat), f"{source}: saturation detector")


# ====================================================================== reading
def load_epp_config(path: str | os.PathLike) -> EPPConfig:
    """Read an llm-d EndpointPickerConfig YAML file (module docstring); errors name the field."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"EndpointPickerConfig file {p} not found")
    try:
        d = yaml.safe_load(p.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {' '.join(str(e).split())}") from None
    return epp_config_from_dict(d, str(p))


def _type_name(v) -> str:
    return "null" if v is None else type(v).__name__


def _mapping(where: str, v, allowed=None) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(f"{where} must be a mapping, got {_type_name(v)} {v!r}")
    if allowed is not None:
        unknown = [k for k in v if k not in allowed]
        if unknown:
            raise ConfigError(f"{where}: unknown field {unknown[0]!r}; allowed: {', '.join(allowed)}")
    return v


def _list(where: str, v) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(f"{where} must be a list, got {_type_name(v)} {v!r}")
    return v


def _number(where: str, v, *, integer: bool = False, lo=None, lo_open: bool = False, hi=None, hi_open: bool = False):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok and integer:
        ok = float(v).is_integer()
    if ok and lo is not None:
        ok = v > lo if lo_open else v >= lo
    if ok and hi is not None:
        ok = v < hi if hi_open else v <= hi
    if not ok:
        want = "an integer" if integer else "a number"
        rng = []
        if lo is not None:
            rng.append(f"{'>' if lo_open else '>='} {lo}")
        if hi is not None:
            rng.append(f"{'<' if hi_open else '<='} {hi}")
        raise ConfigError(f"{where}={v!r} is invalid; it must be {want}" + (f" {' and '.join(rng)}" if rng else ""))
    return int(v) if integer else float(v)


def _bool(where: str, v) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{where}={v!r} is invalid; it must be true or false")
    return v


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_SCALE = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(where: str, v) -> float:
    """Seconds from a Go duration (``60s``, ``1m30s``, ``500ms``, ``0s``) or a number of seconds."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _number(where, v, lo=0)
    if isinstance(v, str):
        s = v.strip()
        if s == "0":
            return 0.0
        parts = _DURATION.findall(s)
        if parts and "".join(n + u for n, u in parts) == s:
            return sum(float(n) * _DURATION_SCALE[u] for n, u in parts)
    raise ConfigError(f"{where}={v!r} is invalid; it must be a duration such as '60s', '1m30s' or '500ms'")


_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_QUANTITY_SCALE = {None: 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Ki": 2 ** 10,
                   "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def parse_quantity(where: str, v) -> int:
    """A Kubernetes resource quantity (``100``, ``1k``, ``1Gi``) as an integer."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str):
        m = _QUANTITY.fullmatch(v.strip())
        if m:
            return int(float(m.group(1)) * _QUANTITY_SCALE[m.group(2)])
    raise ConfigError(f"{where}={v!r} is invalid; it must be a quantity such as 100, '1k' or '1Gi'")


@dataclass
class _Plugin:
    name: str
    type: str
    params: dict
    where: str


def _plugins(d: dict, source: str) -> dict[str, _Plugin]:
    out: dict[str, _Plugin] = {}
    supported = ", ".join(SUPPORTED_TYPES)
    for i, spec in enumerate(_list(f"{source}: plugins", d.get("plugins"))):
        where = f"{source}: plugins[{i}]"
        spec = _mapping(where, spec, ("name", "type", "parameters"))
        t = spec.get("type")
        if not isinstance(t, str) or not t:
            raise ConfigError(f"{where} is missing a type (a string); supported types: {supported}")
        if t not in SUPPORTED_TYPES:
            raise ConfigError(f"{where}.type={t!r} is not a plugin type the simulator models; supported: {supported}")
        name = spec.get("name") or t
        if not isinstance(name, str):
            raise ConfigError(f"{where}.name={name!r} is invalid; it must be a string")
        if name in out:
            raise ConfigError(f"{where}: duplicate plugin name {name!r}")
        params = _mapping(f"{where}.parameters", spec.get("parameters"))
        allowed = PARAMETERS.get(t, None)
        if allowed is not None:
            unknown = [k for k in params if k not in allowed]
            if unknown:
                raise ConfigError(f"{where}.parameters: {t} has no parameter {unknown[0]!r}; "
                                  f"allowed: {', '.join(allowed) or 'none'}")
        out[name] = _Plugin(name, t, params, f"{where} ({name})")
    return out


def _ref(where: str, ref, plugins: dict[str, _Plugin], types: tuple, default: str | None = None) -> _Plugin | None:
    """The plugin a ``pluginRef`` names (None: the undeclared default ``default``)."""
    if not isinstance(ref, str) or not ref:
        raise ConfigError(f"{where}={ref!r} is invalid; it must name a plugin from plugins")
    if ref not in plugins:
        if ref == default:
            return None
        raise ConfigError(f"{where}={ref!r} references a plugin that is not defined; defined: "
                          f"{', '.join(plugins) or 'none'}")
    p = plugins[ref]
    if p.type not in types:
        raise ConfigError(f"{where}={ref!r} is a {p.type}; it must be one of: {', '.join(types)}")
    return p


def epp_config_from_dict(d, source: str = "EndpointPickerConfig") -> EPPConfig:
    """Map a parsed EndpointPickerConfig to simulator policies (module docstring)."""
    d = _mapping(source, d, TOP_KEYS)
    if not d:
        raise ConfigError(f"{source}: empty EndpointPickerConfig")
    api = d.get("apiVersion")
    if api not in API_VERSIONS:
        raise ConfigError(f"{source}: apiVersion={api!r} is not known; allowed: {', '.join(API_VERSIONS)}")
    if d.get("kind") != KIND:
        raise ConfigError(f"{source}: kind={d.get('kind')!r} is invalid; it must be {KIND}")
    warnings: list[str] = []
    gates = dict(FEATURE_GATES)
    for i, g in enumerate(_list(f"{source}: featureGates", d.get("featureGates"))):
        where = f"{source}: featureGates[{i}]"
        if not isinstance(g, str):
            raise ConfigError(f"{where}={g!r} is invalid; it must be a gate name, optionally with =true/=false")
        name, eq, value = g.partition("=")
        if name not in FEATURE_GATES:
            raise ConfigError(f"{where}={g!r} is not a known feature gate; known: {', '.join(FEATURE_GATES)}")
        v = value.strip().lower() if eq else "true"
        if v not in ("1", "t", "true", "0", "f", "false"):
            raise ConfigError(f"{where}={g!r}: {value!r} is not a boolean")
        gates[name] = v in ("1", "t", "true")
    plugins = _plugins(d, source)
    for key in ("dataLayer", "requestHandler", "parser"):
        _mapping(f"{source}: {key}", d.get(key))
    router = _router(d, plugins, source, warnings)
    flow_on = gates["flowControl"]
    fc = _mapping(f"{source}: flowControl", d.get("flowControl"), FLOW_KEYS)
    saturation, det_params = _detector(d, fc, plugins, source)
    admitters = [p for p in plugins.values() if p.type in ADMITTERS]
    if len(admitters) > 1:
        raise ConfigError(f"{admitters[1].where}: a second admitter is not simulated (one admission policy)")
    eviction = False
    if flow_on:
        flow_control, ttl, capacity = _flow_control(fc, plugins, source)
        if "enableEviction" in fc:
            eviction = _bool(f"{source}: flowControl.enableEviction", fc["enableEviction"])
        if admitters:
            raise ConfigError(f"{admitters[0].where}: with the flowControl gate llm-d runs the admitter after "
                              "dispatch; the simulator admits on arrival, so this is not simulated")
        admission = "always-admit"
    else:
        ignored = [k for k in fc if k != "saturationDetector"]
        if ignored:
            warnings.append(f"flowControl.{ignored[0]} and the rest of flowControl are ignored without the "
                            "flowControl feature gate (as llm-d does)")
        flow_control, ttl, capacity = None, None, None
        if admitters:
            admission = _admitter(admitters[0], saturation, det_params, source)
            saturation = None  # only the legacy gate read it, and the admitter subsumes that gate
        else:
            admission = "legacy"
    cfg = EPPConfig(router, flow_control, admission, ttl, capacity, saturation, tuple(warnings), source, eviction)
    cfg.gateway_kwargs()  # a detector the simulator cannot honour fails now, naming the file
    return cfg


def _router(d: dict, plugins: dict[str, _Plugin], source: str, warnings: list) -> str:
    profiles = _list(f"{source}: schedulingProfiles", d.get("schedulingProfiles"))
    if not profiles:  # llm-d builds one from every filter, scorer and picker
        refs = [{"pluginRef": p.name} for p in plugins.values()
                if p.type in SCORERS or p.type in PICKERS or p.type == "decode-filter"]
        profiles = [{"name": "default", "plugins": refs}]
    if len(profiles) > 1:
        raise ConfigError(f"{source}: schedulingProfiles has {len(profiles)} profiles; several profiles "
                          "(prefill/decode disaggregation) are not simulated, give one")
    where = f"{source}: schedulingProfiles[0]"
    prof = _mapping(where, profiles[0], ("name", "plugins"))
    if not isinstance(prof.get("name"), str) or not prof.get("name"):
        raise ConfigError(f"{where} is missing a name")
    weights = {k: 0.0 for k in SCORERS.values()}
    pickers: list[_Plugin] = []
    prefix_scorers: list[_Plugin] = []
    declared_picker = any(p.type in PICKERS for p in plugins.values())
    for j, ref in enumerate(_list(f"{where}.plugins", prof.get("plugins"))):
        w = f"{where}.plugins[{j}]"
        ref = _mapping(w, ref, ("pluginRef", "weight"))
        p = _ref(f"{w}.pluginRef", ref.get("pluginRef"), plugins, tuple(SCORERS) + PICKERS + ("decode-filter",),
                 default=None if declared_picker else "max-score-picker")
        weight = ref.get("weight")
        if weight is not None:
            weight = _number(f"{w}.weight", weight, lo=0)
        if p is None or p.type in PICKERS:
            pickers.append(p or _Plugin("max-score-picker", "max-score-picker", {}, w))
        elif p.type in SCORERS:
            weights[SCORERS[p.type]] += DEFAULT_SCORER_WEIGHT if weight is None else weight
            if p.type == "prefix-cache-scorer":
                prefix_scorers.append(p)
    if len(pickers) > 1:
        raise ConfigError(f"{where}.plugins: {len(pickers)} pickers; a profile takes one")
    picker = pickers[0].type if pickers else "max-score-picker"
    for p in pickers:
        n = p.params.get("maxNumOfEndpoints")
        if n is not None:
            _number(f"{p.where}.parameters.maxNumOfEndpoints", n, integer=True)
    if picker == "random-picker":
        if any(weights.values()):
            warnings.append("random-picker ignores the profile's scorers")
        return "random"
    prefix = _prefix_params(plugins, prefix_scorers, source)
    return (f"llm-d:queue_weight={weights['queue_weight']!r},kv_weight={weights['kv_weight']!r},"
            f"prefix_weight={weights['prefix_weight']!r},block_tokens={prefix['block_tokens']},"
            f"lru_blocks={prefix['lru_blocks']},max_prefix_blocks={prefix['max_prefix_blocks']}")


def _prefix_params(plugins: dict[str, _Plugin], scorers: list[_Plugin], source: str) -> dict:
    """block_tokens, lru_blocks, max_prefix_blocks of the approximate prefix index."""
    producers = [p for p in plugins.values() if p.type == PREFIX_PRODUCER]
    chosen: list[_Plugin | None] = []
    for s in scorers:
        mw = s.params.get("matchLengthWeight", 0.0)
        mw = _number(f"{s.where}.parameters.matchLengthWeight", mw, lo=0, hi=1)
        if mw > 0:
            raise ConfigError(f"{s.where}.parameters.matchLengthWeight={mw!r} is not simulated; the llm-d router's "
                              "prefix score is the match ratio (matchLengthWeight 0)")
        if "matchLengthScaleTokens" in s.params:
            _number(f"{s.where}.parameters.matchLengthScaleTokens", s.params["matchLengthScaleTokens"], integer=True)
        name = s.params.get("prefixMatchInfoProducerName")
        if name:
            chosen.append(_ref(f"{s.where}.parameters.prefixMatchInfoProducerName", name, plugins, (PREFIX_PRODUCER,),
                               default=PREFIX_PRODUCER))
        else:
            default = [p for p in producers if p.name == PREFIX_PRODUCER]
            if default or len(producers) <= 1:
                chosen.append((default or producers or [None])[0])
            else:
                raise ConfigError(f"{s.where}: several {PREFIX_PRODUCER} plugins and no prefixMatchInfoProducerName")
    if not scorers:
        chosen = producers[:1] or [None]
    if len({id(p) for p in chosen}) > 1 and len({str(p.params if p else {}) for p in chosen}) > 1:
        raise ConfigError(f"{source}: prefix-cache-scorers with different {PREFIX_PRODUCER} parameters "
                          "are not simulated (one prefix index)")
    p = chosen[0] if chosen else None
    cfg = dict(PREFIX_DEFAULTS)
    where = p.where + ".parameters" if p else f"{source}: {PREFIX_PRODUCER}"
    if p is not None:
        cfg.update(p.params)
    _bool(f"{where}.autoTune", cfg["autoTune"])
    for k in ("blockSizeTokens", "blockSize", "maxPrefixBlocksToMatch", "maxPrefixTokensToMatch",
              "lruCapacityPerServer"):
        cfg[k] = _number(f"{where}.{k}", cfg[k], integer=True, lo=0 if k != "lruCapacityPerServer" else None)
    if cfg["blockSize"] > 0 and cfg["blockSizeTokens"] == PREFIX_DEFAULTS["blockSizeTokens"]:
        cfg["blockSizeTokens"] = cfg["blockSize"]  # the deprecated character-based field, mapped as llm-d does
    if cfg["blockSizeTokens"] <= 0:
        raise ConfigError(f"{where}.blockSizeTokens={cfg['blockSizeTokens']!r} is invalid; it must be > 0")
    block = max(MIN_PREFIX_BLOCK_TOKENS, cfg["blockSizeTokens"])  # llm-d clamps below 64
    lru = cfg["lruCapacityPerServer"] if cfg["lruCapacityPerServer"] > 0 else PREFIX_DEFAULTS["lruCapacityPerServer"]
    if cfg["maxPrefixTokensToMatch"] > 0:
        max_blocks = cfg["maxPrefixTokensToMatch"] // block
        if max_blocks == 0:
            raise ConfigError(f"{where}.maxPrefixTokensToMatch={cfg['maxPrefixTokensToMatch']} is below one "
                              f"{block}-token block, so it matches nothing; not simulated")
    else:
        max_blocks = cfg["maxPrefixBlocksToMatch"]  # 0: the whole prompt
    return {"block_tokens": block, "lru_blocks": lru, "max_prefix_blocks": max_blocks}


def _detector(d: dict, fc: dict, plugins: dict[str, _Plugin], source: str) -> tuple[dict | None, dict]:
    """(non-default detector config or None, the utilization parameters in effect)."""
    sd, where = fc.get("saturationDetector"), f"{source}: flowControl.saturationDetector"
    if sd is None and d.get("saturationDetector") is not None:  # deprecated top-level field
        sd, where = d["saturationDetector"], f"{source}: saturationDetector"
    sd = _mapping(where, sd, ("pluginRef",))
    ref = sd.get("pluginRef") or "utilization-detector"
    p = _ref(f"{where}.pluginRef", ref, plugins, DETECTORS, default="utilization-detector")
    if p is None or p.type == "utilization-detector":
        params = dict(UTILIZATION_DEFAULTS)
        pw = (p.where if p else where) + ".parameters"
        if p is not None:
            params.update(p.params)
        params["queueDepthThreshold"] = _number(f"{pw}.queueDepthThreshold", params["queueDepthThreshold"],
                                                integer=True, lo=0, lo_open=True)
        params["kvCacheUtilThreshold"] = _number(f"{pw}.kvCacheUtilThreshold", params["kvCacheUtilThreshold"],
                                                 lo=0, lo_open=True, hi=1)
        params["metricsStalenessThreshold"] = parse_duration(f"{pw}.metricsStalenessThreshold",
                                                             params["metricsStalenessThreshold"])
        params["headroom"] = _number(f"{pw}.headroom", params["headroom"], lo=0)
        # headroom only widens the detector's routing-filter limits, not the pool saturation.
        same = all(params[k] == UTILIZATION_DEFAULTS[k] for k in
                   ("queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold"))
        sat = None if same else {"kind": "utilization", **params}
        return sat, params
    params = dict(p.params)
    pw = p.where + ".parameters"
    for k, integer in (("maxConcurrency", True), ("maxTokenConcurrency", True), ("headroom", False)):
        if k in params:
            params[k] = _number(f"{pw}.{k}", params[k], integer=integer, lo=0, lo_open=integer)
    mode = params.get("concurrencyMode", "requests")
    if mode not in ("requests", "tokens", "hybrid"):
        raise ConfigError(f"{pw}.concurrencyMode={mode!r} is not known; allowed: requests, tokens, hybrid")
    if params.pop("inFlightLoadProducerName", None):
        raise ConfigError(f"{pw}.inFlightLoadProducerName is not simulated (the in-flight load is the gateway's own)")
    return {"kind": "concurrency", **params}, {}


def _flow_control(fc: dict, plugins: dict[str, _Plugin], source: str) -> tuple[str, float, int]:
    where = f"{source}: flowControl"
    for k in ("maxBytes", "maxRequests"):
        if k in fc and parse_quantity(f"{where}.{k}", fc[k]) > 0:
            what = "request sizes in bytes are not modelled" if k == "maxBytes" else "only per-band capacities are"
            raise ConfigError(f"{where}.{k}={fc[k]!r} is not simulated ({what}); leave it out or 0")
    ttl = DEFAULT_TTL_S
    if fc.get("defaultRequestTTL") is not None:
        ttl = parse_duration(f"{where}.defaultRequestTTL", fc["defaultRequestTTL"])
        ttl = NO_EVICTION_TTL_S if ttl == 0 else ttl  # "0s" disables eviction
    if fc.get("noEndpointRequestTTL") is not None:  # the simulated pool is never empty
        parse_duration(f"{where}.noEndpointRequestTTL", fc["noEndpointRequestTTL"])
    caps: dict[str, int] = {}
    bands = [("defaultPriorityBand", fc.get("defaultPriorityBand")),
             ("defaultNegativePriorityBand", fc.get("defaultNegativePriorityBand"))]
    bands += [(f"priorityBands[{i}]", b) for i, b in enumerate(_list(f"{where}.priorityBands", fc.get("priorityBands")))]
    seen: set = set()
    for label, band in bands:
        if band is None:
            continue
        bw = f"{where}.{label}"
        band = _mapping(bw, band, BAND_KEYS)
        if label.startswith("priorityBands"):
            if "priority" not in band:
                raise ConfigError(f"{bw} is missing its priority (an integer)")
            prio = _number(f"{bw}.priority", band["priority"], integer=True)
            if prio in seen:
                raise ConfigError(f"{bw}: priority {prio} is configured twice")
            seen.add(prio)
        if "maxBytes" in band and parse_quantity(f"{bw}.maxBytes", band["maxBytes"]) > 0:
            raise ConfigError(f"{bw}.maxBytes={band['maxBytes']!r} is not simulated (request sizes in bytes are "
                              "not modelled); leave it out or 0")
        if "maxRequests" in band:
            n = parse_quantity(f"{bw}.maxRequests", band["maxRequests"])
            caps[label] = n if n > 0 else DEFAULT_BAND_CAPACITY  # 0 means the system default
        if band.get("orderingPolicyRef"):
            _ref(f"{bw}.orderingPolicyRef", band["orderingPolicyRef"], plugins, (ORDERING,), default=ORDERING)
        if band.get("fairnessPolicyRef"):
            _ref(f"{bw}.fairnessPolicyRef", band["fairnessPolicyRef"], plugins, (FAIRNESS,), default=FAIRNESS)
    if len(set(caps.values())) > 1:
        desc = ", ".join(f"{k} {v}" for k, v in caps.items())
        raise ConfigError(f"{where}: band maxRequests differ ({desc}); the simulator gives every band one capacity")
    capacity = next(iter(caps.values())) if caps else DEFAULT_BAND_CAPACITY
    ref = fc.get("usageLimitPolicyPluginRef") or "static-usage-limit-policy"
    p = _ref(f"{where}.usageLimitPolicyPluginRef", ref, plugins, USAGE_LIMITS, default="static-usage-limit-policy")
    if p is None:
        return "static-usage-limit:threshold=1.0", ttl, capacity
    pw = p.where + ".parameters"
    if p.type == "soft-reflective-ceiling-policy":
        if p.params:
            raise ConfigError(f"{pw}: soft-reflective-ceiling-policy takes no parameters")
        return "soft-reflective-ceiling", ttl, capacity
    if p.type == "static-usage-limit-policy":
        threshold = _number(f"{pw}.threshold", p.params.get("threshold", 1.0), lo=0)
        return f"static-usage-limit:threshold={threshold!r}", ttl, capacity
    if "minCeiling" not in p.params:
        raise ConfigError(f"{pw}.minCeiling is required by priority-holdback-policy (a number in [0, 1))")
    cmin = _number(f"{pw}.minCeiling", p.params["minCeiling"], lo=0, hi=1, hi_open=True)
    cmax = _number(f"{pw}.maxCeiling", p.params.get("maxCeiling", 1.0), lo=0, lo_open=True, hi=1)
    if cmin >= cmax:
        raise ConfigError(f"{pw}: minCeiling {cmin} must be below maxCeiling {cmax}")
    if p.params.get("domain", "rank") != "rank":
        raise ConfigError(f"{pw}.domain={p.params['domain']!r} is not simulated; allowed: rank (ceilings spread "
                          "over band ranks)")
    if p.params.get("shape", "linear") != "linear":
        raise ConfigError(f"{pw}.shape={p.params['shape']!r} is not known; allowed: linear")
    return f"priority-holdback:cmax={cmax!r},cmin={cmin!r}", ttl, capacity


def _admission_names() -> dict:
    """The probabilistic admission policy's parameter names for llm-d's (k, power, thresholds)."""
    params = policy_parameters(list_policies("admission")["probabilistic"])
    if "k" in params:
        return {"k": "k", "power": "power", "queueDepthThreshold": "queueDepthThreshold",
                "kvCacheUtilThreshold": "kvCacheUtilThreshold"}
    return {"k": "coefficient", "power": "exponent"}


def _admitter(p: _Plugin, saturation: dict | None, det: dict, source: str) -> str:
    pw = p.where + ".parameters"
    a = dict(ADMITTER_DEFAULTS)
    a.update(p.params)
    a["queueDepthThreshold"] = _number(f"{pw}.queueDepthThreshold", a["queueDepthThreshold"], integer=True,
                                       lo=0, lo_open=True)
    for k in ("kvCacheUtilThreshold", "power", "k"):
        a[k] = _number(f"{pw}.{k}", a[k], lo=0, lo_open=True)
    # Without flow control llm-d first applies its legacy gate (reject sheddable at detector
    # saturation >= 1), then the admitter. The gate adds nothing when the admitter already
    # rejects every sheddable request there: k >= 1 and thresholds no higher than the detector's.
    subsumed = (det and a["k"] >= 1 and a["queueDepthThreshold"] <= det["queueDepthThreshold"]
                and a["kvCacheUtilThreshold"] <= det["kvCacheUtilThreshold"]
                and det["metricsStalenessThreshold"] == UTILIZATION_DEFAULTS["metricsStalenessThreshold"])
    if not subsumed:
        raise ConfigError(f"{p.where}: llm-d's legacy saturation gate would reject requests this admitter admits "
                          f"(k={a['k']}, thresholds vs the saturation detector's); not simulated: use k >= 1 and "
                          "detector thresholds at least the admitter's")
    names = _admission_names()
    if "queueDepthThreshold" not in names and (a["queueDepthThreshold"], a["kvCacheUtilThreshold"]) != (5, 0.8):
        raise ConfigError(f"{pw}: queueDepthThreshold/kvCacheUtilThreshold other than 5/0.8 are not simulated yet")
    return "probabilistic:" + ",".join(f"{names[k]}={a[k]!r}" for k in ("power", "k", "queueDepthThreshold",
                                                                         "kvCacheUtilThreshold") if k in names)


# ====================================================================== writing
def _split(spec: str) -> tuple[str, dict]:
    name, _, params = str(spec).partition(":")
    return name, _parse_params(name, params)


def _full_params(spec, role: str) -> tuple[str, dict]:
    """(name, every constructor parameter with its value) of a policy spec, validated."""
    make_policy(spec, role)
    name, given = _split(spec)
    params = dict(policy_parameters(list_policies()[name]))
    params.update(given)
    return name, {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                  for k, v in params.items()}


def _combination(spec) -> dict:
    """``{router, flow_control, admission}`` of a combination, defaults applied:
    router ``llm-d``; flow control none; admission ``always-admit`` with flow control
    (llm-d's flow control does the admitting) and ``legacy`` without (llm-d's gate)."""
    roles = parse_policy(spec).kwargs() if isinstance(spec, str) else dict(spec)
    if roles.get("scaler") is not None:
        raise ConfigError(f"scaler={roles['scaler']!r}: an EndpointPickerConfig has no autoscaler (the cluster's "
                          "autoscaler sizes the pool); leave the scaler out of the combination")
    if roles.get("pd") is not None:
        raise ConfigError(f"pd={roles['pd']!r}: writing llm-d's pd-profile-handler is not supported; leave the pd "
                          "decision out of the combination")
    for k, v in roles.items():
        if v is not None and not isinstance(v, str):
            raise ConfigError(f"{k}={v!r}: give policies as spec strings to write an EndpointPickerConfig")
    flow = roles.get("flow_control")
    return {"router": roles.get("router") or "llm-d", "flow_control": flow,
            "admission": roles.get("admission") or ("always-admit" if flow else "legacy")}


def canonical_policies(spec) -> dict:
    """A comparable form of a combination (names and every parameter value, defaults
    applied); equal exactly when two combinations simulate the same policies."""
    c = _combination(spec) if not isinstance(spec, EPPConfig) else spec.policies()
    out = {}
    for key, role in (("router", "routing"), ("flow_control", "usage-limit"), ("admission", "admission")):
        v = c.get(key)
        out[key] = None if v is None else _full_params(v, role)
    return out


def to_epp_config(spec, *, ttl_s: float | None = None, band_capacity: int | None = None,
                  eviction: bool = False) -> dict:
    """The EndpointPickerConfig (a dict) that deploys policy combination ``spec``.

    ``spec``: a combination string (``llm-d:prefix_weight=2+soft-reflective-ceiling``) or
    a ``{router, flow_control, admission}`` dict; defaults as :func:`_combination`.
    ``ttl_s`` / ``band_capacity`` set ``defaultRequestTTL`` and the bands' ``maxRequests``
    (flow control only); ``eviction`` sets ``enableEviction`` (llm-d's defaults only).
    Policies llm-d cannot deploy exactly raise ConfigError.
    """
    c = _combination(spec)
    plugins: list[dict] = []
    profile: list[dict] = []
    name, p = _full_params(c["router"], "routing")
    if name == "llm-d":
        if p["block_tokens"] < MIN_PREFIX_BLOCK_TOKENS:
            raise ConfigError(f"router {c['router']!r}: block_tokens={p['block_tokens']:g} cannot be deployed; "
                              f"llm-d raises prefix blocks below {MIN_PREFIX_BLOCK_TOKENS} tokens to {MIN_PREFIX_BLOCK_TOKENS}")
        plugins.append({"type": PREFIX_PRODUCER, "parameters": {
            "autoTune": False, "blockSizeTokens": int(p["block_tokens"]), "lruCapacityPerServer": int(p["lru_blocks"]),
            "maxPrefixTokensToMatch": 0, "maxPrefixBlocksToMatch": int(p.get("max_prefix_blocks", 0))}})
        for t, key in SCORERS.items():
            if p[key] > 0:
                plugins.append({"type": t})
                profile.append({"pluginRef": t, "weight": p[key]})
        plugins.append({"type": "max-score-picker"})
        profile.append({"pluginRef": "max-score-picker"})
    elif name == "random":
        plugins.append({"type": "random-picker"})
        profile.append({"pluginRef": "random-picker"})
    else:
        raise ConfigError(f"router {name!r} has no EndpointPickerConfig equivalent; exportable routers: llm-d, random")
    out: dict = {"apiVersion": API_VERSIONS[0], "kind": KIND}
    flow = c["flow_control"]
    adm_name, a = _full_params(c["admission"], "admission")
    if flow is not None:
        if adm_name != "always-admit":
            raise ConfigError(f"admission {c['admission']!r} with flow control cannot be deployed: llm-d's flow "
                              "control does the admitting (use admission always-admit, or no flow control)")
        fname, f = _full_params(flow, "usage-limit")
        if fname == "soft-reflective-ceiling":
            if (f["ramp"], f["period_scale"]) != (1.0, 1.0):
                raise ConfigError(f"flow control {flow!r}: llm-d's soft-reflective-ceiling-policy takes no "
                                  "parameters; only ramp=1, period_scale=1 can be deployed")
            plugins.append({"type": "soft-reflective-ceiling-policy"})
        elif fname == "static-usage-limit":
            if not 0 < f["threshold"] <= 1:
                raise ConfigError(f"flow control {flow!r}: llm-d takes a static threshold in (0, 1], got {f['threshold']:g}")
            plugins.append({"type": "static-usage-limit-policy", "parameters": {"threshold": f["threshold"]}})
        elif fname == "priority-holdback":
            if not (0 <= f["cmin"] < f["cmax"] <= 1):
                raise ConfigError(f"flow control {flow!r}: llm-d needs 0 <= minCeiling < maxCeiling <= 1, got "
                                  f"cmin {f['cmin']:g}, cmax {f['cmax']:g}")
            plugins.append({"type": "priority-holdback-policy", "parameters": {
                "minCeiling": f["cmin"], "maxCeiling": f["cmax"], "domain": "rank"}})
        else:
            raise ConfigError(f"flow control {fname!r} has no EndpointPickerConfig equivalent; exportable: "
                              "soft-reflective-ceiling, static-usage-limit, priority-holdback")
        out["featureGates"] = ["flowControl"]
        fc: dict = {"usageLimitPolicyPluginRef": plugins[-1]["type"]}
        if ttl_s is not None:
            fc["defaultRequestTTL"] = "0s" if ttl_s >= NO_EVICTION_TTL_S else f"{ttl_s:g}s"
        if band_capacity is not None:
            fc["defaultPriorityBand"] = {"priority": 0, "maxRequests": int(band_capacity)}
        if eviction:
            fc["enableEviction"] = True
        out["flowControl"] = fc
    else:
        if ttl_s is not None or band_capacity is not None or eviction:
            raise ConfigError("ttl_s / band_capacity / eviction apply to flow control; the combination has none")
        if adm_name == "always-admit":
            raise ConfigError("admission always-admit without flow control cannot be deployed: llm-d without the "
                              "flowControl gate always applies its legacy gate (use legacy or probabilistic, or "
                              "add a flow-control policy)")
        if adm_name == "probabilistic":
            names = _admission_names()
            vals = {k: a[v] for k, v in names.items()}
            vals.setdefault("queueDepthThreshold", ADMITTER_DEFAULTS["queueDepthThreshold"])
            vals.setdefault("kvCacheUtilThreshold", ADMITTER_DEFAULTS["kvCacheUtilThreshold"])
            if vals["k"] < 1 or vals["queueDepthThreshold"] > UTILIZATION_DEFAULTS["queueDepthThreshold"] or \
                    vals["kvCacheUtilThreshold"] > UTILIZATION_DEFAULTS["kvCacheUtilThreshold"]:
                raise ConfigError(f"admission {c['admission']!r} cannot be deployed exactly: llm-d's legacy gate "
                                  "would also reject (needs k >= 1 and thresholds at most 5 / 0.8)")
            q = vals["queueDepthThreshold"]
            plugins.append({"type": "probabilistic-admitter", "parameters": {
                "queueDepthThreshold": int(q) if float(q).is_integer() else q,
                "kvCacheUtilThreshold": vals["kvCacheUtilThreshold"], "power": vals["power"], "k": vals["k"]}})
        elif adm_name != "legacy":
            raise ConfigError(f"admission {adm_name!r} has no EndpointPickerConfig equivalent; exportable: legacy, "
                              "probabilistic (or always-admit with flow control)")
    out["plugins"] = plugins
    out["schedulingProfiles"] = [{"name": "default", "plugins": profile}]
    if "flowControl" in out:  # keep llm-d's usual key order: plugins, profiles, then flowControl
        out["flowControl"] = out.pop("flowControl")
    return out


def dump_epp_config(spec, **kwargs) -> str:
    """:func:`to_epp_config` as YAML text, with a header comment naming the combination."""
    d = to_epp_config(spec, **kwargs)
    label = spec if isinstance(spec, str) else ", ".join(f"{k}={v}" for k, v in dict(spec).items())
    head = (f"# EndpointPickerConfig for the policy combination {label!r}\n"
            "# written by `llmsched-gym policies --to-epp-config` (reading it back gives the same policies)\n")
    return head + yaml.safe_dump(d, sort_keys=False, default_flow_style=False)


# ====================================================================== CLI and scenario hooks
def epp_overrides(path: str, explicit: dict) -> dict:
    """``run --epp-config FILE``: the gateway keywords of the file (warnings to stderr).
    Combined with --router/--flow-control/--admission it is an error."""
    import sys

    if explicit:
        flags = ", ".join("--" + k.replace("_", "-") for k in explicit)
        raise ConfigError(f"give either --epp-config or {flags}, not both (the file sets every gateway policy)")
    cfg = load_epp_config(path)
    for w in cfg.warnings:
        print(f"warning: {cfg.source}: {w}", file=sys.stderr)
    return cfg.gateway_kwargs()


def gateway_from_yaml(gw: dict, source: str) -> dict:
    """A scenario YAML's ``gateway`` with ``epp_config: FILE`` expanded (relative to the
    YAML file's directory); the policies it sets may not also be given there."""
    gw = dict(gw)
    path = gw.pop("epp_config")
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ConfigError(f"{source}.gateway.epp_config={path!r} is invalid; it must be a file path")
    p = Path(path).expanduser()
    if not p.is_absolute() and Path(source).is_file():
        p = Path(source).resolve().parent / p
    cfg = load_epp_config(p)
    kw = cfg.gateway_kwargs()
    clash = [k for k in kw if k in gw]
    if clash:
        raise ConfigError(f"{source}.gateway: give either epp_config or {', '.join(clash)}, not both "
                          "(the EndpointPickerConfig sets them)")
    return {**gw, **kw}


__all__ = ["EPPConfig", "load_epp_config", "epp_config_from_dict", "to_epp_config", "dump_epp_config",
           "canonical_policies", "SUPPORTED_TYPES", "API_VERSIONS"]
