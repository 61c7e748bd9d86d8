"""``llmsched-gym run | scenarios | policies``: one scenario or trace simulated with one
policy combination (a table per seed, ``--json``), the scenarios and the policies listed."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
from rich.table import Table

from ..capacity import describe as describe_capacity
from ..engine import EngineConfig
from ..errors import ConfigError, OutputError
from ..evaluation import metrics
from ..gateway.policy import list_policies, make_policy
from ..gateway.saturation import STALENESS_POLICIES
from ..scenarios import (
    POLICY_OVERRIDES,
    Scenario,
    ScenarioOverrides,
    TraceSource,
    list_scenarios,
    make_scenario,
)
from ..simulator import ClusterConfig, GatewayConfig
from ..validation import (
    atomic_write_text,
    check_output_file,
    fallback_dir,
    signature_params,
    split_range,
)
from ..workloads.trace_registry import TRACES, locate
from ..workloads.traces import TRACE_FORMATS
from ..workloads.workload import class_name
from . import tables
from .epp import add_to_epp_config_args, cmd_to_epp_config
from .flags import add_force_arg, check_flags, policy_overrides


# ====================================================================== run
def _add_scenario_args(p) -> None:
    """The workload source, cluster and gateway flags of ``run``; each flag's ``dest`` is the
    scenario keyword it sets (:data:`~llmsched_gym.scenarios.ScenarioOverrides`)."""
    src = p.add_argument_group("workload source (a scenario or a trace)")
    src.add_argument("--scenario", help="registered scenario name or a YAML file (see `llmsched-gym scenarios`)")
    src.add_argument("--trace", help="trace file to replay instead of a scenario, or a name from `llmsched-gym traces list`")
    src.add_argument("--trace-format", choices=list(TRACE_FORMATS),
                     help="trace file format (default: the named trace's, else mooncake)")
    src.add_argument("--time-scale", type=float, help="multiply trace inter-arrival times (>1 slows down)")
    src.add_argument("--limit", type=int, help="replay only the first N trace requests")
    src.add_argument("--critical-share", type=float, help="make this fraction of trace requests critical (seeded)")
    rate = src.add_mutually_exclusive_group()
    rate.add_argument("--qps", type=float, help="request rate, req/s")
    rate.add_argument("--load", type=float, help="fraction of the measured capacity")
    rate.add_argument("--paper-qps", type=float, help="a published QPS point (seed flow-control scenarios)")
    cl = p.add_argument_group("cluster (overrides the scenario's)")
    cl.add_argument("--instances", type=int)
    cl.add_argument("--hardware", help="H100, H200, A100, H20, L40S")
    cl.add_argument("--model", help="qwen3-14b, qwen3-30b-a3b, qwen2-7b, qwen2.5-7b, llama-3.1-8b, or a "
                    "HuggingFace config.json (path, folder, or a model id in the local HF cache)")
    cl.add_argument("--latency-model", help="linear, roofline, blis-trained-physics, vllm-calibrated, "
                    "blis-roofline, or a latency-model FILE written by `llmsched-gym calibrate`")
    cl.add_argument("--kv-blocks", help="KV blocks per instance, or 'unlimited'")
    cl.add_argument("--cpu-kv-gb", type=float, help="a CPU KV tier of this many GB per instance (0: none)")
    cl.add_argument("--cpu-link-gbps", type=float, help="host link GB/s the CPU tier loads over (default: the GPU's)")
    cl.add_argument("--cpu-kv-shared", action="store_true", default=None,
                    help="one CPU tier for the cluster (a Mooncake store) instead of one per instance")
    cl.add_argument("--prefill-instances", type=int,
                    help="P/D disaggregation: the first N instances are the prefill pool (0: all aggregated)")
    cl.add_argument("--kv-link", help="P/D KV transfer link: nvlink, rdma, infiniband, ethernet, tcp")
    cl.add_argument("--kv-link-gbps", type=float, help="P/D KV link bandwidth per GPU, GB/s (default: the preset's)")
    cl.add_argument("--kv-link-latency", dest="kv_link_latency_s", type=float, metavar="SECONDS",
                    help="P/D KV link seconds per transfer (default: the preset's)")
    cl.add_argument("--horizon", dest="horizon_s", type=float, metavar="SECONDS", help="stop after this many simulated seconds")
    gw = p.add_argument_group("gateway policies (see `llmsched-gym policies`)")
    gw.add_argument("--router", help="routing policy, e.g. lmetric or 'llm-d:prefix_weight=2'")
    gw.add_argument("--flow-control", help="usage-limit policy, or 'none' to dispatch on arrival")
    gw.add_argument("--admission", help="admission policy")
    gw.add_argument("--pd", help="P/D decision on a cluster with a prefill pool, e.g. 'pd-llmd:threshold=512'")
    gw.add_argument("--eviction", action="store_true", default=None,
                    help="llm-d's demand-driven in-flight eviction of sheddable requests (needs flow control)")
    gw.add_argument("--staleness-policy", choices=STALENESS_POLICIES,
                    help="the saturation detector's stalenessPolicy: a stale endpoint scores 1.0 (saturated, "
                         "llm-d's default) or leaves the average (ignore)")
    gw.add_argument("--faults", metavar="FILE", help="a YAML file of faults inside the cluster: crashes, "
                    "crash_rate, scrape_outages, stragglers (docs/scenarios.md, \"Faults\")")
    gw.add_argument("--epp-config", metavar="FILE", help="take every gateway policy from an llm-d EndpointPickerConfig (docs/epp.md)")


def _kv_blocks(value):
    """``--kv-blocks``'s text as a KV capacity: a count or ``unlimited``."""
    if value is None or value == "unlimited":
        return value
    try:
        v = int(value)
    except ValueError:
        v = 0
    if v < 1:
        raise ConfigError(f"--kv-blocks={value!r} is invalid; use an integer > 0 or 'unlimited'")
    return v


