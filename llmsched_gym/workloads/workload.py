"""The request table given to the simulator: one row per request, as numpy arrays.

A :class:`Workload` is what trace loaders and synthetic generators produce and what the
simulator consumes. Prefix structure is a chain of block hashes per request, stored
ragged (``hash_ids`` flat, ``hash_offsets`` of length n+1) exactly like the Mooncake
trace: request ``r`` covers prompt tokens ``[k*G, (k+1)*G)`` with id
``hash_ids[hash_offsets[r] + k]`` where ``G = hash_block_tokens``; two requests share
their first ``k`` ids exactly when they share their first ``k*G`` prompt tokens. A
request with no ids (``hash_block_tokens == 0`` or an empty chain) shares nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError

#: Names of the priority classes used by the seed workloads (docs/architecture.md).
CRITICAL, SHEDDABLE = 0, -1


def class_name(priority: int) -> str:
    """Default display name of a priority: ``critical`` (>= 0) or ``sheddable`` (< 0)."""
    if priority >= 0:
        return "critical" if priority == 0 else f"critical-p{priority}"
    return "sheddable" if priority == -1 else f"sheddable-p{priority}"


@dataclass
class Workload:
    """A set of requests sorted by arrival time.

    Attributes:
        arrival_s: arrival time at the gateway, seconds, non-decreasing (float64).
        input_tokens: prompt length per request (int64, >= 1).
        output_tokens: tokens to generate per request (int64, >= 1).
        priority: integer priority per request; higher is more important, < 0 sheddable.
        hash_ids: flat prefix-chained block ids of all requests (int64).
        hash_offsets: request ``r``'s ids are ``hash_ids[hash_offsets[r]:hash_offsets[r+1]]``.
        hash_block_tokens: tokens per hash block ``G`` (512 for Mooncake), 0 if none.
        session_id: multi-turn session per request, -1 if none.
        prefix_group: shared-prefix group per request (system prompt, tool prompt, hot
            prefix), -1 if none. Used by analyses such as LMetric's hotspot detector.
        slo_ttft_s / slo_tpot_s: per-priority SLOs in seconds, used for SLO attainment.
        name: a label for reports.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    priority: np.ndarray | None = None
    hash_ids: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    hash_block_tokens: int = 0
    session_id: np.ndarray | None = None
    prefix_group: np.ndarray | None = None
    slo_ttft_s: dict[int, float] = field(default_factory=dict)
    slo_tpot_s: dict[int, float] = field(default_factory=dict)
    name: str = "workload"

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.input_tokens = np.asarray(self.input_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)
        self.priority = (
            np.zeros(n, np.int64) if self.priority is None else np.asarray(self.priority, np.int64)
        )
        if self.hash_ids is None or self.hash_offsets is None:
            self.hash_ids = np.zeros(0, np.int64)
            self.hash_offsets = np.zeros(n + 1, np.int64)
        self.hash_ids = np.asarray(self.hash_ids, np.int64)
        self.hash_offsets = np.asarray(self.hash_offsets, np.int64)
        for name in ("session_id", "prefix_group"):
            v = getattr(self, name)
            setattr(self, name, np.full(n, -1, np.int64) if v is None else np.asarray(v, np.int64))
        self.validate()

    def __len__(self) -> int:
        return len(self.arrival_s)

    def validate(self) -> None:
        """Check shapes and ranges; raise ConfigError naming the bad field."""
        n = len(self.arrival_s)
        for name in ("input_tokens", "output_tokens", "priority", "session_id", "prefix_group"):
            if len(getattr(self, name)) != n:
                raise ConfigError(f"workload field {name!r} has {len(getattr(self, name))} rows, expected {n}")
        if len(self.hash_offsets) != n + 1:
            raise ConfigError(f"workload field 'hash_offsets' must have {n + 1} entries")
        if n == 0:
            return
        if not np.all(np.isfinite(self.arrival_s)) or self.arrival_s[0] < 0:
            raise ConfigError("workload field 'arrival_s' must be finite and >= 0")
        if np.any(np.diff(self.arrival_s) < 0):
            raise ConfigError("workload field 'arrival_s' must be sorted (non-decreasing)")
        for name in ("input_tokens", "output_tokens"):
            v = getattr(self, name)
            if v.min() < 1:
                i = int(np.argmin(v))
                raise ConfigError(f"workload field {name!r} must be >= 1 (request {i} has {v[i]})")
        if self.hash_block_tokens < 0:
            raise ConfigError("workload field 'hash_block_tokens' must be >= 0")

    def hashes(self, r: int) -> np.ndarray:
        """The prefix-chained block ids of request ``r``."""
        return self.hash_ids[self.hash_offsets[r] : self.hash_offsets[r + 1]]

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    @property
    def mean_rate(self) -> float:
        """Mean arrival rate in requests per second."""
        return (len(self) - 1) / self.duration_s if self.duration_s > 0 else float("inf")

    def subset(self, index) -> "Workload":
        """The requests selected by a boolean mask or sorted index array."""
        idx = np.arange(len(self))[index]
        lens = np.diff(self.hash_offsets)[idx]
        offsets = np.concatenate([[0], np.cumsum(lens)])
        flat = (
            np.concatenate([self.hashes(int(r)) for r in idx]) if len(idx) else np.zeros(0, np.int64)
        )
        return Workload(
            self.arrival_s[idx], self.input_tokens[idx], self.output_tokens[idx],
            self.priority[idx], flat.astype(np.int64), offsets, self.hash_block_tokens,
            self.session_id[idx], self.prefix_group[idx], dict(self.slo_ttft_s),
            dict(self.slo_tpot_s), self.name,
        )

    def scaled(self, time_scale: float) -> "Workload":
        """A copy with inter-arrival times multiplied by ``time_scale`` (>1 slows it down)."""
        if not time_scale > 0:
            raise ConfigError(f"time_scale={time_scale!r} is invalid; it must be > 0")
        w = self.subset(slice(None))
        w.arrival_s = (self.arrival_s - self.arrival_s[0]) * time_scale + self.arrival_s[0] if len(self) else self.arrival_s
        return w

    def ideal_prefix_hit_ratio(self) -> float:
        """Token-weighted prefix-hit ratio with an unbounded cache shared by all requests.

        A block hits if its id was seen before; hit blocks count ``G`` tokens, the last
        (partial) block its real length. Requests are taken in arrival order.
        """
        if self.hash_block_tokens == 0 or len(self.hash_ids) == 0:
            return 0.0
        G = self.hash_block_tokens
        _, first = np.unique(self.hash_ids, return_index=True)
        seen_before = np.ones(len(self.hash_ids), bool)
        seen_before[first] = False
        req = np.repeat(np.arange(len(self)), np.diff(self.hash_offsets))
        pos = np.arange(len(self.hash_ids)) - self.hash_offsets[req]
        tokens = np.minimum(G, self.input_tokens[req] - pos * G).clip(min=0)
        return float(tokens[seen_before].sum() / self.input_tokens.sum())


