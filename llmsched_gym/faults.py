"""Faults inside the cluster: a seeded, reproducible schedule (docs/architecture.md, "Faults").

A :class:`FaultSchedule` (YAML ``faults:`` section of a scenario, ``--faults`` on the CLI,
``Simulator(faults=...)``) lists:

* ``crashes``: instance ``instance`` crashes at ``at_s`` and serves again ``restart_s``
  later (None: never). What it held (running, waiting, on its way to it) is re-sent by
  the gateway with its prefill redone (``on_crash: retry``, at most ``max_retries`` times
  per request) or lost (``on_crash: fail``); its KV blocks and prefix cache are gone;
* ``crash_rate``: crashes as a Poisson process per instance, ``per_instance_per_s`` from
  ``from_s`` to ``to_s`` (None: the last arrival), each followed by ``restart_s`` down;
  drawn once from ``seed`` (None: the simulation's seed), so a schedule is the same run
  after run and for every policy compared on it;
* ``scrape_outages``: the gateway's scrapes of ``instance`` (``all``: every instance) fail
  from ``at_s`` for ``duration_s``: its metrics stop refreshing and age;
* ``stragglers``: ``instance``'s iterations take ``factor`` times their step time from
  ``at_s`` for ``duration_s``;
* on a P/D cluster, ``kv_link_slowdowns``: KV transfers sent from ``at_s`` for
  ``duration_s`` take ``factor`` times their time; ``kv_link_outages``: a transfer in flight
  at any time from ``at_s`` for ``duration_s`` is lost, and the decode instance recomputes
  the prompt (``kv_load_failure: recompute``) or the request fails (``fail``, vLLM's
  ``kv_load_failure_policy`` default): outcome ``crashed``.

:meth:`FaultSchedule.timeline` turns it into time-ordered actions the simulator applies at
pause points (``Simulator.advance`` stops the cluster exactly there), through the engine
door (``EngineState.crash``, ``restart``, ``block_scrapes``, ``set_slowdown``).
"""

from __future__ import annotations

import math
from dataclasses import field, fields
from pathlib import Path
from typing import Literal

import numpy as np
import yaml

from .errors import ConfigError
from .validation import (
    MAX_INSTANCES,
    MAX_SECONDS,
    Seed,
    check_keys,
    check_number,
    config_dataclass,
    invalid,
    ranged,
)

ON_CRASH = ("retry", "fail")
KV_LOAD_FAILURE = ("fail", "recompute")
MAX_RETRIES = 100
MAX_EVENTS = 100_000  # fault events of one schedule (a Poisson rate is checked against it too)
TIME = {"ge": 0, "le": MAX_SECONDS}
DURATION = {"gt": 0, "le": MAX_SECONDS}

# Kinds of timeline actions, in the order they apply at one instant.
RESTART, SCRAPE_ON, SLOW_OFF, LINK_UP, LINK_FAST, CRASH, SCRAPE_OFF, SLOW_ON, LINK_DOWN, LINK_SLOW = range(10)


def _items(field_name: str, value) -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise invalid(field_name, value, "it must be a list of mappings")
    return list(value)


def _instance(field_name: str, value, allow_all: bool):
    if allow_all and value == "all":
        return "all"
    want = "an integer >= 0" + (" or 'all'" if allow_all else "")
    if isinstance(value, str) or value is None:
        raise invalid(field_name, value, f"it must be {want}")
    return check_number(field_name, value, integer=True, ge=0, le=MAX_INSTANCES - 1)