#: Flags that only apply to a --trace replay.
TRACE_ONLY_FLAGS = ("--trace-format", "--time-scale", "--limit", "--critical-share")


def check_scenario_flags(args) -> None:
    """The workload-source flags of ``run``: values, and only those that apply to the source."""
    check_flags(args)
    if args.scenario and args.trace:
        raise ConfigError("give either --scenario or --trace, not both")
    if not args.trace:
        for flag in TRACE_ONLY_FLAGS:
            v = getattr(args, flag.lstrip("-").replace("-", "_"), None)
            if v is not None:
                raise ConfigError(f"{flag}={v} does not apply to --scenario {args.scenario or 'codegen'}; "
                                  "it applies only to --trace replays")
    elif getattr(args, "limit", None) is not None and args.trace_format == "blis":
        raise ConfigError(f"--limit={args.limit} does not apply to --trace-format blis (BLIS files are replayed whole)")


def scenario_from_args(args) -> Scenario:
    """The Scenario an invocation describes (a registered/YAML scenario or a trace): every
    flag whose ``dest`` is a scenario keyword is one."""
    overrides = {k: getattr(args, k) for k in ScenarioOverrides.model_fields
                 if k not in POLICY_OVERRIDES and getattr(args, k, None) is not None}
    if "kv_blocks" in overrides:
        overrides["kv_blocks"] = _kv_blocks(overrides["kv_blocks"])
    check_scenario_flags(args)
    if args.trace:
        path, fmt = Path(args.trace), args.trace_format
        if not path.is_file():  # a trace by name (`llmsched-gym traces list`)
            found = locate(args.trace)
            if found is None:
                hint = f"; download it with `llmsched-gym traces download {args.trace}`" if args.trace in TRACES else ""
                raise ConfigError(f"--trace {path}: file not found{hint}")
            path, fmt = found, fmt or (TRACES[args.trace].format if args.trace in TRACES else None)
        base = Scenario(name=path.stem, description=f"replay of {path}",
                        cluster=ClusterConfig(instances=1, engine=EngineConfig()),
                        workload=TraceSource(str(path.resolve()), fmt or "mooncake", args.limit,
                                             args.critical_share),
                        gateway=GatewayConfig(router="round-robin"))
        sc = make_scenario(base, **overrides)
        if args.time_scale is not None and args.time_scale != 1.0:
            if sc.qps is not None or sc.load is not None:
                raise ConfigError("give either --time-scale or a rate (--qps/--load), not both")
            if not np.isfinite(sc.base_rate()):
                raise ConfigError(f"--time-scale={args.time_scale:g} does not apply to --trace {args.trace}: its "
                                  "requests all arrive at one time (a zero time span), there is no interval to scale")
            sc.qps = sc.base_rate() / args.time_scale
    else:
        sc = make_scenario(args.scenario or "codegen", **overrides)
    if args.kv_link is not None and not sc.cluster.prefill_instances:  # kv_link has a default: only the flag is a choice
        raise ConfigError(f"--kv-link={args.kv_link} does not apply: the cluster has no prefill pool "
                          "(P/D disaggregation needs --prefill-instances >= 1)")
    return sc


