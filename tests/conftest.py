"""Shared fixtures: paths to the public traces and small cluster builders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.engine.requests import OUTCOME_NAMES

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def trace_path(*parts: str) -> Path:
    p = TRACES.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"trace {p} not present (expected beside the repository in ../shared/traces)")
    return p


def assert_accounting(sim) -> None:
    """Every arrival is in exactly one outcome, and the counts add up."""
    counts = sim.table.counts()
    arrived = int(np.sum(np.arange(sim.table.n) < sim.arrived))
    assert sum(counts.values()) == sim.table.n
    assert sum(v for k, v in counts.items() if k != "in_flight") + counts["in_flight"] == sim.table.n
    assert set(counts) == set(OUTCOME_NAMES.values())
    not_arrived = sim.table.n - arrived
    assert counts["in_flight"] >= not_arrived


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """The engine's kernels compiled (or loaded from numba's cache) before the first test:
    on a cold cache, in two processes (llmsched_gym.engine.warmup)."""
    from llmsched_gym.simulator import compile_kernels

    compile_kernels()


#: PPO settings small enough for a test to train a few updates in seconds.
TINY_PPO = dict(n_steps=64, batch_size=64, n_epochs=2)


@pytest.fixture
def one_torch_thread():
    """Torch on one thread for the test (tiny networks: many threads on shared cores are
    ~10x slower); torch is imported only by the tests that ask for it."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
