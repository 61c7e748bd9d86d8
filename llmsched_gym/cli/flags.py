"""Command-line flags shared by the subcommands (``--router``, ``--flow-control``,
``--admission``, ``--epp-config``, the window, where many simulations run: ``--backend``,
``--ray-address``) and how every flag's value is validated.

A flag sets a field of a configuration model: its ``dest`` is the field's name
(``--horizon`` sets ``horizon_s``, ``--kv-link-latency`` sets ``kv_link_latency_s``), and
:func:`check_flags` validates the values given with :class:`FlagValues` (the scenario's
keywords, :data:`~llmsched_gym.scenarios.ScenarioOverrides`, and a run's own settings), so
``--qps -3`` fails with the same rule as ``make_scenario(qps=-3)`` and a YAML ``qps: -3``,
under the flag's name. Used by the subcommands of :mod:`llmsched_gym.cli` and by the
scripts of ``benchmarks/``.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..evaluation.backends import BACKENDS, make_backend
from ..gateway.epp import epp_overrides
from ..scenarios import POLICY_OVERRIDES, RATE_KEYS, ScenarioOverrides, TraceSource, check_scenario_overrides
from ..validation import (
    Duration,
    Name,
    Seed,
    SeedCount,
    TimeScale,
    WorkerCount,
    check_name,
    model_fields,
    validate_model,
)


class FlagValues(ScenarioOverrides):
    """What the shared flags set: the scenario's keywords and a run's own settings (seeds,
    workers, the workload source and a trace's options). A subcommand with flags of its own
    validates a model that extends this one."""

    seed: Seed = 0
    seeds: SeedCount = 1
    workers: WorkerCount | None = None
    scenario: Name | None = None
    trace: Name | None = None
    time_scale: TimeScale | None = None
    limit: model_fields(TraceSource)["limit"] = None
    critical_share: model_fields(TraceSource)["critical_share"] = None
    window: Duration | None = None


#: Fields whose flags carry text parsed before validation: policy specs (:func:`policy_overrides`),
#: a KV capacity (``--kv-blocks 512`` or ``unlimited``) and a switch.
_PARSED_LATER = (*POLICY_OVERRIDES, "kv_blocks", "eviction")
#: The rate flags of the subcommands that take several points (``--qps 4,10,16``).
RATE_FLAGS = {k: f"--{k.replace('_', '-')}" for k in RATE_KEYS}


def flag_names(args) -> dict:
    """``{dest: flag}`` of the parser that made ``args`` (``set_defaults(flag_names=...)`` by
    :func:`llmsched_gym.cli.build_parser`); else each ``dest`` with dashes."""
    return getattr(args, "flag_names", None) or {}


def _flag(args, dest: str) -> str:
    return flag_names(args).get(dest, f"--{dest.replace('_', '-')}")


def check_flags(args, model: type[FlagValues] = FlagValues, *, skip=()) -> None:
    """The values of the flags on ``args`` that set a field of ``model``, validated by it and
    named by their flags (``skip``: fields whose flags this subcommand parses itself)."""
    fields_ = model.model_fields
    values = {dest: v for dest, v in vars(args).items()
              if dest in fields_ and dest not in _PARSED_LATER and dest not in skip and v is not None}
    names = {dest: _flag(args, dest) for dest in values}
    check_scenario_overrides(values, model=model, names=names, label="llmsched-gym")


def parse_rate_list(kind: str, text: str) -> list[float]:
    """The comma-separated rate points of ``--qps`` / ``--load`` / ``--paper-qps``, each
    validated as the scenario's rate is; none given twice."""
    flag = RATE_FLAGS[kind]
    try:
        vals = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag}={text!r} is invalid; give comma-separated numbers") from None
    for v in vals:
        try:
            validate_model(ScenarioOverrides, {kind: v}, names={kind: flag})
        except ConfigError as e:  # the whole list, and what every value must be
            raise ConfigError(f"{flag}={text!r} is invalid; "
                              f"{str(e).split('; ', 1)[1].replace('it must', 'every value must', 1)}") from None
    dup = sorted({v for v in vals if vals.count(v) > 1})
    if dup:
        raise ConfigError(f"{flag}={text!r} is invalid; {', '.join(f'{v:g}' for v in dup)} given twice "
                          "(each point is simulated once)")
    return vals


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
        out = epp_overrides(args.epp_config, out)
    return out


def add_force_arg(p) -> None:
    """``--force`` on parser ``p``: replace existing results (refused without it)."""
    p.add_argument("--force", action="store_true", help="replace an existing output file or directory's results")


def add_window_args(p) -> None:
    """``--duration`` and ``--horizon`` (a shorter run of the same scenario) on parser ``p``."""
    p.add_argument("--duration", dest="duration_s", type=float, metavar="SECONDS",
                   help="arrival window in seconds (synthetic scenarios; shortens runs)")
    p.add_argument("--horizon", dest="horizon_s", type=float, metavar="SECONDS", help="stop after this many simulated seconds")


def window_overrides(args) -> dict:
    """``--duration`` / ``--horizon`` as scenario overrides (``duration_s``, ``horizon_s``)."""
    return {k: getattr(args, k) for k in ("duration_s", "horizon_s") if getattr(args, k)}


def add_backend_args(p) -> None:
    """``--backend`` and ``--ray-address`` on argparse parser ``p`` (which has ``--workers``)."""
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where the simulations run: local processes (default) or Ray (the [ray] extra)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="with --backend ray: 'auto' joins the Ray cluster running here, ray://host:port a remote "
                        "one (default: start a local Ray instance with --workers CPUs)")


def add_study_output_args(p, command: str, cells: str) -> None:
    """The flags of a subcommand that runs many cells and writes a results directory
    (``compare``, ``tune``): ``--out``, ``--workers``, the backend, ``--no-plots``,
    ``--force``; ``cells`` says what the default worker count is bounded by."""
    p.add_argument("--out", help=f"output directory (default results/{command}-<timestamp>)")
    p.add_argument("--workers", type=int, help=f"processes (default: min(CPU count, {cells})); with --backend ray, "
                   "the local Ray instance's CPUs")
    add_backend_args(p)
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    add_force_arg(p)


def backend_from_args(args):
    """The backend ``--backend`` / ``--ray-address`` / ``--workers`` describe, checked before
    any simulation (a missing ``[ray]`` extra is a MissingExtraError). Close it after use."""
    address = check_name("--ray-address", args.ray_address, none_ok=True, what="a Ray address (or 'auto')")
    if address is not None and args.backend != "ray":
        raise ConfigError(f"--ray-address={address!r} applies only to --backend ray")
    if args.workers is not None:
        validate_model(FlagValues, {"workers": args.workers}, names={"workers": "--workers"})
    return make_backend(args.backend, workers=args.workers, address=address)
