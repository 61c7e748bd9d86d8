"""Command-line flags shared by the subcommands and scripts: the ranges of the numeric
ones, the gateway-policy flags (``--router``, ``--flow-control``, ``--admission``,
``--epp-config``) and where many simulations run (``--backend``, ``--ray-address``).

A layer below the modules that define subcommands (:mod:`llmsched_gym.cli` for ``run``,
:mod:`llmsched_gym.evaluation.harness` for ``compare``, :mod:`llmsched_gym.evaluation.tune`
for ``tune``) and the scripts of ``benchmarks/``, which use it.
"""

from __future__ import annotations

from .errors import ConfigError
from .evaluation.backends import BACKENDS, make_backend
from .validation import (
    CPU_KV_GB,
    INSTANCES,
    LINK_GBPS,
    LOAD,
    MAX_INSTANCES,
    MAX_TIME_SCALE,
    QPS,
    REQUESTS,
    SECONDS,
    SEED,
    SEEDS,
    WORKERS,
    check_name,
    check_number,
)

#: Numeric flags shared by ``run`` / ``compare`` and what they allow.
FLAG_RULES = {
    "--seed": SEED, "--seeds": SEEDS, "--qps": QPS, "--load": LOAD, "--paper-qps": QPS, "--instances": INSTANCES,
    "--horizon": SECONDS, "--duration": SECONDS, "--time-scale": {"gt": 0, "le": MAX_TIME_SCALE},
    "--limit": REQUESTS, "--critical-share": {"ge": 0, "le": 1}, "--workers": WORKERS,
    "--cpu-kv-gb": CPU_KV_GB, "--cpu-link-gbps": LINK_GBPS, "--kv-link-gbps": LINK_GBPS,
    "--kv-link-latency": {"ge": 0, "le": 60}, "--prefill-instances": {"integer": True, "ge": 0, "le": MAX_INSTANCES - 1},
}


def check_flags(args, flags) -> None:
    """Range and finiteness of the numeric ``flags`` present on ``args`` (see FLAG_RULES)."""
    for flag in flags:
        v = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if v is not None and not isinstance(v, str):
            check_number(flag, v, **FLAG_RULES[flag])


def policy_overrides(args) -> dict:
    """The --router/--admission/--flow-control/--pd arguments as Scenario.simulator keywords
    (and compare's --scaler, as the combination's ``scaler`` role)."""
    out = {}
    for flag, key in (("--router", "router"), ("--admission", "admission"), ("--flow-control", "flow_control"),
                      ("--scaler", "scaler"), ("--pd", "pd")):
        v = check_name(flag, getattr(args, key, None), none_ok=True, what="a policy spec (see `llmsched-gym policies`)")
        if v is not None:
            out[key] = None if key == "flow_control" and v.strip().lower() == "none" else v
    if getattr(args, "epp_config", None) is not None:  # run --epp-config FILE (docs/epp.md)
        from .gateway.epp import epp_overrides

        out = epp_overrides(args.epp_config, out)
    return out


def add_force_arg(p) -> None:
    """``--force`` on parser ``p``: replace existing results (refused without it)."""
    p.add_argument("--force", action="store_true", help="replace an existing output file or directory's results")


def add_window_args(p) -> None:
    """``--duration`` and ``--horizon`` (a shorter run of the same scenario) on parser ``p``."""
    p.add_argument("--duration", type=float, help="arrival window in seconds (synthetic scenarios; shortens runs)")
    p.add_argument("--horizon", type=float, help="stop after this many simulated seconds")


def window_overrides(args) -> dict:
    """``--duration`` / ``--horizon`` as scenario overrides (``duration_s``, ``horizon_s``)."""
    return {k: v for k, v in (("duration_s", args.duration), ("horizon_s", args.horizon)) if v}


def add_backend_args(p) -> None:
    """``--backend`` and ``--ray-address`` on argparse parser ``p`` (which has ``--workers``)."""
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where the simulations run: local processes (default) or Ray (the [ray] extra)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="with --backend ray: 'auto' joins the Ray cluster running here, ray://host:port a remote "
                        "one (default: start a local Ray instance with --workers CPUs)")


def backend_from_args(args):
    """The backend ``--backend`` / ``--ray-address`` / ``--workers`` describe, checked before
    any simulation (a missing ``[ray]`` extra is a MissingExtraError). Close it after use."""
    address = check_name("--ray-address", args.ray_address, none_ok=True, what="a Ray address (or 'auto')")
    if address is not None and args.backend != "ray":
        raise ConfigError(f"--ray-address={address!r} applies only to --backend ray")
    check_flags(args, ["--workers"])
    return make_backend(args.backend, workers=args.workers, address=address)