def _validate_policies(overrides: dict) -> None:
    """Each policy flag names a policy of its role."""
    for key, role in (("router", "routing"), ("admission", "admission"), ("flow_control", "usage-limit"), ("pd", "pd")):
        if overrides.get(key) is not None:
            make_policy(overrides[key], role)


def cmd_run(args) -> int:
    """``llmsched-gym run``."""
    check_flags(args)
    if args.json is not None:
        check_output_file("--json", args.json, force=args.force)  # before the run: a bad path must not cost the results
    sc = scenario_from_args(args)
    pol = policy_overrides(args)
    _validate_policies(pol)
    qps = sc.target_qps()
    qps = qps if np.isfinite(qps) else None  # a zero-span trace replayed at its own timestamps: no rate
    results = []
    for seed in range(args.seed, args.seed + args.seeds):
        sim = sc.simulator(seed, **pol)
        sc.check_horizon(sim.workload, None if np.isinf(sim.horizon) else sim.horizon)
        sim.run()
        s = metrics.summarize(sim)
        s.update({"scenario": sc.name, "seed": seed, "qps": qps, "rate": sc.rate_setting(),
                  "router": sim.router.name, "admission": sim.admission.name,
                  "flow_control": sim.flow.name if sim.flow else None})
        if sim.pd is not None:  # a cluster with a prefill pool, or pd-aggregated
            s["pd"] = sim.pd.name
        # what ran, parameters included (a spec given, an --epp-config's weights, the scenario's)
        s["policy_specs"] = {k: _spec(pol.get(k, getattr(sc.gateway, k)), s.get(k))
                             for k in ("router", "flow_control", "admission", "pd") if k in s}
        prof = sc.profile.scaled(qps / sc.base_rate()) if sc.profile is not None else None  # as run (--qps)
        wins, names = metrics.run_windows(sim, prof, args.window)  # an inference-perf run's stages, or --window
        if wins:
            s["windows"] = metrics.summarize_windows(sim, wins, names)
        results.append(s)
        print_summary(s)
    if args.json is not None:
        write_results(args.json, json.dumps(results, indent=2, default=float), "--json")
        print(f"wrote {args.json}")
    return 0


def _spec(given, name):
    """A policy as given (a spec string with its parameters), else its name."""
    return given if isinstance(given, str) else name


