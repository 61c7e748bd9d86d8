"""One vLLM-v1-like serving instance: continuous batching with chunked prefill (DESIGN 3.2).

The instance is driven by the cluster's event loop: :meth:`Instance.plan` forms the next
iteration at a given time and returns when it ends; :meth:`Instance.complete` applies it.
When only decoding happens and nothing can join the batch, many iterations are planned
at once (a *segment*) up to the first completion or KV-block shortfall, so simulation
cost grows with events, not with tokens. A segment is cut short when a new request
becomes schedulable (:meth:`Instance.interrupt`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, check_nonnegative
from .kvcache import KVCache
from .requests import FINISHED, RequestTable

_MAX_SEGMENT = 4096  # iterations planned at once; bounds the arrays a segment allocates


@dataclass
class EngineConfig:
    """Limits of one instance (vLLM defaults; BLIS uses max_num_batched_tokens=2048).

    Args:
        max_num_seqs: most requests in a running batch.
        max_num_batched_tokens: token budget of one iteration.
        block_size: tokens per KV block.
        max_model_len: longest request (input + output) accepted; None = KV capacity.
        event_skipping: plan decode-only iterations in segments (exact; off only to
            measure its speed-up).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    max_model_len: int | None = None
    event_skipping: bool = True

    @classmethod
    def blis(cls, **overrides) -> "EngineConfig":
        """BLIS's engine defaults (DESIGN 3.3): 16-token blocks, ``max_num_seqs`` 256,
        ``max_num_batched_tokens`` 2048, no long-prefill threshold (a prompt is chunked
        only by the token budget). KV capacity comes from ``ClusterConfig``
        (``gpu_memory_utilization`` 0.9: 15,909 blocks for Qwen3-14B on one H100)."""
        return cls(**{"max_num_seqs": 256, "max_num_batched_tokens": 2048, "block_size": 16, **overrides})

    def __post_init__(self) -> None:
        for f in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            check_nonnegative(f"engine.{f}", getattr(self, f), strict=True)
        if self.max_model_len is not None:
            check_nonnegative("engine.max_model_len", self.max_model_len, strict=True)


