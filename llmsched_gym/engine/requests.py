"""The simulator's request table: per-request state and records as numpy arrays."""

from __future__ import annotations

import copy

import numpy as np

from ..workloads.workload import Workload

# Outcome codes (docs/architecture.md). IN_FLIGHT covers every request not yet in a final state.
# EVICTED: dispatched, then revoked by the gateway's demand-driven eviction (llm-d).
# TIMED_OUT: its client gave up (GatewayConfig.client_timeout_s) before the last token.
# CRASHED: lost to a crash of its instance (faults): not re-sent, out of retries, or no instance up.
IN_FLIGHT, FINISHED, REJECTED, EXPIRED, DROPPED, EVICTED, TIMED_OUT, CRASHED = 0, 1, 2, 3, 4, 5, 6, 7
OUTCOME_NAMES = {IN_FLIGHT: "in_flight", FINISHED: "finished", REJECTED: "rejected",
                 EXPIRED: "expired", DROPPED: "dropped", EVICTED: "evicted", TIMED_OUT: "timed_out",
                 CRASHED: "crashed"}


class RequestTable:
    """Per-request records of one cluster, as numpy views into the batched engine state.

    Fields (docs/architecture.md records): ``instance``, ``dispatch_t``, ``first_token_t``,
    ``finish_t``, ``end_t`` (time the outcome became final), ``prefix_hit`` (cached
    prompt tokens at first scheduling), ``cpu_hit`` (the part of them loaded from the CPU
    KV tier), ``scheduled_once``, ``preemptions``, ``retries`` (re-sent after a crash),
    ``generated`` (output tokens emitted so far, kept across preemptions), ``outcome``,
    and with P/D disaggregation ``decode_instance`` (-1: not disaggregated; ``instance`` is
    then the prefill instance) and ``transfer_s`` (its KV transfer, nan if none);
    the workload's ``input``, ``output``, ``priority`` and ``arrival``. Views update as
    the simulation runs.
    """

    def __init__(self, workload: Workload, block_size: int, state, c: int):
        from .layout import (
            RF_DISPATCH,
            RF_END,
            RF_FINISH,
            RF_FIRST,
            RF_TRANSFER,
            RI_CPU_HIT,
            RI_DECODE,
            RI_GENERATED,
            RI_INSTANCE,
            RI_OUTCOME,
            RI_PREEMPTIONS,
            RI_PREFIX_HIT,
            RI_RETRIES,
            RI_SCHEDULED,
        )

        r0 = int(state.req_off[c])
        r1 = r0 + len(workload)
        ri, rf = state.req_i, state.req_f
        self.workload = workload
        self.n = len(workload)
        self.block_size = block_size
        self.input = workload.input_tokens
        self.output = workload.output_tokens
        self.priority = workload.priority
        self.arrival = workload.arrival_s
        self.generated = ri[RI_GENERATED, r0:r1]
        self.instance = ri[RI_INSTANCE, r0:r1]
        self.prefix_hit = ri[RI_PREFIX_HIT, r0:r1]
        self.cpu_hit = ri[RI_CPU_HIT, r0:r1]
        self._scheduled = ri[RI_SCHEDULED, r0:r1]
        self.preemptions = ri[RI_PREEMPTIONS, r0:r1]
        self.retries = ri[RI_RETRIES, r0:r1]
        self.outcome = ri[RI_OUTCOME, r0:r1]
        self.dispatch_t = rf[RF_DISPATCH, r0:r1]
        self.first_token_t = rf[RF_FIRST, r0:r1]
        self.finish_t = rf[RF_FINISH, r0:r1]
        self.end_t = rf[RF_END, r0:r1]
        self.decode_instance = ri[RI_DECODE, r0:r1]
        self.transfer_s = rf[RF_TRANSFER, r0:r1]

    def detached(self) -> "RequestTable":
        """A copy whose arrays are the records as they are now, no longer views of the
        engine state (which the next run in the same slot overwrites)."""
        out = copy.copy(self)
        for k, v in vars(self).items():
            if isinstance(v, np.ndarray):
                setattr(out, k, v.copy())
        return out

    @property
    def scheduled_once(self) -> np.ndarray:
        """Whether each request was ever scheduled on an instance (bool)."""
        return self._scheduled != 0

    def counts(self) -> dict[str, int]:
        """Requests per outcome; they always add up to the number of arrivals."""
        c = np.bincount(self.outcome, minlength=len(OUTCOME_NAMES))
        return {OUTCOME_NAMES[k]: int(c[k]) for k in OUTCOME_NAMES}


def request_records(table: RequestTable, now: float | None = None) -> dict[str, np.ndarray]:
    """Per-request columns: times in seconds, NaN where an event did not happen.

    ``ttft_or_wait`` is the TTFT, or for a request that never got a first token the
    time it waited for one: until it expired, was evicted or timed out, or was lost to a
    crash, or until ``now`` (the simulation's clock, if given) for a request that arrived
    and is still waiting. ``censored`` marks those lower bounds.
    """
    ttft = table.first_token_t - table.arrival
    no_first = np.isnan(table.first_token_t)
    gave_up = no_first & ((table.outcome == EXPIRED) | (table.outcome == EVICTED) | (table.outcome == TIMED_OUT)
                          | (table.outcome == CRASHED))
    wait = np.where(gave_up, table.end_t - table.arrival, np.nan)
    if now is not None:
        waiting = no_first & (table.outcome == IN_FLIGHT) & (table.arrival <= now)
        wait = np.where(waiting, now - table.arrival, wait)
    censored = ~np.isnan(wait)
    tpot = np.where(table.output > 1,
                    (table.finish_t - table.first_token_t) / np.maximum(table.output - 1, 1), np.nan)
    return {
        "arrival": table.arrival, "dispatch": table.dispatch_t, "first_token": table.first_token_t,
        "finish": table.finish_t, "priority": table.priority, "instance": table.instance,
        "input_tokens": table.input, "output_tokens": table.output, "prefix_hit_tokens": table.prefix_hit,
        "cpu_hit_tokens": table.cpu_hit,
        "preemptions": table.preemptions, "retries": table.retries, "outcome": table.outcome,
        "ttft": ttft, "tpot": tpot, "e2e": table.finish_t - table.arrival,
        "ttft_or_wait": np.where(censored, wait, ttft), "censored": censored,
    }
