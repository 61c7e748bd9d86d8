"""Block-level KV cache of one instance: reference counts, prefix cache, LRU eviction.

Prefix caching works over *units*: the prompt span covered by one id of the request's
hash chain (``max(G, block_size)`` tokens, see :meth:`RequestTable.units`). A unit owns
``floor(len / block_size)`` full blocks; only full blocks are ever cached, as in vLLM.
Blocks are in one of three states: referenced by running requests (``used``), cached
but unreferenced and evictable (``evictable``, kept in LRU order), or free.
"""

from __future__ import annotations

from collections import OrderedDict


class KVCache:
    """Reference-counted block pool with a prefix cache keyed by chained unit ids.

    Args:
        total_blocks: KV capacity in blocks.
        block_size: tokens per block (16 in vLLM).
    """

    def __init__(self, total_blocks: int, block_size: int):
        self.total = int(total_blocks)
        self.block_size = int(block_size)
        self.entries: dict[int, list[int]] = {}  # key -> [refcount, blocks]
        self.lru: OrderedDict[int, int] = OrderedDict()  # unreferenced entries, oldest first
        self.used = 0
        self.evictable = 0

    @property
    def allocatable(self) -> int:
        """Blocks that can be allocated now (free plus evictable)."""
        return self.total - self.used

    def match(self, keys: list[int], blocks: list[int]) -> tuple[int, int]:
        """Leading units of a request found in the cache.

        Returns ``(units, blocks_now_evictable)``: how many leading units hit and how
        many of their blocks are currently unreferenced (acquiring them takes those
        blocks out of the allocatable pool).
        """
        n = idle = 0
        entries = self.entries
        for k, b in zip(keys, blocks):
            e = entries.get(k)
            if e is None or e[1] != b:
                break
            n += 1
            if e[0] == 0:
                idle += b
        return n, idle

    def cached_tokens(self, keys: list[int], blocks: list[int], ends: list[int]) -> int:
        """Prompt tokens of a request (its units: keys, blocks, token ends) cached here."""
        n = self.match(keys, blocks)[0] if keys else 0
        return ends[n - 1] if n else 0

    def acquire(self, keys: list[int]) -> None:
        """Reference cached units (a prefix hit): no compute, no new blocks."""
        for k in keys:
            e = self.entries[k]
            if e[0] == 0:
                nb = self.lru.pop(k)
                self.evictable -= nb
                self.used += nb
            e[0] += 1

    def allocate(self, n: int) -> None:
        """Take ``n`` blocks, evicting least-recently-used unreferenced units if needed."""
        if n <= 0:
            return
        if n > self.total - self.used:
            raise RuntimeError(f"KV allocation of {n} blocks exceeds the {self.total - self.used} allocatable")
        free = self.total - self.used - self.evictable
        while free < n:
            k, nb = self.lru.popitem(last=False)
            del self.entries[k]
            self.evictable -= nb
            free += nb
        self.used += n

    def register(self, key: int, blocks: int) -> bool:
        """Cache a unit a request has just computed (its blocks move from private to shared).

        Returns False if the key is already cached (a concurrent request computed the
        same prefix); the caller keeps its duplicate blocks private, as vLLM does.
        """
        if key in self.entries:
            return False
        self.entries[key] = [1, blocks]
        return True

    def release(self, keys: list[int], private_blocks: int) -> None:
        """Drop a request's references; its units stay cached and become evictable.

        Units are released tail first so that the end of a prompt is evicted before
        its beginning, which other requests are more likely to share.
        """
        entries, lru = self.entries, self.lru
        for k in reversed(keys):
            e = entries[k]
            e[0] -= 1
            if e[0] == 0:
                lru[k] = e[1]
                self.evictable += e[1]
                self.used -= e[1]
        self.used -= private_blocks