def merge_workloads(parts: list[Workload], name: str = "mixture") -> Workload:
    """Interleave several workloads by arrival time (stable), keeping their prefix chains
    apart: each part's hash ids are offset past the previous parts' ids, and each
    part's prefix groups and sessions are renumbered to stay distinct.
    """
    G = {w.hash_block_tokens for w in parts if w.hash_block_tokens}
    if len(G) > 1:
        raise ConfigError(f"cannot merge workloads with different hash_block_tokens {sorted(G)}")
    ids, offsets, groups, sessions = [], [np.zeros(1, np.int64)], [], []
    id_base = grp_base = ses_base = 0
    for w in parts:
        ids.append(w.hash_ids + id_base)
        offsets.append(w.hash_offsets[1:] + offsets[-1][-1])
        groups.append(np.where(w.prefix_group >= 0, w.prefix_group + grp_base, -1))
        sessions.append(np.where(w.session_id >= 0, w.session_id + ses_base, -1))
        id_base += int(w.hash_ids.max()) + 1 if len(w.hash_ids) else 0
        grp_base += int(w.prefix_group.max()) + 1 if (w.prefix_group >= 0).any() else 0
        ses_base += int(w.session_id.max()) + 1 if (w.session_id >= 0).any() else 0
    arrival = np.concatenate([w.arrival_s for w in parts])
    order = np.argsort(arrival, kind="stable")
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    offs = np.concatenate(offsets)
    lens = np.diff(offs)[order]
    starts = offs[:-1][order]
    new_offsets = np.concatenate([[0], np.cumsum(lens)])
    gather = np.repeat(starts - new_offsets[:-1], lens) + np.arange(new_offsets[-1])
    cat = lambda f: np.concatenate([getattr(w, f) for w in parts])[order]  # noqa: E731
    slo_ttft, slo_tpot = {}, {}
    for w in parts:
        slo_ttft.update(w.slo_ttft_s)
        slo_tpot.update(w.slo_tpot_s)
    return Workload(arrival[order], cat("input_tokens"), cat("output_tokens"), cat("priority"),
                    flat[gather], new_offsets, G.pop() if G else 0, np.concatenate(sessions)[order],
                    np.concatenate(groups)[order], slo_ttft, slo_tpot, name)
