"""Regenerate the capacity table shipped with the package (llmsched_gym/capacities.json).

``load = F`` runs a scenario at F times its capacity (docs/scenarios.md, "Rates and
capacity"). Built-in scenarios read it from this table, so a fresh machine's first
``llmsched-gym compare`` does not measure; each entry carries the scenario's
fingerprint, and ``tests/test_scenarios.py`` checks that every entry still matches its
scenario (change a built-in scenario or the method, and this script must be rerun).

    python benchmarks/validation/capacities.py                  # every built-in scenario (long: tens of minutes)
    python benchmarks/validation/capacities.py codegen chatbot  # only these; other entries are kept
    python benchmarks/validation/capacities.py --check          # exit 1 if an entry is stale or missing
    python benchmarks/validation/capacities.py --backend ray --ray-address auto  # one task per scenario on a Ray cluster

One scenario's measurement is a sequential search (each probe's rate depends on the
previous verdicts), so it is one task; scenarios are independent tasks of the backend:
one at a time in this process by default (run it under ``nice``), ``--workers N``
processes, or Ray (``--backend ray``). Trace scenarios whose trace files are absent are
skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llmsched_gym import capacity as C  # noqa: E402
from llmsched_gym.cli.flags import add_backend_args, backend_from_args  # noqa: E402
from llmsched_gym.errors import ConfigError  # noqa: E402
from llmsched_gym.scenarios import list_scenarios, make_scenario  # noqa: E402


def _available(name: str) -> bool:
    try:
        make_scenario(name).fingerprint()
        return True
    except ConfigError:  # a trace scenario without its trace file
        return False


def load_table() -> dict:
    try:
        return json.loads(C.SHIPPED_TABLE.read_text())
    except (OSError, ValueError):
        return {}


def check(table: dict, names: list[str]) -> list[str]:
    """Names whose entry is missing or whose fingerprint no longer matches."""
    entries = table.get("scenarios", {})
    return [n for n in names if n not in entries or entries[n]["fingerprint"] != make_scenario(n).fingerprint()]


def write_table(entries: dict) -> None:
    """The table, one line per scenario (readable diffs)."""
    lines = [f"  {json.dumps(name)}: {json.dumps(rec, sort_keys=True)}" for name, rec in sorted(entries.items())]
    text = ("{\n" f' "method": {json.dumps(C.METHOD)},\n'
            ' "note": "Capacities of the built-in scenarios (docs/scenarios.md, Rates and capacity); '
            'regenerate with python benchmarks/validation/capacities.py",\n'
            ' "scenarios": {\n' + ",\n".join(lines) + "\n }\n}\n")
    json.loads(text)  # well formed
    tmp = C.SHIPPED_TABLE.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(C.SHIPPED_TABLE)


def measure(name: str) -> dict:
    """One scenario's table entry, measured now (a backend task)."""
    sc = make_scenario(name)
    start = time.perf_counter()
    rec = C.capacity_record(sc, use_cache=False)
    wall = time.perf_counter() - start
    return {"fingerprint": sc.fingerprint(), **{k: v for k, v in rec.items() if k != "source"},
            "measured_wall_s": round(wall, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="scenarios to (re)measure (default: every built-in one)")
    ap.add_argument("--check", action="store_true", help="only check the table's fingerprints")
    ap.add_argument("--workers", type=int, help="scenarios measured at once (default: 1; with --backend ray, "
                    "the local Ray instance's CPUs)")
    add_backend_args(ap)
    args = ap.parse_args(argv)
    names = args.names or [n for n in list_scenarios() if _available(n)]
    table = load_table()
    if args.check:
        stale = check(table, names)
        for n in stale:
            print(f"stale or missing: {n}")
        extra = sorted(set(table.get("scenarios", {})) - set(list_scenarios()))
        for n in extra:
            print(f"not a registered scenario: {n}")
        return 1 if stale or extra else 0
    entries = dict(table.get("scenarios", {}))

    def done(i: int, rec: dict) -> None:
        entries[names[i]] = rec
        print(f"{names[i]:28s} {rec['qps']:10.3f} req/s  window {rec['window_s']:7.0f} s  "
              f"{len(rec['steps'])} checks  {rec['measured_wall_s']:6.1f} s", flush=True)
        write_table(entries)  # after each, so a stop keeps the rest

    if args.workers is None and args.backend == "local":
        args.workers = 1  # one at a time, as the measurements are long
    backend = backend_from_args(args)
    try:
        backend.map(measure, names, done)
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
