"""Bad input is caught before any simulation starts (llmsched_gym/validation.py).

Table-driven over the catalogue of issue 12 and the classes it stands for: every CLI
row runs ``python -m llmsched_gym.cli`` in a subprocess (in an empty working directory)
and must exit with code 2, print exactly one line on stderr (naming the field and what
is allowed), no traceback, and write nothing; output-path rows must also fail within
seconds, before the (otherwise long) run. Python-API rows must raise a one-line
ConfigError (a ValueError). The last tests check that results are written atomically
and that an output path broken *during* a run loses nothing and leaves no partial file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HAS_RL = all(find_spec(m) is not None for m in ("torch", "stable_baselines3", "sb3_contrib"))
OK_TRACE = '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
GOOD_YAML = """\
name: tiny
cluster: {instances: 1}
workload:
  classes: [{name: c, priority: 0}]
  input: 100
  output: 10
  arrival: {process: poisson, rate: 2}
  num_requests: 10
"""

# The fixture files the rows refer to as {F}/name.
FIXTURES = {
    "ok.jsonl": OK_TRACE,
    "missing-field.jsonl": OK_TRACE + '{"timestamp": 1, "input_length": 10, "hash_ids": [1]}\n',
    "garbage.jsonl": "this is not json\n",
    "empty.jsonl": "",
    "negative.jsonl": OK_TRACE + '{"timestamp": 1, "input_length": -5, "output_length": 5, "hash_ids": []}\n',
    "a-file": "not a directory\n",
    "instances-two.yaml": GOOD_YAML.replace("instances: 1", "instances: two"),
    "instances-float.yaml": GOOD_YAML.replace("instances: 1", "instances: 2.5"),
    "count-float.yaml": GOOD_YAML.replace("num_requests: 10", "num_requests: 10.5"),
    "engine-float.yaml": GOOD_YAML.replace("instances: 1}", "instances: 1, engine: {max_num_seqs: 2.5}}"),
    "unknown-field.yaml": GOOD_YAML.replace("cluster:", "clustr:"),
    "not-yaml.yaml": "name: [unclosed\n",
    "a-list.yaml": "- 1\n- 2\n",
    "bad-router.yaml": GOOD_YAML + "gateway: {router: nosuch}\n",
    "bad-kv.yaml": GOOD_YAML.replace("instances: 1}", "instances: 1, kv_blocks: lots}"),
    "neg-qps.yaml": GOOD_YAML + "qps: -1\n",
    "bad-horizon.yaml": GOOD_YAML + "horizon_s: abc\n",
    "bad-gpu.yaml": GOOD_YAML.replace("instances: 1}", "instances: 1, gpu_memory_utilization: 1.5}"),
    "bad-rate.yaml": GOOD_YAML + "default_rate: {load: x}\n",
    "inf-ttl.yaml": GOOD_YAML + "gateway: {ttl_s: .inf}\n",
    "missing-trace.yaml": "name: t\ncluster: {instances: 1}\nworkload: {trace: {path: /nonexistent/t.jsonl, format: mooncake}}\n",
    # issue 29
    "zero-span.jsonl": OK_TRACE * 3,
    "misspelt.jsonl": OK_TRACE + OK_TRACE.replace('"hash_ids"', '"hash_id"'),
    "instances-huge.yaml": GOOD_YAML.replace("instances: 1", "instances: 100000"),
    "rate-huge.yaml": GOOD_YAML.replace("rate: 2", "rate: 1.0e+9"),
    "input-huge.yaml": GOOD_YAML.replace("input: 100", "input: 1.0e+12"),
    "existing.json": "[]\n",
    "results-dir/results.csv": "an earlier run\n",
    # issue 31
    "faults-instance.yaml": "faults:\n  crashes: [{instance: 9, at_s: 1.0}]\n",
    "faults-unknown.yaml": "crashs: [{instance: 0, at_s: 1.0}]\n",
    "faults-factor.yaml": "stragglers: [{instance: 0, at_s: 1.0, duration_s: 1.0, factor: -2}]\n",
}
FIXTURE_DIRS = ("a-dir",)

RUN = ["run", "--scenario", "codegen", "--qps", "2", "--horizon", "2"]
TRACE = ["run", "--trace", "{F}/ok.jsonl", "--instances", "1", "--horizon", "2"]
CMP = ["compare", "--scenario", "chatbot", "--qps", "2", "--duration", "2", "--seeds", "1", "--no-plots",
       "--policies", "jsq;lmetric", "--workers", "1"]
LONG_RUN = ["run", "--scenario", "codegen", "--qps", "16"]  # a full codegen run: many seconds
LONG_CMP = ["compare", "--scenario", "codegen", "--qps", "4,10,16", "--seeds", "5", "--no-plots"]
AGENT = "agent:" + str(ROOT / "agents" / "pretrained" / "routing-chatbot")


def row(id, args, *expect, rl=False, no_torch=False, fast=False, needs=()):
    """One catalogue row: CLI arguments and substrings the one stderr line must contain.

    ``rl``: needs the [rl] extra installed (skipped otherwise); ``no_torch``: run with
    torch hidden (as without the extra); ``fast``: an output-path row, must fail in seconds;
    ``needs``: modules of another extra (optuna, ray) the row needs (skipped without them).
    """
    rl = rl or not all(find_spec(m) is not None for m in needs)  # skipped alike when missing
    return pytest.param(args, expect, rl, no_torch, fast, id=id)


CLI_ROWS = [
    # ---- numbers: type, range, finiteness (run)
    row("run-seed-negative", RUN + ["--seed", "-1"], "--seed=-1", "integer in [0, 2147483647]"),
    row("run-seeds-zero", RUN + ["--seeds", "0"], "--seeds=0", "in [1, 1000]"),
    row("run-horizon-negative", RUN[:-2] + ["--horizon", "-1"], "--horizon=-1", "in (0, 2592000]"),
    row("run-horizon-zero", RUN[:-2] + ["--horizon", "0"], "--horizon=0", "in (0, 2592000]"),
    row("run-horizon-nan", RUN[:-2] + ["--horizon", "nan"], "--horizon=nan", "finite"),
    row("run-horizon-inf", RUN[:-2] + ["--horizon", "inf"], "--horizon=inf", "finite"),
    row("run-qps-inf", ["run", "--scenario", "codegen", "--qps", "inf"], "--qps=inf", "finite"),
    row("run-qps-nan", ["run", "--scenario", "codegen", "--qps", "nan"], "--qps=nan", "finite"),
    row("run-qps-negative", ["run", "--scenario", "codegen", "--qps", "-3"], "--qps=-3", "in (0, 100000]"),
    row("run-paper-qps-zero", ["run", "--scenario", "codegen", "--paper-qps", "0"], "--paper-qps=0", "in (0, 100000]"),
    row("run-load-negative", ["run", "--scenario", "chatbot", "--load", "-0.5"], "--load=-0.5", "in (0, 10]"),
    row("run-instances-zero", RUN + ["--instances", "0"], "--instances=0", "in [1, 1024]"),
    row("run-kv-blocks-zero", RUN + ["--kv-blocks", "0"], "--kv-blocks='0'", "unlimited"),
    row("run-kv-blocks-word", RUN + ["--kv-blocks", "lots"], "--kv-blocks='lots'", "unlimited"),
    row("run-seed-not-int", RUN + ["--seed", "abc"], "--seed", "invalid int value"),
    row("run-qps-not-number", ["run", "--qps", "fast"], "--qps", "invalid float value"),
    row("run-trace-format-choice", TRACE + ["--trace-format", "xyz"], "--trace-format", "invalid choice"),
    row("run-unknown-flag", RUN + ["--nosuchflag"], "unrecognized arguments", "--nosuchflag"),
    row("no-subcommand", [], "required", "command"),
    # ---- names against their lists
    row("run-scenario-unknown", ["run", "--scenario", "nosuch"], "unknown scenario 'nosuch'", "codegen"),
    row("run-scenario-empty", ["run", "--scenario", ""], "--scenario=''", "empty"),
    row("run-router-empty", RUN + ["--router", ""], "--router=''", "policy"),
    row("run-flow-control-empty", RUN + ["--flow-control", ""], "--flow-control=''", "policy"),
    row("run-admission-empty", RUN + ["--admission", ""], "--admission=''", "policy"),
    row("run-router-unknown", RUN + ["--router", "nosuch"], "unknown policy 'nosuch'", "lmetric"),
    row("run-router-wrong-role", RUN + ["--router", "soft-reflective-ceiling"], "'usage-limit' policy", "routing"),
    row("run-hardware-unknown", RUN + ["--hardware", "B200"], "'B200'", "H100"),
    row("run-model-unknown", RUN + ["--model", "gpt-9"], "'gpt-9'", "Qwen3-14B"),
    row("run-latency-model-unknown", RUN + ["--latency-model", "magic"], "'magic'", "roofline"),
    # ---- policy specs NAME:key=value, against the constructor's signature
    row("policy-param-type", RUN + ["--router", "llm-d:prefix_weight=abc"], "prefix_weight='abc'",
        "finite number", "llm-d takes", "queue_weight: float"),
    row("policy-param-unknown", RUN + ["--router", "llm-d:nosuch=1"], "unknown parameter 'nosuch'",
        "llm-d takes", "prefix_weight: float in [0, 1000000] = 3.0"),
    row("policy-takes-none", RUN + ["--router", "jsq:x=1"], "unknown parameter 'x'", "jsq takes no parameters"),
    row("policy-param-bool", RUN + ["--router", "lmetric:detector=1"], "detector=1", "true or false"),
    row("policy-param-int", RUN + ["--router", "llm-d:block_tokens=2.5"], "block_tokens=2.5", "an integer"),
    row("policy-param-range", RUN + ["--flow-control", "static-usage-limit:threshold=-1"],
        "static-usage-limit", "threshold=-1"),
    row("policy-param-nonfinite", RUN + ["--flow-control", "static-usage-limit:threshold=inf"],
        "threshold=", "finite"),
    row("policy-param-no-equals", RUN + ["--router", "llm-d:prefix_weight"], "key=value"),
    row("policy-param-soft-reflective", RUN + ["--flow-control", "soft-reflective-ceiling:period_scale=-2"],
        "policy 'soft-reflective-ceiling'", "period_scale=-2", "in [0, 1000000]"),
    row("cpu-tier-negative", RUN + ["--cpu-kv-gb", "-1"], "--cpu-kv-gb=-1", "in [0, 100000]"),
    row("policy-param-range-in-01", RUN + ["--router", "bailian:lam=2"], "policy 'bailian'", "lam=2", "[0, 1]"),
    row("compare-scaler-unknown", ["compare", "--scenario", "diurnal-codegen", "--scaler", "nosuch"],
        "unknown policy 'nosuch'", "hpa-kv"),
    row("compare-scaler-range", ["compare", "--scenario", "diurnal-codegen", "--scaler", "hpa-kv:target=-1"],
        "policy 'hpa-kv'", "target=-1"),
    row("compare-scaler-wrong-role", ["compare", "--scenario", "diurnal-codegen", "--scaler", "jsq"],
        "'routing' policy", "scaling"),
    # ---- flags that do not apply to the chosen source
    row("scenario-critical-share", RUN + ["--critical-share", "0.3"], "--critical-share=0.3", "only to --trace"),
    row("scenario-time-scale", RUN + ["--time-scale", "2"], "--time-scale=2", "only to --trace"),
    row("scenario-limit", RUN + ["--limit", "5"], "--limit=5", "only to --trace"),
    row("scenario-trace-format", RUN + ["--trace-format", "azure"], "--trace-format=azure", "only to --trace"),
    row("scenario-and-trace", RUN + ["--trace", "{F}/ok.jsonl"], "either --scenario or --trace"),
    row("trace-critical-share-range", TRACE + ["--critical-share", "1.5"], "--critical-share=1.5", "[0, 1]"),
    row("trace-time-scale-zero", TRACE + ["--time-scale", "0"], "--time-scale=0", "in (0, 1000000]"),
    row("trace-time-scale-and-rate", TRACE + ["--time-scale", "2", "--qps", "3"], "--time-scale", "not both"),
    row("trace-limit-blis", TRACE + ["--trace-format", "blis", "--limit", "3"], "--limit=3", "blis"),
    row("trace-limit-zero", TRACE + ["--limit", "0"], "--limit=0", "in [1, 10000000]"),
    row("trace-paper-qps", TRACE + ["--paper-qps", "3"], "published capacity", "qps or load"),
    # ---- trace files
    row("trace-missing", ["run", "--trace", "{F}/nope.jsonl"], "nope.jsonl", "not found"),
    row("trace-is-directory", ["run", "--trace", "{F}/a-dir"], "a-dir", "not found"),
    row("trace-missing-field", ["run", "--trace", "{F}/missing-field.jsonl"], "line 2", "output_length"),
    row("trace-garbage", ["run", "--trace", "{F}/garbage.jsonl"], "line 1", "JSON"),
    row("trace-empty", ["run", "--trace", "{F}/empty.jsonl"], "empty.jsonl", "no requests"),
    row("trace-negative-length", ["run", "--trace", "{F}/negative.jsonl"], "line 2", "input_length"),
    row("trace-wrong-format", ["run", "--trace", "{F}/ok.jsonl", "--trace-format", "azure"], "line 1", "header"),
    row("yaml-trace-missing", ["run", "--scenario", "{F}/missing-trace.yaml"], "t.jsonl", "not found"),
    # ---- scenario YAML: every field typed, ranged, named
    row("yaml-instances-word", ["run", "--scenario", "{F}/instances-two.yaml"], "cluster.instances='two'",
        "integer in [1, 1024]"),
    row("yaml-instances-float", ["run", "--scenario", "{F}/instances-float.yaml"], "cluster.instances=2.5",
        "integer"),
    row("yaml-count-float", ["run", "--scenario", "{F}/count-float.yaml"], "workload.num_requests=10.5", "integer"),
    row("yaml-engine-float", ["run", "--scenario", "{F}/engine-float.yaml"], "engine.max_num_seqs=2.5", "integer"),
    row("yaml-unknown-field", ["run", "--scenario", "{F}/unknown-field.yaml"], "clustr", "allowed"),
    row("yaml-not-yaml", ["run", "--scenario", "{F}/not-yaml.yaml"], "not valid YAML"),
    row("yaml-a-list", ["run", "--scenario", "{F}/a-list.yaml"], "must be a mapping"),
    row("yaml-missing-file", ["run", "--scenario", "{F}/nope.yaml"], "nope.yaml", "not found"),
    row("yaml-router-unknown", ["run", "--scenario", "{F}/bad-router.yaml"], "gateway.router", "'nosuch'"),
    row("yaml-kv-blocks-word", ["run", "--scenario", "{F}/bad-kv.yaml"], "cluster.kv_blocks='lots'", "unlimited"),
    row("yaml-qps-negative", ["run", "--scenario", "{F}/neg-qps.yaml"], "qps=-1", "in (0, 100000]"),
    row("yaml-horizon-word", ["run", "--scenario", "{F}/bad-horizon.yaml"], "horizon_s='abc'", "number"),
    row("yaml-gpu-util-range", ["run", "--scenario", "{F}/bad-gpu.yaml"], "gpu_memory_utilization=1.5", "(0, 1]"),
    row("yaml-default-rate-word", ["run", "--scenario", "{F}/bad-rate.yaml"], "default_rate.load='x'", "number"),
    row("yaml-ttl-inf", ["run", "--scenario", "{F}/inf-ttl.yaml"], "gateway.ttl_s=inf", "finite"),
    # ---- output paths: checked before the run, so they fail within seconds
    row("run-json-empty", LONG_RUN + ["--json", ""], "--json=''", "file path", fast=True),
    row("run-json-directory", LONG_RUN + ["--json", "{F}/a-dir"], "a-dir", "is a directory", fast=True),
    row("run-json-under-a-file", LONG_RUN + ["--json", "{F}/a-file/r.json"], "a-file", "not a directory", fast=True),
    row("run-json-not-creatable", LONG_RUN + ["--json", "/proc/nope/r.json"], "/proc/nope/r.json", "cannot write",
        fast=True),
    row("compare-out-a-file", LONG_CMP + ["--out", "{F}/a-file"], "--out=", "not a directory", fast=True),
    row("compare-out-not-creatable", LONG_CMP + ["--out", "/proc/nope"], "/proc/nope", "cannot write", fast=True),
    row("compare-out-empty", LONG_CMP + ["--out", ""], "--out=''", "directory", fast=True),
    row("train-out-not-creatable", ["train", "--out", "/proc/nope"], "/proc/nope", "cannot write", rl=True, fast=True),
    # ---- faults (issue 31)
    row("run-faults-missing", RUN + ["--faults", "{F}/nosuch.yaml"], "--faults=", "YAML file of faults"),
    row("run-faults-instance", RUN + ["--faults", "{F}/faults-instance.yaml"], "faults.crashes[0].instance=9",
        "the cluster has 2 instances"),
    row("run-faults-factor", RUN + ["--faults", "{F}/faults-factor.yaml"], "faults.stragglers[0].factor=-2",
        "(0, 1000]"),
    row("run-staleness-policy", RUN + ["--staleness-policy", "never"], "--staleness-policy", "ignore"),
    row("compare-faults-unknown-key", CMP + ["--faults", "{F}/faults-unknown.yaml"], "'crashs'", "scrape_outages"),
    # ---- compare
    row("compare-class-unknown", CMP + ["--class", "foo"], "--class='foo'", "critical, all"),
    row("compare-class-without-scenario", ["compare", "--class", "critical"], "--class needs --scenario"),
    row("compare-policies-empty", CMP[:-4] + ["--policies", ""], "--policies=''", "empty"),
    row("compare-policy-unknown", CMP[:-4] + ["--policies", "jsq;nosuch"], "unknown policy 'nosuch'", "lmetric"),
    row("compare-policy-param", CMP[:-4] + ["--policies", "jsq;llm-d:nosuch=2"], "unknown parameter 'nosuch'",
        "llm-d takes"),
    row("compare-policies-duplicate", CMP[:-4] + ["--policies", "jsq;jsq"], "unique", "label="),
    row("compare-qps-inf", ["compare", "--scenario", "codegen", "--qps", "4,inf"], "--qps='4,inf'", "finite"),
    row("compare-qps-word", ["compare", "--scenario", "codegen", "--qps", "abc"], "--qps='abc'", "numbers"),
    row("compare-seeds-zero", CMP + ["--seeds", "0"], "--seeds=0", "in [1, 1000]"),
    row("compare-seed-negative", CMP + ["--seed", "-1"], "--seed=-1", "in [0, 2147483647]"),
    row("compare-workers-zero", CMP + ["--workers", "0"], "--workers=0", "in [1, 1024]"),
    row("compare-duration-nan", CMP + ["--duration", "nan"], "--duration=nan", "finite"),
    row("compare-horizon-negative", CMP + ["--horizon", "-1"], "--horizon=-1", "in (0, 2592000]"),
    row("compare-baseline-unknown", CMP + ["--baseline", "nosuch"], "baseline 'nosuch'", "jsq"),
    row("compare-baseline-without-scenario", ["compare", "--baseline", "jsq"], "--baseline needs"),
    row("compare-router-empty", CMP + ["--router", ""], "--router=''", "policy"),
    row("compare-duration-on-trace", ["compare", "--scenario", "mooncake-conversation", "--qps", "1", "--duration",
                                      "10", "--policies", "jsq", "--seeds", "1", "--no-plots"],
        "duration_s=10", "replays a trace"),
    # ---- optional extras named in the error
    row("compare-agent-without-rl", CMP[:-4] + ["--policies", "jsq;" + AGENT], "[rl] extra", 'pip install -e ".[rl]"',
        "download.pytorch.org/whl/cpu", no_torch=True),
    row("train-without-rl", ["train", "--timesteps", "10"], "train needs the [rl] extra", 'pip install -e ".[rl]"',
        no_torch=True),
    row("compare-agent-missing-model", CMP[:-4] + ["--policies", "jsq;agent:{F}/a-dir"], "no model file", rl=True),
    # ---- train
    row("train-set-unknown", ["train", "--set", "nosuchkey=1", "--timesteps", "10"], "nosuchkey",
        "not a maskable-ppo hyperparameter", "learning_rate", rl=True),
    row("train-set-type", ["train", "--set", "n_steps=abc", "--timesteps", "10"], "n_steps", "integer", rl=True),
    row("train-set-no-equals", ["train", "--set", "novalue", "--timesteps", "10"], "KEY=VALUE", rl=True),
    row("train-timesteps-zero", ["train", "--timesteps", "0"], "--timesteps=0", "in [1, 10000000000]", rl=True),
    row("train-rates-backwards", ["train", "--load", "0.9:0.1", "--timesteps", "10"], "0.9:0.1", "LO:HI", rl=True),
    row("train-algo-env-mismatch", ["train", "--env", "llmsched/FlowControl-v0", "--algo", "maskable-ppo"],
        "maskable-ppo", "discrete", rl=True),
    # ---- llm-d EndpointPickerConfig and named traces (docs/epp.md, `llmsched-gym traces`)
    row("run-epp-config-missing", RUN + ["--epp-config", "{F}/nope.yaml"], "nope.yaml", "not found"),
    row("run-epp-config-not-epp", RUN + ["--epp-config", "{F}/instances-two.yaml"], "unknown field", "allowed"),
    row("policies-to-epp-unknown", ["policies", "--to-epp-config", "nosuch"], "unknown policy 'nosuch'"),
    row("policies-to-epp-out-not-creatable", ["policies", "--to-epp-config", "llm-d", "--out", "/proc/nope/e.yaml"],
        "--out=", "cannot write", fast=True),
    row("policies-to-epp-out-directory", ["policies", "--to-epp-config", "llm-d", "--out", "{F}/a-dir"],
        "a-dir", "is a directory", fast=True),
    row("traces-download-unknown", ["traces", "download", "nosuch"], "'nosuch'", "known"),
    row("run-trace-unknown-name", ["run", "--trace", "nosuch-trace"], "nosuch-trace", "not found"),
    # ---- issue 29, by class. Upper bounds: every size, rate, count and horizon, before
    # anything is allocated (1e9 req/s asked numpy for 1.57 TiB)
    row("run-qps-huge", ["run", "--scenario", "codegen", "--qps", "1e9"], "--qps=1000000000.0", "(0, 100000]",
        "beyond"),
    row("run-load-huge", ["run", "--scenario", "codegen", "--load", "1e6"], "--load=1000000.0", "(0, 10]"),
    row("run-instances-huge", RUN + ["--instances", "100000"], "--instances=100000", "[1, 1024]"),
    row("run-seeds-huge", RUN + ["--seeds", "100000"], "--seeds=100000", "[1, 1000]"),
    row("run-kv-blocks-huge", RUN + ["--kv-blocks", str(2**40)], f"kv_blocks={2**40}", str(2**32)),
    row("run-cpu-kv-gb-huge", RUN + ["--cpu-kv-gb", "1e12"], "--cpu-kv-gb=", "[0, 100000]"),
    row("compare-requests-huge", ["compare", "--scenario", "codegen", "--qps", "50000", "--duration", "1000000",
                                  "--policies", "jsq", "--no-plots"], "qps=50000", "5e+10 requests", "10,000,000"),
    row("run-requests-over-window", ["run", "--scenario", "codegen", "--qps", "90000"], "qps=90000",
        "requests", "10,000,000"),
    row("compare-load-huge", ["compare", "--scenario", "chatbot", "--load", "0.5,1e6"], "--load='0.5,1e6'", "(0, 10]"),
    row("yaml-instances-huge", ["run", "--scenario", "{F}/instances-huge.yaml"], "cluster.instances=100000",
        "[1, 1024]"),
    row("yaml-rate-huge", ["run", "--scenario", "{F}/rate-huge.yaml"], "workload.arrival.rate=1000000000.0",
        "<= 100000"),
    row("yaml-input-huge", ["run", "--scenario", "{F}/input-huge.yaml"], "workload.input", "16777216"),
    row("policy-param-declared-range", RUN + ["--router", "aibrix:imbalance=-8"], "policy 'aibrix'", "imbalance=-8",
        "integer in [0, 10000000]"),
    row("policy-param-fraction", RUN + ["--router", "sglang-cache-aware:match_threshold=3"], "match_threshold=3",
        "[0, 1]"),
    row("tune-trials-huge", ["tune", "--scenario", "chatbot", "--space", "bailian:lam=0..1", "--trials", "1000000"],
        "--trials=1000000", "[1, 10000]", needs=("optuna",)),
    row("train-hyperparameter-range", ["train", "--set", "learning_rate=-1", "--timesteps", "10"],
        "learning_rate=-1", "[0, 1]", rl=True),
    # ---- flags and keys that do not apply to the cluster or source
    row("cpu-shared-without-tier", RUN + ["--cpu-kv-shared"], "cpu_kv_shared=True", "CPU KV tier", "--cpu-kv-gb"),
    row("cpu-link-without-tier", RUN + ["--cpu-link-gbps", "5"], "cpu_link_gbps=5.0", "CPU KV tier"),
    row("kv-link-without-pool", RUN + ["--kv-link", "rdma"], "--kv-link=rdma", "prefill pool"),
    row("kv-link-gbps-without-pool", RUN + ["--kv-link-gbps", "5"], "kv_link_gbps=5.0", "prefill pool"),
    row("trace-row-misspelt-field", ["run", "--trace", "{F}/misspelt.jsonl"], "line 2", "'hash_id'",
        "unknown field", "hash_ids"),
    # ---- degenerate but valid inputs: the real cause, not a symptom
    row("trace-zero-span-rate", ["run", "--trace", "{F}/zero-span.jsonl", "--qps", "3"], "qps=3", "zero time span"),
    row("trace-one-row-time-scale", ["run", "--trace", "{F}/ok.jsonl", "--time-scale", "2"], "--time-scale=2",
        "zero time span"),
    row("run-no-request-in-window", ["run", "--scenario", "codegen", "--qps", "1e-6"], "qps=1e-06",
        "no request arrives"),
    row("run-no-request-in-horizon", RUN[:-2] + ["--horizon", "0.01"], "horizon_s=0.01", "no request arrives before"),
    row("compare-no-request-in-horizon", CMP + ["--horizon", "0.001"], "horizon_s=0.001", "no request arrives before"),
    row("compare-no-request-in-window", CMP[:3] + ["--qps", "1e-5"] + CMP[5:], "qps=1e-05", "no request arrives"),
    row("run-kv-smaller-than-requests", RUN + ["--kv-blocks", "2"], "kv_blocks=2", "smaller than any request",
        "dropped"),
    # ---- results never replaced silently
    row("run-json-exists", RUN + ["--json", "{F}/existing.json"], "existing.json", "exists", "--force", fast=True),
    row("compare-out-holds-results", CMP + ["--out", "{F}/results-dir"], "results-dir", "results.csv", "--force",
        fast=True),
    row("policies-out-exists", ["policies", "--to-epp-config", "llm-d", "--out", "{F}/existing.json"], "existing.json",
        "--force", fast=True),
    row("tune-out-holds-results", ["tune", "--scenario", "chatbot", "--space", "bailian:lam=0..1", "--out",
                                   "{F}/results-dir"], "results-dir", "--force", fast=True, needs=("optuna",)),
    row("train-out-holds-results", ["train", "--timesteps", "10", "--out", "{F}/results-dir"], "results-dir", "--force",
        fast=True, rl=True),
    # ---- lenient parsing, now strict
    row("compare-label-empty", CMP[:-4] + ["--policies", "jsq+label=;lmetric"], "label=''", "give a name"),
    row("compare-load-duplicate", ["compare", "--scenario", "chatbot", "--load", "0.5,0.5"], "--load='0.5,0.5'",
        "0.5 given twice"),
    row("compare-policies-only-separators", CMP[:-4] + ["--policies", ";"], "--policies=';'", "names no policy"),
    row("compare-policies-empty-entry", CMP[:-4] + ["--policies", "jsq;;lmetric"], "--policies=", "empty entry"),
    row("policy-param-duplicate", RUN + ["--router", "llm-d:prefix_weight=2,prefix_weight=3"], "'prefix_weight'",
        "given twice"),
    row("tune-int-on-float", ["tune", "--scenario", "chatbot", "--space", "bailian:lam=0..1:int"], "bailian.lam",
        "':int' applies only to int parameters", needs=("optuna",)),
    # ---- optional components and the system: the same one-line path
    row("ray-address-malformed", CMP + ["--backend", "ray", "--ray-address", "http://x"], "ray_address='http://x'",
        "ray://HOST:PORT", needs=("ray",)),
    row("ray-address-unreachable", CMP + ["--backend", "ray", "--ray-address", "127.0.0.1:1"], "127.0.0.1:1",
        "nothing accepts connections", needs=("ray",)),
    row("run-json-path-too-long", RUN + ["--json", "/tmp/" + "a" * 300 + "/r.json"], "--json=", "too long",
        fast=True),
    row("run-trace-path-too-long", ["run", "--trace", "/tmp/" + "a" * 300 + "/t.jsonl"], "too long"),
    row("run-router-overlong", RUN + ["--router", "x" * 100_000], "unknown policy", "characters]..."),
    row("run-router-flow-control-model", RUN + ["--router", "agent:" + str(ROOT / "agents" / "pretrained" / "fc-codegen")],
        "expected 'routing'", "takes the flow_control role", rl=True),
    # ---- scenarios
    row("scenarios-describe-unknown", ["scenarios", "--describe", "nosuch"], "unknown scenario 'nosuch'"),
    row("scenarios-seed-negative", ["scenarios", "--describe", "codegen", "--seed", "-1"], "--seed=-1"),
]


def _listing(d: Path) -> set:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def _contents(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() if p.is_file() else None for p in d.rglob("*")}


# Runs CLI cases, each in its own forked process (the package imported once, before the
# forks, so a case costs its own work, not the interpreter's start): the child changes to
# the case's directory, sends stdout/stderr to files and exits as `sys.exit(main(argv))`
# would (an uncaught exception prints its traceback and exits 1).
_DRIVER = r"""
import json, os, sys, time, traceback
cases = json.load(open(sys.argv[1]))
for m in sys.argv[3:]:
    __import__(m)
