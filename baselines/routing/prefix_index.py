"""Approximate prefix index: which block keys the router sent to which instance.

Like llm-d's approximate prefix scorer, it records at dispatch time the request's block
keys (:meth:`RequestInfo.block_keys`) in a per-instance LRU of bounded capacity and
never sees the engines' real caches.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class BlockLRUIndex:
    """Per-instance LRU sets of block keys.

    Args:
        num_instances: number of instances.
        capacity: blocks remembered per instance; the least recently sent are dropped.
    """

    def __init__(self, num_instances: int, capacity: int):
        self.num_instances = num_instances
        self.capacity = int(capacity)
        self._lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_instances)]
        self._where: dict[int, int] = {}  # key -> bit mask of instances holding it

    def sizes(self) -> np.ndarray:
        """Distinct keys held per instance."""
        return np.array([len(lru) for lru in self._lru], dtype=np.int64)

    def insert(self, instance: int, keys: np.ndarray) -> None:
        """Record that ``keys`` (one request's blocks, prompt order) were sent to ``instance``."""
        lru, bit = self._lru[instance], 1 << instance
        # Touch in reverse so the leading blocks are the most recent and evicted last:
        # a prefix match needs them and is worthless without them.
        for k in reversed(keys.tolist()):
            if k in lru:
                lru.move_to_end(k)
            else:
                lru[k] = None
                self._where[k] = self._where.get(k, 0) | bit
        while len(lru) > self.capacity:
            k, _ = lru.popitem(last=False)
            mask = self._where[k] & ~bit
            if mask:
                self._where[k] = mask
            else:
                del self._where[k]

    def leading_matches(self, keys: np.ndarray) -> np.ndarray:
        """Number of leading ``keys`` held by each instance (int array)."""
        out = np.zeros(self.num_instances, dtype=np.int64)
        alive = (1 << self.num_instances) - 1
        n = 0
        for k in keys.tolist():
            mask = self._where.get(k, 0)
            dropped = alive & ~mask
            if dropped:
                _assign(out, dropped, n)
                alive &= mask
                if not alive:
                    return out
            n += 1
        _assign(out, alive, n)
        return out


def _assign(out: np.ndarray, mask: int, value: int) -> None:
    """Set ``out[i] = value`` for every bit ``i`` set in ``mask``."""
    while mask:
        low = mask & -mask
        out[low.bit_length() - 1] = value
        mask ^= low