@config_dataclass("faults")
class FaultSchedule:
    """Faults of one simulation (module docstring); every field optional.

    Args:
        crashes: ``[{instance, at_s, restart_s}]``; ``restart_s`` None: never restarts.
        crash_rate: ``{per_instance_per_s, restart_s, from_s, to_s}``: Poisson crashes.
        scrape_outages: ``[{instance (an index or 'all'), at_s, duration_s}]``.
        stragglers: ``[{instance, at_s, duration_s, factor}]``, ``factor`` > 0 on step times.
        on_crash: ``retry`` (default: the gateway re-sends what a crash lost, prefill redone)
            or ``fail`` (those requests end ``crashed``).
        max_retries: re-sends per request (default 1); a request lost once more ends ``crashed``.
        seed: the Poisson crashes' draws (None: the simulation's seed).
        kv_link_slowdowns: ``[{at_s, duration_s, factor}]`` (P/D): KV transfers sent then
            take ``factor`` times their time.
        kv_link_outages: ``[{at_s, duration_s}]`` (P/D): transfers in flight then are lost.
        kv_load_failure: a lost transfer's request ``fail`` s (default, vLLM's) or is
            ``recompute`` d on its decode instance.
    """

    # The entries' own fields are checked in __post_init__ (each error names its index).
    crashes: list | tuple | None = field(default_factory=list)
    crash_rate: dict | None = None
    scrape_outages: list | tuple | None = field(default_factory=list)
    stragglers: list | tuple | None = field(default_factory=list)
    on_crash: Literal[ON_CRASH] = "retry"
    max_retries: ranged(int, ge=0, le=MAX_RETRIES) = 1
    seed: Seed | None = None
    kv_link_slowdowns: list | tuple | None = field(default_factory=list)
    kv_link_outages: list | tuple | None = field(default_factory=list)
    kv_load_failure: Literal[KV_LOAD_FAILURE] = "fail"

    def __post_init__(self) -> None:
        self.crashes = [self._entry(f"faults.crashes[{k}]", e, ("instance", "at_s", "restart_s"),
                                    {"restart_s": None})
                        for k, e in enumerate(_items("faults.crashes", self.crashes))]
        self.scrape_outages = [self._entry(f"faults.scrape_outages[{k}]", e, ("instance", "at_s", "duration_s"), {})
                               for k, e in enumerate(_items("faults.scrape_outages", self.scrape_outages))]
        self.stragglers = [self._entry(f"faults.stragglers[{k}]", e, ("instance", "at_s", "duration_s", "factor"), {})
                           for k, e in enumerate(_items("faults.stragglers", self.stragglers))]
        self.kv_link_slowdowns = [self._entry(f"faults.kv_link_slowdowns[{k}]", e, ("at_s", "duration_s", "factor"),
                                              {}) for k, e in enumerate(_items("faults.kv_link_slowdowns",
                                                                               self.kv_link_slowdowns))]
        self.kv_link_outages = [self._entry(f"faults.kv_link_outages[{k}]", e, ("at_s", "duration_s"), {})
                                for k, e in enumerate(_items("faults.kv_link_outages", self.kv_link_outages))]
        if self.crash_rate is not None:
            r = check_keys("faults.crash_rate", self.crash_rate, ("per_instance_per_s", "restart_s", "from_s", "to_s"))
            if "per_instance_per_s" not in r:
                raise invalid("faults.crash_rate", r, "it must give per_instance_per_s (crashes per instance per second)")
            self.crash_rate = {
                "per_instance_per_s": check_number("faults.crash_rate.per_instance_per_s", r["per_instance_per_s"],
                                                   gt=0, le=1000),
                "restart_s": check_number("faults.crash_rate.restart_s", r.get("restart_s"), none_ok=True, **DURATION),
                "from_s": check_number("faults.crash_rate.from_s", r.get("from_s", 0.0), **TIME),
                "to_s": check_number("faults.crash_rate.to_s", r.get("to_s"), none_ok=True, **TIME)}
            if self.crash_rate["to_s"] is not None and self.crash_rate["to_s"] <= self.crash_rate["from_s"]:
                raise invalid("faults.crash_rate.to_s", self.crash_rate["to_s"],
                              f"it must be after from_s={self.crash_rate['from_s']:g}")
        n = (len(self.crashes) + len(self.scrape_outages) + len(self.stragglers) + len(self.kv_link_slowdowns)
             + len(self.kv_link_outages))
        if n > MAX_EVENTS:
            raise invalid("faults", f"{n} events", f"at most {MAX_EVENTS} fault events")

    @staticmethod
    def _entry(where: str, e, keys: tuple, defaults: dict) -> dict:
        check_keys(where, e, keys)
        missing = [k for k in keys if k not in e and k not in defaults]
        if missing:
            raise invalid(where, e, f"it must give {', '.join(missing)} (keys: {', '.join(keys)})")
        out = {**defaults, **e}
        if "instance" in keys:
            out["instance"] = _instance(f"{where}.instance", out["instance"], allow_all="duration_s" in keys
                                        and "factor" not in keys)
        out["at_s"] = check_number(f"{where}.at_s", out["at_s"], **TIME)
        for k in ("restart_s", "duration_s"):
            if k in out:
                out[k] = check_number(f"{where}.{k}", out[k], none_ok=k == "restart_s", **DURATION)
        if "factor" in out:
            out["factor"] = check_number(f"{where}.factor", out["factor"], gt=0, le=1000)
        return out

    @classmethod
    def from_value(cls, value, source: str = "faults") -> "FaultSchedule | None":
        """From a FaultSchedule, a mapping of its fields, a YAML file's path, or None."""
        if value is None or isinstance(value, FaultSchedule):
            return value
        if isinstance(value, (str, Path)):
            path = Path(value)
            if not path.is_file():
                raise invalid(source, str(value), "it must be a YAML file of faults (crashes, crash_rate, "
                              "scrape_outages, stragglers, on_crash, max_retries, seed, kv_link_slowdowns, "
                              "kv_link_outages, kv_load_failure)")
            try:
                value = yaml.safe_load(path.read_text())
            except yaml.YAMLError as e:
                raise ConfigError(f"{source}={str(path)!r}: not valid YAML ({' '.join(str(e).split())[:200]})") from None
            if isinstance(value, dict) and set(value) == {"faults"}:
                value = value["faults"]
        allowed = [f.name for f in fields(cls)]
        check_keys(source, value, allowed)
        return cls(**value)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def crashes_possible(self) -> bool:
        return bool(self.crashes or self.crash_rate)

    def check_cluster(self, instances: int, pd: bool, client_timeout: bool) -> None:
        """Instance indices within the cluster; what is not simulated with faults."""
        for name in ("crashes", "scrape_outages", "stragglers"):
            for k, e in enumerate(getattr(self, name)):
                if e["instance"] != "all" and e["instance"] >= instances:
                    raise invalid(f"faults.{name}[{k}].instance", e["instance"],
                                  f"the cluster has {instances} instances: an integer in [0, {instances - 1}]")
        if pd and (self.crashes_possible or self.scrape_outages or self.stragglers):
            raise ConfigError("faults.crashes / crash_rate / scrape_outages / stragglers on a P/D cluster "
                              "(cluster.prefill_instances > 0) are not simulated; allowed there: kv_link_slowdowns, "
                              "kv_link_outages")
        if not pd and (self.kv_link_slowdowns or self.kv_link_outages):
            raise ConfigError("faults.kv_link_slowdowns / kv_link_outages apply to P/D disaggregation, and the "
                              "cluster has no prefill pool (set prefill_instances >= 1, --prefill-instances)")
        if client_timeout and self.crashes_possible:
            raise ConfigError("faults.crashes / crash_rate with gateway.client_timeout_s are not simulated; "
                              "allowed: one or the other")

    def timeline(self, instances: int, seed: int, end_s: float) -> list[tuple[float, int, int, float]]:
        """``(time, kind, instance, value)`` actions in the order they apply (time, then
        kind: restarts, outage and straggler ends before crashes and starts), ``instance``
        -1 for every instance (``instances``: the P/D KV link). Poisson crashes are drawn
        here (``end_s``: the default ``to_s``); a crash of an instance already down, or
        one after the last restart of a never-restarting crash, is skipped."""
        acts = []
        crashes = [(e["at_s"], e["instance"], e["restart_s"]) for e in self.crashes]
        if self.crash_rate:
            rate = self.crash_rate
            lo, hi = rate["from_s"], rate["to_s"] if rate["to_s"] is not None else end_s
            expected = rate["per_instance_per_s"] * max(hi - lo, 0.0) * instances
            if expected > MAX_EVENTS:
                raise invalid("faults.crash_rate.per_instance_per_s", rate["per_instance_per_s"],
                              f"it draws about {expected:.0f} crashes over [{lo:g}, {hi:g}] s on {instances} "
                              f"instances; at most {MAX_EVENTS}")
            rng = np.random.default_rng([self.seed if self.seed is not None else seed, 31])
            for i in range(instances):
                t = lo
                while True:
                    t += rng.exponential(1.0 / rate["per_instance_per_s"])
                    if not t < hi:
                        break
                    crashes.append((float(t), i, rate["restart_s"]))
        down_until: dict[int, float] = {}
        for at, i, restart in sorted(crashes, key=lambda x: (x[0], x[1])):
            if at < down_until.get(i, -math.inf):
                continue  # already down
            up = math.inf if restart is None else at + restart
            down_until[i] = up
            acts.append((at, CRASH, i, 0.0))
            if up < math.inf:
                acts.append((up, RESTART, i, 0.0))
        for e in self.scrape_outages:
            i = -1 if e["instance"] == "all" else e["instance"]
            acts.append((e["at_s"], SCRAPE_OFF, i, 0.0))
            acts.append((e["at_s"] + e["duration_s"], SCRAPE_ON, i, 0.0))
        for e in self.stragglers:
            acts.append((e["at_s"], SLOW_ON, e["instance"], e["factor"]))
            acts.append((e["at_s"] + e["duration_s"], SLOW_OFF, e["instance"], e["factor"]))
        for e in self.kv_link_slowdowns:
            acts.append((e["at_s"], LINK_SLOW, instances, e["factor"]))
            acts.append((e["at_s"] + e["duration_s"], LINK_FAST, instances, e["factor"]))
        for e in self.kv_link_outages:
            acts.append((e["at_s"], LINK_DOWN, instances, 0.0))
            acts.append((e["at_s"] + e["duration_s"], LINK_UP, instances, 0.0))
        acts.sort(key=lambda a: (a[0], a[1], a[2]))
        return acts


def apply(state, c: int, instances: int, action: tuple, slow: list) -> None:
    """One timeline action on cluster ``c`` of ``state`` at its current time (``slow``: each
    instance's list of active straggler factors, then the KV link's, kept by the caller;
    their product applies, exactly 1.0 once none is left)."""
    _, kind, i, value = action
    if kind in (LINK_DOWN, LINK_UP):
        state.link_outage(c, kind == LINK_DOWN)
        return
    if kind in (LINK_SLOW, LINK_FAST):
        if kind == LINK_SLOW:
            slow[i].append(value)
        else:
            slow[i].remove(value)
        state.set_link_slowdown(c, float(np.prod(slow[i])) if slow[i] else 1.0)
        return
    for j in (range(instances) if i < 0 else (i,)):
        if kind == CRASH:
            state.crash(c, j)
        elif kind == RESTART:
            state.restart(c, j)
        elif kind in (SCRAPE_OFF, SCRAPE_ON):
            state.block_scrapes(c, j, kind == SCRAPE_OFF)
        else:
            if kind == SLOW_ON:
                slow[j].append(value)
            else:
                slow[j].remove(value)
            state.set_slowdown(c, j, float(np.prod(slow[j])) if slow[j] else 1.0)
