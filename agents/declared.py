"""The seeds declared before training (``agents/declared_seeds.yaml``), read in one place.

Learners draw their workload seeds from :func:`training_seeds` only; a claim that an agent
beats a heuristic holds only on :func:`evaluation_seeds` (``benchmarks/studies/learners.py``).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

DECLARED = Path(__file__).resolve().parent / "declared_seeds.yaml"


@cache
def _declared() -> dict:
    return yaml.safe_load(DECLARED.read_text())


def training_seeds() -> range:
    """The declared training workload seeds (inclusive bounds in the file)."""
    d = _declared()["training_seeds"]
    return range(int(d["first"]), int(d["last"]) + 1)


def evaluation_seeds() -> list[int]:
    """The declared evaluation workload seeds."""
    return [int(s) for s in _declared()["evaluation_seeds"]]
