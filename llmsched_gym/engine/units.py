"""Prefix units of every request, computed once per workload (vectorized).

A unit is the prompt span covered by one id of the request's hash chain
(``G = hash_block_tokens >= block_size``), or one KV block keyed by the chain id of its
last hash block (``G < block_size``). A unit owns ``floor(len / block_size)`` full
blocks; only full blocks are cacheable (as in vLLM), so a request's units stop at its
first unit without a full block. Keys are mapped to dense ids per workload, which index
the per-instance prefix-cache tables of the compiled engine.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import ConfigError
from ..workloads.workload import Workload


@njit(cache=True)
def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """(id of each key, number of distinct keys): ids 0, 1, ... in order of first
    occurrence, through an open-addressing table (linear time, unlike sorting). Only
    equality of keys matters to the tables the ids index, not their order."""
    n = len(keys)
    size = 16
    while size < 2 * n:
        size *= 2
    mask = size - 1
    slot_key = np.empty(size, np.int64)
    slot_id = np.full(size, -1, np.int64)
    ids = np.empty(n, np.int64)
    distinct = 0
    for i in range(n):
        k = keys[i]
        x = k * -7046029254386353131  # Fibonacci hashing (0x9E3779B97F4A7C15 as int64); wraps
        h = (x ^ (x >> 29)) & mask
        while slot_id[h] >= 0 and slot_key[h] != k:
            h = (h + 1) & mask
        if slot_id[h] < 0:
            slot_key[h], slot_id[h] = k, distinct
            distinct += 1
        ids[i] = slot_id[h]
    return ids, distinct


def prefix_units(workload: Workload, block_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(offsets[n+1], dense keys, blocks, token ends, number of distinct keys) of all units."""
    n = len(workload)
    G, bs = workload.hash_block_tokens, block_size
    if G and not (G % bs == 0 or bs % G == 0):
        raise ConfigError(f"hash_block_tokens={G} and block_size={bs}: one must divide the other")
    m = np.diff(workload.hash_offsets)  # hash ids per request
    inp = workload.input_tokens
    if G == 0 or n == 0:
        counts = np.zeros(n, np.int64)
    elif G >= bs:
        counts = np.where(inp >= bs, np.minimum(m, (inp - bs) // G + 1), 0)
    else:
        counts = inp // bs
    counts = np.where(m > 0, counts, 0).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    total = int(offsets[-1])
    if total == 0:
        empty = np.zeros(0, np.int64)
        return offsets, empty, empty, empty, 0
    keys, blocks, ends = _unit_spans(workload.hash_ids.astype(np.int64), workload.hash_offsets.astype(np.int64),
                                     inp.astype(np.int64), offsets, G, bs)
    dense, distinct = dense_ids(keys)
    return offsets, dense, blocks, ends, distinct


@njit(cache=True)
def _unit_spans(hash_ids, hash_offsets, inp, offsets, G, bs):
    """(hash key, full blocks, token end) of every unit, one pass (see prefix_units)."""
    total = offsets[-1]
    keys, blocks, ends = np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, np.int64)
    for r in range(len(offsets) - 1):
        base, m = hash_offsets[r], hash_offsets[r + 1] - hash_offsets[r]
        for k in range(offsets[r + 1] - offsets[r]):
            u = offsets[r] + k
            if G >= bs:
                keys[u] = hash_ids[base + k]
                start = k * G
                blocks[u] = min(G, inp[r] - start) // bs
            else:  # one block per unit, keyed by the chain id of its last hash block
                keys[u] = hash_ids[base + min((k + 1) * (bs // G) - 1, m - 1)]
                start = k * bs
                blocks[u] = 1
            ends[u] = start + blocks[u] * bs
    return keys, blocks, ends


def router_block_keys(workload: Workload, block_tokens: int, max_blocks: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """(offsets[n+1], dense keys, distinct keys, the keys themselves) of every request's
    router block keys.

    The keys of :meth:`~llmsched_gym.gateway.view.RequestInfo.block_keys` (full blocks of
    ``block_tokens`` prompt tokens, chained through the hash ids; unique to the request
    without prefix information), at most ``max_blocks`` of them (0: all), computed for
    the whole workload at once and mapped to dense ids.
    """
    G, bt = workload.hash_block_tokens, block_tokens
    n_full = workload.input_tokens // bt
    counts = np.minimum(n_full, max_blocks) if max_blocks else n_full
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    total = int(offsets[-1])
    if total == 0:
        return offsets, np.zeros(0, np.int64), 0, np.zeros(0, np.int64)
    keys = _block_keys(workload.hash_ids.astype(np.int64), workload.hash_offsets.astype(np.int64), offsets, G, bt)
    dense, distinct = dense_ids(keys)
    return offsets, dense, distinct, keys


@njit(cache=True)
def _block_keys(hash_ids, hash_offsets, offsets, G, bt):
    """The chained key of every router block (see router_block_keys), one pass."""
    keys = np.empty(offsets[-1], np.int64)
    for r in range(len(offsets) - 1):
        base, m = hash_offsets[r], hash_offsets[r + 1] - hash_offsets[r]
        for b in range(offsets[r + 1] - offsets[r]):
            j = b + 1  # block number, from 1
            end_token = j * bt
            if G > 0 and m > 0:
                h = hash_ids[base + max(min((end_token - 1) // G, m - 1), 0)]
                keys[offsets[r] + b] = h * (G // bt + 1) + ((end_token - 1) % G) // bt if G >= bt else h
            else:  # no prefix information: unique to the request
                keys[offsets[r] + b] = -(r * 1_000_003 + j)
    return keys


def prefix_classes(workload: Workload, prefix_blocks: int, block_tokens: int) -> tuple[np.ndarray, int]:
    """(dense class per request, -1 for none; number of classes) of LMetric's hotspot
    detector: the request's prefix group if it has one, else the chained key of its first
    ``prefix_blocks`` blocks of ``block_tokens`` (None without a full block)."""
    n = len(workload)
    offsets, _, _, keys = router_block_keys(workload, block_tokens)  # classes order by key
    counts = np.diff(offsets)
    group = workload.prefix_group
    has_key = counts > 0
    key_at = offsets[:-1] + np.minimum(prefix_blocks, np.maximum(counts, 1)) - 1
    key = np.where(has_key, keys[np.minimum(key_at, max(len(keys) - 1, 0))] if len(keys) else 0, 0)
    kind = np.where(group >= 0, 0, np.where(has_key, 1, -1))  # 0 group, 1 prefix key, -1 none
    value = np.where(group >= 0, group, key)
    cls = np.full(n, -1, np.int64)
    some = kind >= 0
    if some.any():
        _, dense = np.unique(np.stack([kind[some], value[some]], axis=1), axis=0, return_inverse=True)
        cls[some] = dense.reshape(-1)
    return cls, int(cls.max() + 1) if n else 0