from llmsched_gym.cli import build_parser, main
build_parser()  # imports every subcommand's module
results, running, todo = {}, {}, list(cases)
while todo or running:
    if todo and len(running) < 3:
        c = todo.pop(0)
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.chdir(c["cwd"])
            for fd, name in ((1, c["log"] + ".out"), (2, c["log"] + ".err")):
                os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            try:
                code = main(c["args"])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
        running[pid] = (c, time.perf_counter())
        continue
    pid, status = os.wait()
    c, t0 = running.pop(pid)
    results[c["id"]] = {"rc": os.waitstatus_to_exitcode(status), "wall": time.perf_counter() - t0}
json.dump(results, open(sys.argv[2], "w"))
"""


def _env(base: Path, no_torch: bool = False) -> dict:
    env = dict(os.environ)
    path = ([str(base / "no-torch")] if no_torch else []) + [str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(LLMSCHED_CACHE_DIR=str(base / "cache"), MPLCONFIGDIR=str(base / "mpl"), TMPDIR=str(base / "tmp"),
               TORCHINDUCTOR_CACHE_DIR=str(base / "torch"), COLUMNS="200")  # torch's own cache: not ours
    return env


def _run_cli(args, cwd: Path, base: Path, no_torch: bool = False):
    """``python -m llmsched_gym.cli ARGS`` in ``cwd``: (CompletedProcess, wall seconds)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "llmsched_gym.cli", *args], cwd=cwd, env=_env(base, no_torch),
                       capture_output=True, text=True, timeout=120)
    return r, time.perf_counter() - t0


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """Run every CLI row once, in forked subprocesses of three drivers (plain, with the
    [rl] modules pre-imported, with torch hidden); results by row id."""
    base = tmp_path_factory.mktemp("bad-input")
    fx = base / "fixtures"
    fx.mkdir()
    for name, text in FIXTURES.items():
        (fx / name).parent.mkdir(exist_ok=True)
        (fx / name).write_text(text)
    for name in FIXTURE_DIRS:
        (fx / name).mkdir()
    fake = base / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    for d in ("tmp", "logs"):
        (base / d).mkdir()
    before = _contents(fx)
    groups: dict[str, list] = {"plain": [], "rl": [], "no_torch": []}
    results: dict = {}
    for p in CLI_ROWS:
        args, expect, rl, no_torch, fast = p.values
        if rl and not HAS_RL:
            results[p.id] = None
            continue
        cwd = base / "cases" / p.id
        cwd.mkdir(parents=True)
        groups["no_torch" if no_torch else "rl" if rl else "plain"].append(
            {"id": p.id, "args": [a.replace("{F}", str(fx)) for a in args], "cwd": str(cwd),
             "log": str(base / "logs" / p.id)})
    procs = []
    for name, cases in groups.items():
        if not cases:
            continue
        (base / f"{name}.json").write_text(json.dumps(cases))
        pre = ["torch", "stable_baselines3", "sb3_contrib", "agents.train"] if name == "rl" else []
        procs.append(subprocess.Popen([sys.executable, "-c", _DRIVER, str(base / f"{name}.json"),
                                       str(base / f"{name}.out.json"), *pre], cwd=base / "tmp",
                                      env=_env(base, name == "no_torch")))
    for proc in procs:
        assert proc.wait(timeout=300) == 0
    for name, cases in groups.items():
        if cases:
            got = json.loads((base / f"{name}.out.json").read_text())
            for c in cases:
                log = Path(c["log"])
                results[c["id"]] = (subprocess.CompletedProcess(c["args"], got[c["id"]]["rc"],
                                                                log.with_suffix(".out").read_text(),
                                                                log.with_suffix(".err").read_text()),
                                    got[c["id"]]["wall"], _listing(Path(c["cwd"])))
    results["__fixtures_unchanged__"] = _contents(fx) == before  # an existing result is not replaced
    results["__base__"] = base
    return results