class Instance:
    """State and scheduler of one instance.

    The running batch is one instance-local array ``state`` of shape (6, n), columns in
    admission order, rows ``ids``, ``inp``, ``out``, ``comp`` (tokens in KV), ``gen``
    (tokens emitted) and ``shared`` (blocks in cached units the request references), so
    forming an iteration touches no per-request Python objects. A running request
    references ``ceil(comp / block_size)`` blocks at every iteration boundary; those not
    shared are private. Waiting requests' state lives in the shared
    :class:`RequestTable`.
    """

    def __init__(self, index: int, table: RequestTable, config: EngineConfig,
                 total_blocks: int, latency, on_finish, on_prefill_done):
        if config.block_size != table.block_size:
            raise ConfigError("engine block_size must match the request table's")
        self.index = index
        self.req = table
        self.cfg = config
        self.cache = KVCache(total_blocks, config.block_size)
        self.latency = latency
        self.first_token_delay = latency.first_token_delay_us * 1e-6
        self.on_finish = on_finish  # callback(request, time, outcome)
        self.on_prefill_done = on_prefill_done  # callback(request ids) at first token
        self.state = np.zeros((6, 0), np.int64)
        self.waiting: deque[int] = deque()
        self.pending = 0  # routed here, not yet schedulable (arrival delay)
        self.next_t = np.inf  # end of the iteration or segment in progress
        self._take = self.state[0]  # tokens each running request computes this iteration
        self._prefill = np.zeros(0, bool)
        self._seg_ends: np.ndarray | None = None  # iteration end times of a decode segment
        self._seg_used0 = 0
        self.iterations = 0

    @property
    def num_running(self) -> int:
        return self.state.shape[1]

    @property
    def ids(self) -> np.ndarray:
        return self.state[0]

    def _held(self) -> np.ndarray:
        bs = self.cfg.block_size
        return (self.state[3] + (bs - 1)) // bs

    # ----------------------------------------------------------------- admission
    def fits(self, r: int) -> bool:
        """Whether request ``r`` can ever run here (else it is dropped, DESIGN 3.1)."""
        total = int(self.req.input[r] + self.req.output[r])
        if self.cfg.max_model_len is not None and total > self.cfg.max_model_len:
            return False
        return -(-total // self.cfg.block_size) <= self.cache.total

    def enqueue(self, r: int, t: float) -> None:
        """Request ``r`` becomes schedulable at time ``t``."""
        self.pending -= 1
        self.waiting.append(r)
        if self.next_t == np.inf:
            self.plan(t)
        else:
            self.interrupt(t)

    def interrupt(self, t: float) -> None:
        """Cut a decode segment at the first iteration boundary at or after ``t``."""
        ends = self._seg_ends
        if ends is None:
            return
        n = int(np.searchsorted(ends, t, side="left"))
        if n + 1 < len(ends):
            self._seg_ends = ends[: n + 1]
            self.next_t = float(ends[n])

    # ----------------------------------------------------------------- planning
    def plan(self, t: float) -> None:
        """Form the iteration starting at ``t`` (vLLM v1 order) and set ``next_t``."""
        cache, cfg = self.cache, self.cfg
        bs, budget = cfg.block_size, cfg.max_num_batched_tokens
        S = self.state
        n = S.shape[1]
        preempted = False
        comp, gen = S[3], S[4]
        need = S[1] + gen - comp  # >= 1 for every running request
        total_need = int(need.sum())
        if total_need <= budget:
            take = need
        else:
            take = np.minimum(need, np.maximum(budget - (np.cumsum(need) - need), 0))
        new_blocks = (comp + take + (bs - 1)) // bs - (comp + (bs - 1)) // bs
        n_new = int(new_blocks.sum())
        if n_new > cache.allocatable:
            # Preempt the most recently admitted until the rest of the batch fits.
            cum = np.cumsum(new_blocks)
            while self.state.shape[1] and cum[self.state.shape[1] - 1] > cache.allocatable:
                self._preempt_last()
                preempted = True
            S = self.state
            n = S.shape[1]
            comp, gen = S[3], S[4]
            need, take, new_blocks = need[:n], take[:n], new_blocks[:n]
            total_need, n_new = int(need.sum()), int(new_blocks.sum())

        # Decode-only batch (every need is 1) that nothing can join: plan a segment.
        if (cfg.event_skipping and n and not preempted and total_need == n and total_need <= budget
                and gen.min() >= 1 and not self._can_admit(budget - n)):
            k = min(int((S[2] - gen).min()), _MAX_SEGMENT)
            if k > 1:
                k = self._affordable_iterations(k)
            if k > 1:
                return self._plan_segment(t, k)

        cache.allocate(n_new)
        decode = (need == 1) & (gen >= 1)
        if not preempted or not n:
            self._admit_waiting(budget - int(take.sum()), take, decode)
            if self.state.shape[1] > n:
                S, take, decode = self.state, self._take, self._decode
        if not S.shape[1]:
            self.next_t = np.inf
            return
        prefill = (take > 0) & ~decode
        dec = (take > 0) & decode
        # S[3][prefill]: tokens already in KV before this chunk (earlier chunks, prefix
        # hits); only models with ``uses_prefill_past`` (BLIS's roofline) read it.
        step_us = self.latency.step_time_us(
            take[prefill], (S[1] + S[4])[prefill], int(dec.sum()), int(S[3][dec].sum()),
            prefill_past=S[3][prefill])
        self._take, self._prefill = take, prefill
        self._seg_ends = None
        self.next_t = t + step_us * 1e-6
        self.iterations += 1

    def _admit_waiting(self, budget: int, take: np.ndarray, decode: np.ndarray) -> None:
        """Move waiting requests into the batch, in queue order, while they fit."""
        rows = []
        while self.waiting and self.state.shape[1] + len(rows) < self.cfg.max_num_seqs and budget > 0:
            row = self._admit(self.waiting[0], budget)
            if row is None:
                break
            self.waiting.popleft()
            rows.append(row)
            budget -= row[-1]
        if rows:
            cols = np.array(rows, np.int64).T  # ids, inp, out, comp, gen, shared, take
            self.state = np.concatenate([self.state, cols[:6]], axis=1)
            self._take = np.concatenate([take, cols[6]])
            self._decode = np.concatenate([decode, np.zeros(len(rows), bool)])

    def _can_admit(self, budget: int) -> bool:
        """Whether the head of the waiting queue could join a batch now."""
        if not self.waiting or budget <= 0 or self.state.shape[1] >= self.cfg.max_num_seqs:
            return False
        r = self.waiting[0]
        hit_tokens, _, idle, _ = self._prefix_hit(r)
        take = min(int(self.req.input[r] + self.req.generated[r]) - hit_tokens, budget)
        bs = self.cfg.block_size
        return -(-(hit_tokens + take) // bs) - hit_tokens // bs <= self.cache.allocatable - idle

    def _prefix_hit(self, r: int) -> tuple[int, int, int, list[int]]:
        """Cached prompt tokens of ``r`` here: (tokens, units, idle blocks, keys).

        At least one token is always computed (vLLM recomputes the last prompt token
        of a fully cached prompt), so the hit stops one unit short in that case.
        """
        keys, blocks, ends = self.req.units_of(r)
        if not keys:
            return 0, 0, 0, keys
        n, idle = self.cache.match(keys, blocks)
        target = int(self.req.input[r] + self.req.generated[r])
        while n and ends[n - 1] >= target:
            n -= 1
            idle = self.cache.match(keys[:n], blocks[:n])[1]
        return (ends[n - 1] if n else 0), n, idle, keys

    def _admit(self, r: int, budget: int) -> tuple | None:
        """Schedule waiting request ``r`` with up to ``budget`` tokens.

        Returns its batch row (r, inp, out, comp, gen, shared, take), or None if its
        blocks cannot be allocated.
        """
        R, cache, bs = self.req, self.cache, self.cfg.block_size
        hit_tokens, n_units, idle, keys = self._prefix_hit(r)
        inp, gen = int(R.input[r]), int(R.generated[r])
        take = min(inp + gen - hit_tokens, budget)
        hit_blocks = hit_tokens // bs
        new = -(-(hit_tokens + take) // bs) - hit_blocks
        if new > cache.allocatable - idle:
            return None
        cache.acquire(keys[:n_units])
        cache.allocate(new)
        R.units[r] = list(keys[:n_units])
        if not R.scheduled_once[r]:
            R.scheduled_once[r] = True
            R.prefix_hit[r] = hit_tokens
        return r, inp, int(R.output[r]), hit_tokens, gen, hit_blocks, take

    def _blocks_after(self, j: int) -> int:
        """New blocks the running batch needs to decode ``j`` more tokens each."""
        bs, comp = self.cfg.block_size, self.state[3]
        return int(((comp + (j + bs - 1)) // bs - (comp + (bs - 1)) // bs).sum())

    def _affordable_iterations(self, k: int) -> int:
        """Most decode iterations (<= k) whose new KV blocks fit in the allocatable pool."""
        avail = self.cache.allocatable
        if self._blocks_after(k) <= avail:
            return k
        lo, hi = 1, k  # iteration 1 fits (checked by plan), iteration k does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self._blocks_after(mid) <= avail else (lo, mid)
        return lo

    def _plan_segment(self, t: float, k: int) -> None:
        steps = self.latency.decode_run_us(self.state.shape[1], int(self.state[3].sum()), k)
        # Accumulate from t one step at a time, exactly as single iterations would.
        self._seg_ends = np.add.accumulate(np.concatenate(([t], steps * 1e-6)))[1:]
        self._seg_used0 = self.cache.used
        self.next_t = float(self._seg_ends[-1])

    # ----------------------------------------------------------------- completion
    def complete(self) -> None:
        """Apply the iteration or segment ending at ``next_t``, then plan the next."""
        t = self.next_t
        if self._seg_ends is not None:
            m = len(self._seg_ends)
            self.iterations += m
            self._seg_ends = None
            self.cache.allocate(self._blocks_after(m))
            S = self.state
            S[3:5] += m
            done = S[4] >= S[2]
        else:
            S = self.state
            S[3] += self._take
            emit = S[3] == S[1] + S[4]
            S[4] += emit
            first = emit & (S[4] == 1)
            if first.any():
                self.req.first_token_t[S[0][first]] = t + self.first_token_delay
                self.on_prefill_done(S[0][first])
            for j in np.flatnonzero(self._prefill).tolist():
                self._register_units(j)
            done = emit & (S[4] >= S[2])
        if done.any():
            self._finish(done, t)
        self.plan(t)

    def _finish(self, done: np.ndarray, t: float) -> None:
        R = self.req
        ids = self.state[0][done]
        private = (self._held() - self.state[5])[done]
        for r, p in zip(ids.tolist(), private.tolist()):
            self.cache.release(R.units.pop(r, []), p)
        R.generated[ids] = self.state[4][done]
        self.state = self.state[:, ~done]
        fin = t + self.latency.finish_delay_us(R.output[ids]) * 1e-6
        R.finish_t[ids] = fin
        for r, ft in zip(ids.tolist(), fin.tolist()):
            self.on_finish(r, ft, FINISHED)

    def _register_units(self, j: int) -> None:
        """Cache the prompt units running request ``j`` has fully computed (full blocks only)."""
        S = self.state
        r = int(S[0, j])
        keys, blocks, ends = self.req.units_of(r)
        mine = self.req.units.setdefault(r, [])
        c = int(S[3, j])
        for u in range(len(mine), len(keys)):
            if ends[u] > c or not self.cache.register(keys[u], blocks[u]):
                break
            mine.append(keys[u])
            S[5, j] += blocks[u]

    def _preempt_last(self) -> None:
        """Recompute-mode preemption of the most recently admitted running request:
        free its blocks (cached units stay reusable), back to the head of the queue."""
        R, S = self.req, self.state
        r = int(S[0, -1])
        self.cache.release(R.units.pop(r, []), int(self._held()[-1] - S[5, -1]))
        R.generated[r] = S[4, -1]
        R.preemptions[r] += 1
        self.state = S[:, :-1]
        self.waiting.appendleft(r)

    # ----------------------------------------------------------------- metrics
    def kv_used_at(self, t: float) -> int:
        """Referenced KV blocks at time ``t`` (inside a segment: after the iterations done by t)."""
        if self._seg_ends is None:
            return self.cache.used
        return self._seg_used0 + self._blocks_after(int(np.searchsorted(self._seg_ends, t, side="right")))
