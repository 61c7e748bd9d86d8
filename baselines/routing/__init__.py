"""Routing policies (docs/architecture.md), one module per family, registered on import.

Shared helpers: :mod:`.pick` (tie-breaking and normalization), :mod:`.prefix_index`
(router-side block LRU), :mod:`.ledger` (router-side token counts), :mod:`.predict`
(step-time-model estimates of TTFT and TPOT).
"""

from . import (  # noqa: F401  (registration side effects)
    aibrix,
    bailian,
    dynamo,
    llmd,
    lmetric,
    polyserve,
    preble,
    sglang,
    simple,
)
