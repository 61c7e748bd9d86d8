"""numba's disk cache is keyed on the engine's source (llmsched_gym.engine.jitcache)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import llmsched_gym

_FITS = """
import json
import numpy as np
from llmsched_gym.engine import kernel, layout as L
req_i = np.zeros((L.N_RI, 1), np.int64)
req_i[L.RI_INPUT, 0], req_i[L.RI_OUTPUT, 0] = 100, 50
inst_i = np.zeros((L.N_II, 2), np.int64)
inst_i[L.II_TOTAL] = [5, 100]
clu_i = np.zeros((L.N_CI, 1), np.int64)
clu_i[L.CI_INST1, 0], clu_i[L.CI_BS, 0], clu_i[L.CI_MAX_LEN, 0] = 2, 16, -1
fits = kernel.fits_all(req_i, inst_i, clu_i, 0, 0).tolist()
stats = kernel.fits_all.stats
print(json.dumps([fits, sum(stats.cache_hits.values()), sum(stats.cache_misses.values())]))
"""


def test_a_layout_edit_invalidates_the_cached_kernels(tmp_path):
    """In a copy of the package: a second run loads the kernel from the cache; after two
    layout constants swap values (kernel.py untouched), the next run recompiles it and
    reads the fields where they now are (a stale kernel would read the other field and
    find that nothing fits)."""
    root = tmp_path / "src"
    shutil.copytree(Path(llmsched_gym.__file__).parent, root / "llmsched_gym",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def run():
        out = subprocess.run([sys.executable, "-c", _FITS], env=env, cwd=root, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        fits, hits, misses = json.loads(out.stdout.strip().splitlines()[-1])
        return fits, bool(hits), bool(misses)

    assert run() == ([False, True], False, True)  # compiled
    assert run() == ([False, True], True, False)  # loaded
    with open(root / "llmsched_gym" / "engine" / "layout.py", "a") as f:
        f.write("\nCI_BS, CI_MAX_LEN = CI_MAX_LEN, CI_BS\n")
    assert run() == ([False, True], False, True)  # recompiled