@pytest.mark.parametrize("args, expect, rl, no_torch, fast", CLI_ROWS)
def test_cli_bad_input(catalogue, request, args, expect, rl, no_torch, fast):
    got = catalogue[request.node.callspec.id]
    if got is None:
        pytest.skip("needs the [rl] extra")
    r, wall, written = got
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("llmsched-gym"), lines[0]
    for s in expect:
        assert s in lines[0], (s, lines[0])
    assert max(map(len, lines[0].split())) <= 400, "an overlong value is echoed whole"
    assert written == set(), f"wrote {written}"
    assert wall < 20, f"took {wall:.1f} s before its error"
    if fast:
        assert wall < 15, f"took {wall:.1f} s: the output path must be checked before the run"


@pytest.mark.parametrize("row_id", ["run-seed-negative", "policy-param-type", "run-json-not-creatable",
                                    "compare-agent-without-rl"])
def test_entry_point_matches_catalogue(catalogue, row_id, tmp_path):
    """The same rows through ``python -m llmsched_gym.cli`` (a fresh interpreter each)."""
    args, expect, rl, no_torch, fast = next(p.values for p in CLI_ROWS if p.id == row_id)
    r, wall = _run_cli(args, tmp_path, catalogue["__base__"], no_torch)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr == catalogue[row_id][0].stderr
    assert list(tmp_path.iterdir()) == []


