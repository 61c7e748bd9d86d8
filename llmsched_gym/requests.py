"""The simulator's request table: per-request state and records as numpy arrays."""

from __future__ import annotations

import numpy as np

from .errors import ConfigError
from .workload import Workload

# Outcome codes (DESIGN 3.1). IN_FLIGHT covers every request not yet in a final state.
IN_FLIGHT, FINISHED, REJECTED, EXPIRED, DROPPED = 0, 1, 2, 3, 4
OUTCOME_NAMES = {IN_FLIGHT: "in_flight", FINISHED: "finished", REJECTED: "rejected",
                 EXPIRED: "expired", DROPPED: "dropped"}


class RequestTable:
    """Structure of arrays over the workload's requests.

    Engine state of requests not running (running ones live in their instance):
    ``generated`` (output tokens emitted so far, kept across preemptions) and ``units``
    (cached unit keys each request references).
    Records (DESIGN 3.1): dispatch, first-token and finish times, instance, prefix-hit
    tokens, preemptions and outcome.
    """

    def __init__(self, workload: Workload, block_size: int):
        n = len(workload)
        self.workload = workload
        self.n = n
        self.block_size = block_size
        self.input = workload.input_tokens
        self.output = workload.output_tokens
        self.priority = workload.priority
        self.arrival = workload.arrival_s
        self.generated = np.zeros(n, np.int64)
        self.units: dict[int, list[int]] = {}
        self.instance = np.full(n, -1, np.int64)
        self.dispatch_t = np.full(n, np.nan)
        self.first_token_t = np.full(n, np.nan)
        self.finish_t = np.full(n, np.nan)
        self.end_t = np.full(n, np.nan)  # time the outcome became final
        self.prefix_hit = np.zeros(n, np.int64)
        self.scheduled_once = np.zeros(n, bool)
        self.preemptions = np.zeros(n, np.int64)
        self.outcome = np.zeros(n, np.int8)
        self._unit_cache: dict[int, tuple[list[int], list[int], list[int]]] = {}
        G = workload.hash_block_tokens
        if G and not (G % block_size == 0 or block_size % G == 0):
            raise ConfigError(
                f"hash_block_tokens={G} and block_size={block_size}: one must divide the other"
            )

    def units_of(self, r: int) -> tuple[list[int], list[int], list[int]]:
        """Prefix units of request ``r``: (keys, full blocks per unit, token end of each unit).

        A unit spans one hash id (``G >= block_size``) or one block (``G < block_size``,
        keyed by the chain id of its last hash block). Only full blocks are cacheable.
        """
        got = self._unit_cache.get(r)
        if got is not None:
            return got
        w, bs = self.workload, self.block_size
        h = w.hashes(r)
        n_in = int(self.input[r])
        G = w.hash_block_tokens
        if G == 0 or len(h) == 0:
            out = ([], [], [])
        else:
            if G >= bs:
                U, keys = G, h
            else:
                U = bs
                idx = np.minimum((np.arange(-(-n_in // bs)) + 1) * (bs // G) - 1, len(h) - 1)
                keys = h[idx]
            starts = np.arange(len(keys), dtype=np.int64) * U
            blocks = (np.minimum(starts + U, n_in) - starts).clip(min=0) // bs
            n = int(np.argmin(blocks > 0)) if (blocks == 0).any() else len(blocks)
            out = (keys[:n].tolist(), blocks[:n].tolist(), (starts[:n] + blocks[:n] * bs).tolist())
        self._unit_cache[r] = out
        return out

    def counts(self) -> dict[str, int]:
        """Requests per outcome; they always add up to the number of arrivals."""
        c = np.bincount(self.outcome, minlength=5)
        return {OUTCOME_NAMES[k]: int(c[k]) for k in OUTCOME_NAMES}
