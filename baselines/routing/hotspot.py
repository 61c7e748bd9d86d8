"""LMetric's KV-cache hotspot detector.

A prefix class is a hotspot when its arrival share ``x`` outgrows the share of instances
that cache its prefix: ``x / (1 - x) > |M| / (I - |M|)`` (equivalently ``x > |M| / I``).
Routing then excludes ``M`` from that class's candidates, spreading the class onto new
instances until the condition clears.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from llmsched_gym.gateway.view import RequestInfo

PrefixClass = tuple[str, int]


class HotspotDetector:
    """Sliding-window arrival shares per prefix class.

    Args:
        window_s: length of the sliding window, seconds (60).
        prefix_blocks: leading blocks that define a class without a prefix group (4).
        block_tokens: tokens per block for those keys (64).
        top_classes: only the classes with the most arrivals in the window (ties
            included) can be flagged (8).
        min_samples: arrivals the window must hold before anything is flagged; without
            it the first requests of any class look like a 100% share (20).
    ``log`` lists ``(time, class)`` each time a class becomes a hotspot.
    """

    def __init__(self, window_s: float = 60.0, prefix_blocks: int = 4, block_tokens: int = 64,
                 top_classes: int = 8, min_samples: int = 20):
        self.window_s = float(window_s)
        self.prefix_blocks = int(prefix_blocks)
        self.block_tokens = int(block_tokens)
        self.top_classes = int(top_classes)
        self.min_samples = int(min_samples)
        self._arrivals: deque[tuple[float, PrefixClass | None]] = deque()
        self._counts: dict[PrefixClass, int] = {}
        self._flagged: set[PrefixClass] = set()
        self.log: list[tuple[float, PrefixClass]] = []

    def class_of(self, request: RequestInfo) -> PrefixClass | None:
        """The request's prefix group if it has one, else the chained key of its first
        ``prefix_blocks`` blocks (which identifies all of them); None if no full block."""
        if request.prefix_group >= 0:
            return ("group", int(request.prefix_group))
        keys = request.block_keys(self.block_tokens)
        if len(keys) == 0:
            return None
        return ("prefix", int(keys[min(self.prefix_blocks, len(keys)) - 1]))

    def excluded(self, now: float, request: RequestInfo, hits: np.ndarray) -> np.ndarray | None:
        """Record the arrival and return the instances to exclude for it (bool mask), or
        None when its class is not a hotspot. ``hits`` are its precise prefix-hit tokens:
        ``M`` = instances with ``hits > 0``. The share ``x`` is measured over the window
        before this arrival, so a perfectly balanced mix sits exactly at ``x = |M|/I``."""
        self._expire(now)
        cls = self.class_of(request)
        mask = None
        if cls is not None and len(self._arrivals) >= self.min_samples:
            x = self._counts.get(cls, 0) / len(self._arrivals)
            cached = hits > 0
            m, n = int(cached.sum()), len(hits)
            if 0 < m < n and x * (n - m) > m * (1 - x) and self._is_top(cls):
                mask = cached
        if cls is not None:
            if mask is None:
                self._flagged.discard(cls)
            elif cls not in self._flagged:
                self._flagged.add(cls)
                self.log.append((now, cls))
            self._counts[cls] = self._counts.get(cls, 0) + 1
        self._arrivals.append((now, cls))
        return mask

    def _is_top(self, cls: PrefixClass) -> bool:
        kth = heapq.nlargest(self.top_classes, self._counts.values())[-1]
        return self._counts.get(cls, 0) >= kth

    def _expire(self, now: float) -> None:
        start = now - self.window_s
        while self._arrivals and self._arrivals[0][0] < start:
            _, cls = self._arrivals.popleft()
            if cls is not None:
                left = self._counts[cls] - 1
                if left:
                    self._counts[cls] = left
                else:
                    del self._counts[cls]
