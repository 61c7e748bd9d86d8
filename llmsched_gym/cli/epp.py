"""The llm-d EndpointPickerConfig on the command line (docs/epp.md): ``policies
--to-epp-config SPEC`` writes one, ``compare --epp-config FILE`` adds one's policies as an
entry (``run --epp-config`` is a gateway flag, :func:`llmsched_gym.cli.flags.policy_overrides`)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ConfigError
from ..gateway.epp import DEFAULT_BAND_CAPACITY, DEFAULT_TTL_S, dump_epp_config, load_epp_config
from ..validation import atomic_write_text, check_output_file


def add_to_epp_config_args(p) -> None:
    """``--to-epp-config SPEC`` (and its ``--out``, ``--force``) on the ``policies`` parser."""
    p.add_argument("--to-epp-config", metavar="SPEC",
                   help="write the llm-d EndpointPickerConfig of a policy combination, e.g. "
                        "'llm-d:prefix_weight=2+soft-reflective-ceiling'")
    p.add_argument("--out", help="with --to-epp-config: write to this file instead of stdout")
    p.add_argument("--force", action="store_true", help="with --out: replace an existing file")


def add_epp_entries_arg(p) -> None:
    """``--epp-config FILE`` (repeatable) on the ``compare`` parser."""
    p.add_argument("--epp-config", action="append", dest="epp_configs", metavar="FILE",
                   help="add the policies of an llm-d EndpointPickerConfig as an entry (repeatable; "
                        "labelled by the file name)")


def cmd_to_epp_config(args) -> int:
    """``policies --to-epp-config SPEC [--out FILE]``."""
    if args.out is not None:
        check_output_file("--out", args.out, force=args.force)  # a bad path: one line, exit 2, nothing written
    text = dump_epp_config(args.to_epp_config)
    if args.out is not None:
        atomic_write_text(Path(args.out).expanduser(), text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


def with_epp_entries(args):
    """``compare --epp-config``: each file becomes a ``--policies`` entry."""
    files = getattr(args, "epp_configs", None) or []
    entries = []
    for f in files:
        cfg = load_epp_config(f)
        for w in cfg.warnings:
            print(f"warning: {cfg.source}: {w}", file=sys.stderr)
        extra = {k: v for k, v in (("ttl_s", cfg.ttl_s), ("band_capacity", cfg.band_capacity))
                 if v is not None and v != {"ttl_s": DEFAULT_TTL_S, "band_capacity": DEFAULT_BAND_CAPACITY}[k]}
        if extra or cfg.saturation is not None or cfg.eviction:
            raise ConfigError(f"compare --epp-config {f}: its defaultRequestTTL / maxRequests / saturation detector "
                              "/ enableEviction "
                              "differ from the defaults, and compare sets policies only; use run --epp-config or a "
                              "scenario YAML with gateway: {epp_config: FILE}")
        entries.append(cfg.spec(label=Path(f).stem))
    if entries:
        args.policies = ";".join(([args.policies] if args.policies else []) + entries)
    return args