def write_results(path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` atomically; if that fails, save it in a fresh temporary
    directory and raise an OutputError naming both (a finished run is never lost)."""
    try:
        atomic_write_text(path, text)
    except OutputError as e:
        saved = atomic_write_text(fallback_dir() / Path(path).name, text)
        raise OutputError(f"{flag}: {e}; the results were saved to {saved} instead") from None


def _fmt(v, scale=1.0, digits=3):
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v * scale:.{digits}f}"


def print_summary(s: dict) -> None:
    """One run's summary as terminal tables (per class; per stage or window if any)."""
    rate = f"{s['qps']:.3g} req/s" if s["qps"] is not None else "its own timestamps"
    if s.get("rate") and not s["rate"].startswith("qps="):  # --paper-qps 16: say so, and what it means
        rate = f"{s['rate'].replace('_', '-')} ({rate})"
    specs = s.get("policy_specs") or {k: s.get(k) for k in ("router", "flow_control", "admission", "pd") if k in s}
    title = f"{s['scenario']} @ {rate}, seed {s['seed']}: " + ", ".join(
        f"{k.replace('_', '-')}={v}" for k, v in specs.items())
    t = Table(title=title)
    classes = s["classes"]
    evicting = any(c.get("evicted", 0) for c in classes.values())  # a column only where the gateway evicts
    timing_out = any(c.get("timed_out", 0) for c in classes.values())  # ... or clients time out
    faulty = any(c.get("crashed", 0) or c.get("retries", 0) for c in classes.values())  # ... or instances crash
    for col in ("class", "requests", "finished", "rejected", "expired", "dropped") + ("evicted",) * evicting + (
            "timed out",) * timing_out + ("crashed", "retries") * faulty + (
            "in flight", "TTFT mean", "TTFT p50", "TTFT p99", "TPOT mean", "TPOT p99", "E2E p99", "req/s", "tok/s"):
        t.add_column(col, justify="right")
    if len(classes) == 2 and "all" in classes:  # one class: its row is the "all" row
        classes = {k: v for k, v in classes.items() if k != "all"}
    for name, c in classes.items():
        t.add_row(name, str(c["requests"]), str(c["finished"]), str(c["rejected"]), str(c["expired"]),
                  str(c["dropped"]), *([str(c["evicted"])] if evicting else []),
                  *([str(c["timed_out"])] if timing_out else []),
                  *([str(c["crashed"]), str(c["retries"])] if faulty else []), str(c["in_flight"]),
                  _fmt(c["ttft_mean"]), _fmt(c["ttft_p50"]),
                  _fmt(c["ttft_p99"]), _fmt(c["tpot_mean"], 1e3, 1) + "ms", _fmt(c["tpot_p99"], 1e3, 1) + "ms",
                  _fmt(c["e2e_p99"]), _fmt(c["throughput_rps"], 1, 2), _fmt(c["output_tokens_per_s"], 1, 0))
    console = tables.console()
    tables.print_table(t, console)
    if s.get("windows"):
        w = Table(title="per stage" if next(iter(s["windows"])).startswith("stage") else "per window")
        for col in ("window", "arrivals s", "requests", "finished", "TTFT mean", "TTFT p90", "TTFT p99",
                    "E2E mean", "E2E p90", "E2E p99", "TPOT mean", "req/s"):
            w.add_column(col, justify="right")
        for name, c in s["windows"].items():
            w.add_row(name, f"{c['start_s']:.0f}-{c['end_s']:.0f}", str(c["requests"]), str(c["finished"]),
                      *(_fmt(c[k]) for k in ("ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99")),
                      _fmt(c["tpot_mean"], 1e3, 1) + "ms", _fmt(c["throughput_rps"], 1, 2))
        tables.print_table(w, console)
    console.print(f"times in seconds; prefix-hit token ratio {s['prefix_hit_token_ratio']:.3f}; "
                  f"preemptions {s['preemptions']}; simulated {s['sim_seconds']:.1f} s in {s['wall_seconds']:.2f} s wall")


# ====================================================================== listings
def cmd_scenarios(args) -> int:
    """``llmsched-gym scenarios [--describe NAME]``."""
    check_flags(args)
    if args.describe is not None:
        return _describe(make_scenario(args.describe), args.seed)
    for name in list_scenarios():
        print(f"{name:24s} {make_scenario(name).description}")
    return 0


def _describe(sc, seed: int) -> int:
    qps = sc.target_qps()
    w = sc.build_workload(seed)
    c = sc.cluster
    print(f"{sc.name}: {sc.description}")
    pools = " + ".join(f"{n} x {p.hardware}" + (f" TP{p.tp}" if p.tp > 1 else "") + f" ({p.total_blocks()} KV blocks)"
                       for n, p in c.pool_configs())
    print(f"  cluster: {pools} {c.model} ({c.latency_model}), KV blocks of {c.engine.block_size} tokens")
    print(f"  gateway defaults: router={sc.gateway.router} flow_control={sc.gateway.flow_control} "
          f"admission={sc.gateway.admission}")
    setting = {k: getattr(sc, k) for k in ("qps", "load", "paper_qps") if getattr(sc, k) is not None} or sc.default_rate
    print(f"  rate: {qps:.3f} req/s ({setting or 'workload base rate'}); published capacity: {sc.published_capacity_qps}")
    for line in describe_capacity(sc):  # the capacity `load` refers to, and how it was found
        print("  " + line)
    gaps = np.diff(w.arrival_s)
    print(f"  requests: {len(w)} over {w.duration_s:.1f} s, measured rate {w.mean_rate:.3f} req/s, "
          f"inter-arrival CV {gaps.std() / gaps.mean():.2f}" if len(gaps) else f"  requests: {len(w)}")
    for label, x in (("input", w.input_tokens), ("output", w.output_tokens)):
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        print(f"  {label} tokens: mean {x.mean():.0f}, p50 {p50:.0f}, p90 {p90:.0f}, p99 {p99:.0f}, max {x.max()}")
    shares = ", ".join(f"{class_name(int(p))} {np.mean(w.priority == p):.1%}" for p in sorted(set(w.priority.tolist()), reverse=True))
    print(f"  classes: {shares}")
    print(f"  prefix-hit ideal (unbounded shared cache): {w.ideal_prefix_hit_ratio():.3f}; "
          f"sessions {int((np.unique(w.session_id) >= 0).sum())}, prefix groups {int((np.unique(w.prefix_group) >= 0).sum())}")
    return 0


def _param_text(name: str, tp, default) -> str:
    """``lam=0.6 in [0, 1]``: a policy parameter's default and declared range."""
    value = f"{default:.4g}" if isinstance(default, float) else str(default)
    rng = split_range(tp)[1]
    return f"{name}={value}" + (f" {rng}" if rng else "")


def cmd_policies(args) -> int:
    """``llmsched-gym policies``: every registered policy by role, with its parameters; or
    ``--to-epp-config SPEC``."""
    if args.to_epp_config is not None:
        return cmd_to_epp_config(args)
    for role in ("routing", "usage-limit", "admission", "scaling", "pd", "gateway"):
        print(f"{role}:")
        for name, factory in list_policies(role).items():
            params = ", ".join(_param_text(k, tp, v) for k, tp, v in signature_params(factory)
                               if v is not inspect.Parameter.empty)
            print(f"  {name:26s} {getattr(factory, 'description', '')}" + (f"  [{params}]" if params else ""))
    return 0


def add_cli(subparsers) -> None:
    """Register ``llmsched-gym run``, ``scenarios`` and ``policies``."""
    p = subparsers.add_parser("run", help="simulate one scenario or trace with one policy combination")
    _add_scenario_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="run seeds seed..seed+N-1")
    p.add_argument("--json", help="write the summaries as a JSON list (one object per seed) to this path")
    add_force_arg(p)
    p.add_argument("--window", type=float, metavar="SECONDS",
                   help="also report metrics per window of this many seconds of arrivals (an inference-perf "
                        "scenario is reported per stage anyway)")
    p.set_defaults(func=cmd_run)

    p = subparsers.add_parser("scenarios", help="list scenarios, or --describe NAME")
    p.add_argument("--describe", metavar="NAME", help="print the statistics of one scenario's workload")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_scenarios)

    p = subparsers.add_parser("policies", help="list admission, flow-control and routing policies")
    add_to_epp_config_args(p)
    p.set_defaults(func=cmd_policies)