def test_catalogue_wrote_nothing(catalogue):
    assert catalogue["__fixtures_unchanged__"]
    base = catalogue["__base__"]
    assert not (base / "cache").exists(), "a bad input measured capacity"
    assert list((base / "tmp").iterdir()) == []


# ====================================================================== Python API
def _yaml(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def _api_cases():
    import gymnasium as gym

    import llmsched_gym  # noqa: F401
    from llmsched_gym.engine import EngineConfig
    from llmsched_gym.evaluation.backends import make_backend
    from llmsched_gym.evaluation.harness import evaluate
    from llmsched_gym.gateway.policy import make_policy
    from llmsched_gym.scenarios import load_scenario, make_scenario
    from llmsched_gym.simulator import ClusterConfig, GatewayConfig, Simulator

    sc = lambda: make_scenario("codegen", qps=2, duration_s=2)  # noqa: E731
    return [
        ("make_scenario-qps-string", lambda tp: make_scenario("codegen", qps="10"), ["qps='10'", "number"]),
        ("make_scenario-qps-inf", lambda tp: make_scenario("codegen", qps=float("inf")), ["qps=inf", "finite"]),
        ("make_scenario-instances-float", lambda tp: make_scenario("codegen", instances=2.5), ["instances=2.5"]),
        ("make_scenario-horizon-zero", lambda tp: make_scenario("codegen", horizon_s=0), ["horizon_s=0"]),
        ("make_scenario-duration-negative", lambda tp: make_scenario("codegen", duration_s=-1), ["duration_s=-1"]),
        ("make_scenario-num-requests-float", lambda tp: make_scenario("codegen", num_requests=2.5), ["num_requests"]),
        ("make_scenario-kv-word", lambda tp: make_scenario("codegen", kv_blocks="lots"), ["kv_blocks='lots'"]),
        ("make_scenario-hardware-type", lambda tp: make_scenario("codegen", hardware=3), ["hardware=3"]),
        ("make_scenario-router-empty", lambda tp: make_scenario("codegen", router=""), ["router=''"]),
        ("make_scenario-unknown-keyword", lambda tp: make_scenario("codegen", qsp=3), ["qsp", "allowed"]),
        ("make_scenario-unknown-name", lambda tp: make_scenario("nosuch"), ["'nosuch'", "codegen"]),
        ("make_scenario-two-rates", lambda tp: make_scenario("codegen", qps=1, load=0.5), ["at most one"]),
        ("simulator-seed-float", lambda tp: sc().simulator(seed=1.5), ["seed=1.5", "integer in [0, 2147483647]"]),
        ("simulator-seed-negative", lambda tp: sc().simulator(seed=-1), ["seed=-1"]),
        ("simulator-horizon-negative", lambda tp: sc().simulator(0, horizon_s=-1), ["horizon_s=-1"]),
        ("build_workload-seed-string", lambda tp: sc().build_workload("1"), ["seed='1'"]),
        ("make_policy-param-type", lambda tp: make_policy("llm-d:prefix_weight=abc"), ["prefix_weight", "llm-d takes"]),
        ("make_policy-kwarg-type", lambda tp: make_policy("llm-d", prefix_weight="abc"), ["prefix_weight='abc'"]),
        ("make_policy-kwarg-unknown", lambda tp: make_policy("jsq", x=1), ["jsq takes no parameters"]),
        ("ClusterConfig-instances-word", lambda tp: ClusterConfig(instances="two"), ["cluster.instances='two'"]),
        ("ClusterConfig-engine-float", lambda tp: ClusterConfig(engine={"max_num_seqs": 2.5}),
         ["engine.max_num_seqs=2.5"]),
        ("ClusterConfig-engine-unknown", lambda tp: ClusterConfig(engine={"max_seqs": 2}), ["max_seqs"]),
        ("ClusterConfig-kv-word", lambda tp: ClusterConfig(kv_blocks="lots"), ["kv_blocks='lots'"]),
        ("ClusterConfig-scrape-nan", lambda tp: ClusterConfig(scrape_interval_s=float("nan")), ["scrape_interval_s"]),
        ("GatewayConfig-ttl-nan", lambda tp: GatewayConfig(ttl_s=float("nan")), ["gateway.ttl_s=nan"]),
        ("GatewayConfig-band-float", lambda tp: GatewayConfig(band_capacity=2.5), ["band_capacity=2.5"]),
        ("GatewayConfig-router-empty", lambda tp: GatewayConfig(router=""), ["gateway.router=''"]),
        ("load_scenario-instances-word", lambda tp: load_scenario(_yaml(tp, FIXTURES["instances-two.yaml"])),
         ["cluster.instances='two'"]),
        ("load_scenario-count-float", lambda tp: load_scenario(_yaml(tp, FIXTURES["count-float.yaml"])),
         ["num_requests=10.5"]),
        ("evaluate-rate-word", lambda tp: evaluate("codegen", "jsq", 1, qps="abc"), ["'abc'", "number"]),
        ("evaluate-seeds-zero", lambda tp: evaluate("codegen", "jsq", 0, qps=2), ["seeds=0"]),
        ("env-qps-word", lambda tp: gym.make("llmsched/Routing-v0", qps="abc"), ["qps='abc'"]),
        ("env-horizon-negative", lambda tp: gym.make("llmsched/Routing-v0", horizon=-1), ["horizon=-1"]),
        ("env-unknown-keyword", lambda tp: gym.make("llmsched/FlowControl-v0", nosuch=1), ["'nosuch'", "allowed"]),
        ("env-reward-scale-inf", lambda tp: gym.make("llmsched/Routing-v0", reward_scale=float("inf")),
         ["reward_scale=inf"]),
        ("env-control-interval-zero", lambda tp: gym.make("llmsched/FlowControl-v0", control_interval=0),
         ["control_interval=0"]),
        ("env-priority-weights-keys", lambda tp: gym.make("llmsched/Routing-v0", priority_weights={"a": 1}),
         ["priority_weights", "integer priorities"]),
        ("env-observation-exclude", lambda tp: gym.make("llmsched/Routing-v0", observation={"exclude": "running"}),
         ["exclude"]),
        ("env-reward-unknown", lambda tp: gym.make("llmsched/Routing-v0", reward="fast"), ["reward='fast'"]),
        ("vector-env-horizon-word", lambda tp: gym.make_vec("llmsched/Routing-v0", num_envs=2, horizon="x"),
         ["horizon='x'"]),
        # issue 29: unknown keywords are ConfigErrors (not TypeError), upper bounds, render modes, Ray
        ("simulator-unknown-keyword", lambda tp: sc().simulator(0, nosuch=1), ["GatewayConfig", "'nosuch'", "router"]),
        ("ClusterConfig-unknown-keyword", lambda tp: ClusterConfig(nosuch=1), ["ClusterConfig", "'nosuch'", "instances"]),
        ("EngineConfig-unknown-keyword", lambda tp: EngineConfig(nosuch=1), ["EngineConfig", "'nosuch'", "max_num_seqs"]),
        ("Simulator-missing-argument", lambda tp: Simulator(), ["Simulator", "workload"]),
        ("evaluate-unknown-keyword", lambda tp: evaluate("codegen", "jsq", 1, qps=2, nosuch=1), ["evaluate", "'nosuch'"]),
        ("load_scenario-unknown-keyword", lambda tp: load_scenario("x.yaml", strict=True), ["load_scenario", "'strict'"]),
        ("make_scenario-instances-huge", lambda tp: make_scenario("codegen", instances=10**6),
         ["instances=1000000", "[1, 1024]"]),
        ("make_scenario-num-requests-huge", lambda tp: make_scenario("codegen", num_requests=10**9),
         ["num_requests=1000000000", "[1, 10000000]"]),
        ("evaluate-seeds-huge", lambda tp: evaluate("codegen", "jsq", 10**6, qps=2), ["seeds=1000000", "[1, 1000]"]),
        ("make_policy-declared-range", lambda tp: make_policy("bailian", lam=-0.5), ["lam=-0.5", "[0, 1]"]),
        ("vector-env-num-envs-huge", lambda tp: gym.make_vec("llmsched/Routing-v0", num_envs=10**6),
         ["num_envs=1000000", "[1, 4096]"]),
        ("env-horizon-huge", lambda tp: gym.make("llmsched/Routing-v0", horizon=1e9), ["horizon=1000000000.0"]),
        ("env-render-mode-human", lambda tp: gym.make("llmsched/Routing-v0", render_mode="human"),
         ["render_mode='human'", "None"]),
        ("make_backend-ray-address", lambda tp: make_backend("ray", address="nohost"), ["ray_address='nohost'"]),
    ]


API_IDS = [c[0] for c in _api_cases()]


@pytest.mark.parametrize("case", API_IDS)
def test_python_bad_input(case, tmp_path):
    from llmsched_gym.errors import ConfigError

    _, fn, expect = next(c for c in _api_cases() if c[0] == case)
    with pytest.raises(ConfigError) as ei:
        fn(tmp_path)
    msg = str(ei.value)
    assert isinstance(ei.value, ValueError)
    assert "\n" not in msg, msg
    for s in expect:
        assert s in msg, (s, msg)
    assert "1500" not in msg  # no internal seed arithmetic leaks into messages


@pytest.mark.parametrize("env_id", ["llmsched/Routing-v0", "llmsched/FlowControl-v0", "llmsched/Admission-v0",
                                    "llmsched/Autoscaling-v0", "llmsched/Gateway-v0"])
def test_render_mode_none_is_accepted(env_id):
    """Gymnasium passes render_mode to every environment: None must be taken."""
    import gymnasium as gym

    import llmsched_gym  # noqa: F401

    assert gym.make(env_id, render_mode=None).render_mode is None
    assert gym.make_vec(env_id, num_envs=2, render_mode=None).render_mode is None


def test_missing_extra_is_named(monkeypatch):
    from llmsched_gym.errors import ConfigError, MissingExtraError
    from llmsched_gym.validation import require_extra

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, as without the extra
    with pytest.raises(MissingExtraError) as ei:
        require_extra("agent:x", modules=("torch",))
    assert isinstance(ei.value, ConfigError)
    assert 'pip install -e ".[rl]"' in str(ei.value) and "whl/cpu" in str(ei.value)


# ====================================================================== atomic results
def test_atomic_write_is_all_or_nothing(tmp_path, monkeypatch):
    from llmsched_gym.errors import OutputError
    from llmsched_gym.validation import atomic_write_text

    target = tmp_path / "out" / "r.json"
    atomic_write_text(target, "old")  # creates the directory
    assert target.read_text() == "old"

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OutputError, match="cannot write .*r.json: No space left on device"):
        atomic_write_text(target, "new" * 1000)
    monkeypatch.undo()
    assert target.read_text() == "old"  # the old result is intact
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.json"]  # no temporary file left

    def broken_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OutputError):
        atomic_write_text(tmp_path / "out" / "other.json", "x")
    monkeypatch.undo()
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.json"]

    # removed during the run: the directory is created again and the file written whole
    import shutil

    shutil.rmtree(tmp_path / "out")
    atomic_write_text(target, "again")
    assert target.read_text() == "again"


_BREAK_DURING_RUN = """
import json, shutil, sys
from pathlib import Path
import llmsched_gym.evaluation.metrics as M
from llmsched_gym.cli import main

out = Path(sys.argv[1])
real = M.summarize

def summarize(sim):  # the simulation has finished; now break its output directory
    if out.is_dir():
        shutil.rmtree(out)
        out.write_text("not a directory any more")
    return real(sim)

M.summarize = summarize
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("cmd", ["run", "compare"])
def test_output_broken_during_run_loses_nothing(tmp_path, cmd):
    """The output directory becomes a regular file while the simulation runs: no partial
    file, one error line, and the finished results saved elsewhere (named in the error)."""
    out = tmp_path / "results"
    out.mkdir()
    if cmd == "run":
        args = ["run", "--scenario", "codegen", "--qps", "2", "--horizon", "2", "--json", str(out / "r.json")]
    else:
        args = CMP + ["--out", str(out)]
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]]
                                                                       if os.environ.get("PYTHONPATH") else [])),
               TMPDIR=str(tmp_path / "tmp"), MPLCONFIGDIR=str(tmp_path / "mpl"), COLUMNS="200")
    r = subprocess.run([sys.executable, "-c", _BREAK_DURING_RUN, str(out), *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and "cannot write" in lines[0] and "saved to" in lines[0], r.stderr
    assert out.read_text() == "not a directory any more"  # nothing partial where the results were to go
    saved = Path(lines[0].rsplit("saved to ", 1)[1].split(" instead")[0])
    assert saved.is_relative_to(tmp_path / "tmp")
    if cmd == "run":
        data = json.loads(saved.read_text())
        assert isinstance(data, list) and data[0]["seed"] == 0
    else:
        assert {"results.csv", "results.json", "summary.csv"} <= {p.name for p in saved.iterdir()}
    leftovers = [p for p in tmp_path.rglob("*.tmp")]
    assert leftovers == []


def test_run_json_is_always_a_list(tmp_path):
    from llmsched_gym.cli import main

    out = tmp_path / "r.json"
    assert main(["run", "--scenario", "codegen", "--qps", "2", "--horizon", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert isinstance(data, list) and len(data) == 1 and data[0]["seed"] == 0


# ====================================================================== declared policy ranges
def _ranged_params():
    from llmsched_gym.gateway.policy import list_policies
    from llmsched_gym.validation import signature_params, split_range

    out = []
    for name, factory in list_policies().items():
        for p, tp, _ in signature_params(factory):
            if split_range(tp)[1]:
                out.append(pytest.param(name, factory, p, tp, id=f"{name}:{p}"))
    return out


@pytest.mark.parametrize("name, factory, param, tp", _ranged_params())
def test_policy_range_declared_once(name, factory, param, tp, capsys):
    """One declaration per parameter: `policies` lists it, and make_policy, a direct
    construction and the EPP export all refuse a value beyond it, naming it."""
    import typing

    from llmsched_gym.cli import main
    from llmsched_gym.errors import ConfigError
    from llmsched_gym.gateway.epp import dump_epp_config
    from llmsched_gym.gateway.policy import make_policy
    from llmsched_gym.validation import split_range

    base, rng = split_range(tp)
    iv = typing.get_args(tp)[1]
    assert main(["policies"]) == 0
    listing = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith(name + " "))
    assert f"{param}=" in listing and rng in listing
    upper = iv.le if iv.le is not None else iv.lt  # every declared range has one
    bad = int(upper * 2 + 1) if base is int else float(upper * 2 + 1)
    for attempt in (lambda: make_policy(f"{name}:{param}={bad}"), lambda: factory(**{param: bad})):
        with pytest.raises(ConfigError) as ei:
            attempt()
        assert f"{param}={bad!r}" in str(ei.value) and rng in str(ei.value), str(ei.value)
    if factory.role in ("routing", "usage-limit", "admission"):
        with pytest.raises(ConfigError, match=param):
            dump_epp_config(f"{name}:{param}={bad}")


def test_state_beyond_memory_is_one_line(monkeypatch):
    """The engine's state grows with instances x requests; an allocation numpy refuses
    is a ConfigError naming both, not numpy's traceback."""
    import llmsched_gym.simulator as S
    from llmsched_gym.errors import ConfigError
    from llmsched_gym.scenarios import make_scenario

    def refuse(*args, **kwargs):
        raise MemoryError("Unable to allocate 368. GiB for an array with shape (3, 16452622336) and data type int64")

    monkeypatch.setattr(S, "EngineState", refuse)
    with pytest.raises(ConfigError) as ei:
        make_scenario("codegen", qps=2, duration_s=2, instances=4).simulator(0)
    msg = str(ei.value)
    assert "\n" not in msg and "368. GiB" in msg and "4 instances x" in msg and "fewer instances" in msg
