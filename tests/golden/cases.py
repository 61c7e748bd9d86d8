"""The golden cases: workloads x (cluster, gateway) runs recorded by ``record.py``.

Each :class:`Case` builds one workload with the public API (built-in scenarios at an
explicit ``qps`` and a short window, or the first rows of a public trace) and lists the
runs made on it. Only ``record.py`` uses this file: the golden files store the built
workload and every config, so the test never rebuilds them from here (built-in scenarios
and generators may change; the stored inputs do not).

Policies are named by spec string (``"llm-d:prefix_weight=5.0"``) so that each run builds
fresh policy objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from llmsched_gym import ClusterConfig, EngineConfig, GatewayConfig, make_scenario
from llmsched_gym.workloads.synthetic import ArrivalSpec, ClassSpec, LengthSpec, WorkloadSpec, generate
from llmsched_gym.workloads.traces import (
    assign_priorities,
    load_azure,
    load_blis_trace,
    load_mooncake,
    scale_to_rate,
)
from llmsched_gym.workloads.workload import Workload

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
TRACE_ROWS = 1500


@dataclass
class Run:
    label: str
    cluster: ClusterConfig
    gateway: GatewayConfig
    seed: int = 0
    horizon_s: float | None = None


@dataclass
class Case:
    name: str
    description: str
    build: Callable[[], Workload]
    runs: list[Run] = field(default_factory=list)


def _scenario(name: str, seed: int = 0, **overrides):
    """(workload, cluster) of a built-in scenario at an explicit rate (never ``load=``)."""
    assert "load" not in overrides and "paper_qps" not in overrides, "capacity measurement is not wanted here"
    sc = make_scenario(name, **overrides)
    return sc.build_workload(seed), sc.cluster


def _lazy(name: str, seed: int = 0, **overrides) -> Callable[[], Workload]:
    return lambda: _scenario(name, seed, **overrides)[0]


def _cluster(name: str, **overrides) -> ClusterConfig:
    """A built-in scenario's cluster, frozen now (the golden file stores it anyway)."""
    return make_scenario(name, **overrides).cluster


def gw(router="round-robin", flow_control=None, admission="always-admit", **kw) -> GatewayConfig:
    return GatewayConfig(router=router, admission=admission, flow_control=flow_control, **kw)


# ---------------------------------------------------------------------------- workloads
def overload_workload() -> Workload:
    """~70 req/s of ~4000-token prompts and ~1000-token outputs, two classes."""
    spec = WorkloadSpec(arrival=ArrivalSpec("poisson", 70.0), input=LengthSpec("lognormal", 4000, 1000, 256, 8000),
                        output=LengthSpec("lognormal", 1000, 300, 16, 2500),
                        classes=[ClassSpec("critical", 0, 0.4, 2.0, 0.1), ClassSpec("sheddable", -1, 0.6, 10.0, 0.2)],
                        duration_s=12.0, name="overload")
    return generate(spec, seed=7)


def mooncake_workload() -> Workload:
    w = load_mooncake(TRACES / "mooncake" / "conversation_trace.jsonl", limit=TRACE_ROWS)
    w = scale_to_rate(w, 5.0)  # ~0.7 of 4 x H100 (first 1500 rows span ~512 s at 2.9 req/s)
    return assign_priorities(w, critical_share=0.3, seed=0)


def azure_code_workload() -> Workload:
    w = load_azure(TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv", limit=TRACE_ROWS)
    w = scale_to_rate(w, 16.0)
    return assign_priorities(w, critical_share=0.3, seed=1)


def blis_workload() -> Workload:
    tr = load_blis_trace(TRACES / "blis" / "ref5000.csv")
    return tr.workload.subset(np.arange(TRACE_ROWS))


def blis_cluster(**latency_params) -> ClusterConfig:
    """BLIS's reference cluster (benchmarks/validation/blis_parity.py): 4 x Qwen3-14B on H100, TP1."""
    return ClusterConfig(instances=4, hardware="H100", model="qwen3-14b", tp=1, latency_model="blis-trained-physics",
                         latency_params=dict(latency_params), gpu_memory_utilization=0.9,
                         engine=EngineConfig.blis(), scrape_interval_s=0.0)


# ---------------------------------------------------------------------------- cases
ROUTERS = ["round-robin", "random", "jsq", "vllm-dp", "least-tokens", "llm-d", "llm-d:prefix_weight=5.0",
           "llm-d-predicted-latency", "bailian", "bailian-sampling", "dynamo", "dynamo:temperature=0.5", "aibrix",
           "sglang-cache-aware", "lmetric", "lmetric-no-detector", "preble", "polyserve"]


def cases() -> list[Case]:
    chatbot = _cluster("chatbot", instances=4)
    hotspot = _cluster("kv-hotspot", instances=8)
    agent = _cluster("agent", instances=4)
    codegen = _cluster("codegen")
    chat = _cluster("chat")
    reasoning = _cluster("reasoning")
    h100 = ClusterConfig(instances=4, hardware="H100", model="qwen3-14b", latency_model="linear",
                         engine=EngineConfig(max_num_batched_tokens=8192))
    out = [
        Case("routers_chatbot", "every routing family on multi-turn chat with shared system prompts (4 x H20, roofline)",
             _lazy("chatbot", qps=35, duration_s=20, instances=4),
             [Run(r, chatbot, gw(r), seed=3) for r in ROUTERS]),
        Case("routers_kv_hotspot", "hot 6k-token prefix burst: LMetric with/without its hotspot detector and peers (8 x H20)",
             _lazy("kv-hotspot", qps=20, duration_s=60, instances=8),
             [Run(r, hotspot, gw(r), seed=1) for r in
              ["lmetric", "lmetric-no-detector", "lmetric:window_s=10.0,prefix_blocks=2,min_samples=5", "jsq",
               "sglang-cache-aware"]]),
        Case("routers_agent", "long shared tool prompts, short outputs; prefix-aware routers, scrape every 10 ms",
             _lazy("agent", qps=30, duration_s=30, instances=4),
             [Run(r, replace(agent, scrape_interval_s=0.01), gw(r), seed=2) for r in
              ["llm-d", "dynamo", "aibrix", "bailian", "polyserve", "llm-d-predicted-latency"]]),
        Case("flow_codegen_paper16", "codegen at paper QPS 16 = 34.5 req/s (docs/scenarios.md), 2 classes: "
             "usage-limit policies and admission", _lazy("codegen", qps=34.5, duration_s=40),
             [Run("static", codegen, gw("llm-d", "static-usage-limit")),
              Run("static-0.8", codegen, gw("llm-d", "static-usage-limit:threshold=0.8")),
              Run("soft-reflective", codegen, gw("llm-d", "soft-reflective-ceiling")),
              Run("priority-holdback", codegen, gw("llm-d", "priority-holdback")),
              Run("legacy-admission", codegen, gw("llm-d", None, "legacy")),
              Run("probabilistic-admission", codegen, gw("llm-d", "static-usage-limit", "probabilistic"))]),
        Case("flow_chat_paper80", "chat at paper QPS 80 = 96 req/s (above capacity): soft-reflective vs static vs holdback",
             _lazy("chat", qps=96.0, duration_s=15),
             [Run("static", chat, gw("llm-d", "static-usage-limit")),
              Run("soft-reflective", chat, gw("llm-d", "soft-reflective-ceiling")),
              Run("priority-holdback-0.6", chat, gw("jsq", "priority-holdback:cmax=1.0,cmin=0.6"))]),
        Case("flow_reasoning_paper0.7", "reasoning at paper QPS 0.7 = 1.65 req/s (above capacity, ~6k-token outputs)",
             _lazy("reasoning", qps=1.65, duration_s=200),
             [Run("static", reasoning, gw("llm-d", "static-usage-limit")),
              Run("soft-reflective", reasoning, gw("llm-d", "soft-reflective-ceiling"))]),
        Case("overload_preemption", "4 x H100 at ~70 req/s, in ~4000 / out ~1000, 3000 KV blocks: preemptions",
             overload_workload,
             [Run("rr-small-kv", replace(h100, kv_blocks=3000), gw("round-robin")),
              Run("jsq-small-kv-fc", replace(h100, kv_blocks=3000), gw("jsq", "static-usage-limit")),
              Run("lmetric-small-kv-seqs16", replace(h100, kv_blocks=3000, engine=EngineConfig(max_num_seqs=16)),
                  gw("lmetric"))]),
        Case("horizon_cut", "codegen at 20 req/s cut at 25 s while arrivals continue to 40 s (in-flight requests)",
             _lazy("codegen", qps=20, duration_s=40, seed=5),
             [Run("llm-d-static", codegen, gw("llm-d", "static-usage-limit"), horizon_s=25.0),
              Run("rr-nofc", codegen, gw("round-robin"), horizon_s=25.0),
              Run("jsq-soft-noskip", replace(codegen, engine=replace(codegen.engine, event_skipping=False)),
                  gw("jsq", "soft-reflective-ceiling"), horizon_s=25.0)]),
        Case("band_rejects_expiry", "overloaded codegen, band capacity 40 and TTL 2 s: rejections and expiries",
             _lazy("codegen", qps=40, duration_s=30, seed=2),
             [Run("static-cap40-ttl2", codegen, gw("llm-d", "static-usage-limit", band_capacity=40, ttl_s=2.0)),
              Run("soft-cap40-ttl2", codegen, gw("llm-d", "soft-reflective-ceiling", band_capacity=40, ttl_s=2.0)),
              Run("holdback-cap10-ttl0.5-probabilistic", codegen,
                  gw("jsq", "priority-holdback", "probabilistic", band_capacity=10, ttl_s=0.5,
                     dispatch_interval_s=0.005))]),
        Case("mooncake_4x", "Mooncake conversation trace, first 1500 rows at 5 req/s, 4 x H100, 30% critical",
             mooncake_workload,
             [Run("llm-d", h100, gw("llm-d")),
              Run("lmetric-soft", h100, gw("lmetric", "soft-reflective-ceiling")),
              Run("sglang-kv-unlimited", replace(h100, kv_blocks="unlimited"), gw("sglang-cache-aware"))]),
        Case("azure_code", "Azure 2023 code trace, first 1500 rows at 16 req/s, 2 x H100, 30% critical, max_model_len 6000 (drops)",
             azure_code_workload,
             [Run(label, replace(codegen, engine=EngineConfig(max_num_batched_tokens=8192, max_model_len=6000)), g)
              for label, g in [("jsq", gw("jsq")), ("least-tokens", gw("least-tokens")),
                               ("vllm-dp-probabilistic", gw("vllm-dp", "static-usage-limit", "probabilistic")),
                               ("random-legacy", gw("random", None, "legacy"))]]),
        Case("blis_ref5000", "BLIS ref5000, first 1500 rows: trained-physics (integer_us), BLIS engine, round-robin",
             blis_workload,
             [Run("trained-physics-integer-us", blis_cluster(integer_us=True), gw("round-robin")),
              Run("blis-roofline-integer-us", replace(blis_cluster(integer_us=True), latency_model="blis-roofline"),
                  gw("round-robin"))]),
        Case("latency_models", "codegen at 12 req/s on 2 x H100 under each step-time model, scrape 0, no event skipping",
             _lazy("codegen", qps=12, duration_s=60, seed=3),
             [Run("linear", codegen, gw("jsq")),
              Run("linear-custom", replace(codegen, latency_params={"beta0": 10000.0, "beta1": 50.0}), gw("jsq")),
              Run("roofline", replace(codegen, latency_model="roofline"), gw("jsq")),
              Run("roofline-mfu", replace(codegen, latency_model="roofline",
                                          latency_params={"mfu_prefill": 0.6, "mfu_decode": 0.4, "overhead_us": 500.0}),
                  gw("jsq")),
              Run("blis-roofline", replace(codegen, latency_model="blis-roofline"), gw("jsq")),
              Run("blis-trained-physics", replace(codegen, latency_model="blis-trained-physics"), gw("jsq")),
              Run("linear-scrape0", replace(codegen, scrape_interval_s=0.0), gw("llm-d", "soft-reflective-ceiling")),
              Run("linear-noskip", replace(codegen, engine=replace(codegen.engine, event_skipping=False)),
                  gw("llm-d", "soft-reflective-ceiling")),
              Run("linear-batch2048-seqs32", replace(codegen, engine=EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048)),
                  gw("llm-d"))]),
        Case("toolagent_qwen2", "toolagent on 4 x H20 Qwen2-7B (roofline): long loops over a growing context",
             _lazy("toolagent-qwen2-7b", qps=25, duration_s=40, instances=4),
             [Run(r, _cluster("toolagent-qwen2-7b", instances=4), gw(r), seed=4) for r in
              ["lmetric", "vllm-dp", "llm-d", "preble"]]),
    ]
    return out


# ---------------------------------------------------------------------------- environments
@dataclass
class EnvCase:
    """A fixed-action episode run of one environment (a native vector env if ``num_envs``)."""

    name: str
    env_id: str
    scenario: str
    overrides: dict  # make_scenario overrides: an explicit qps and a short window
    env_kwargs: dict  # the environment's own keywords (horizon, control_interval, reward, ...)
    steps: int = 300
    seed: int = 0
    num_envs: int | None = None


def env_cases() -> list[EnvCase]:
    return [
        EnvCase("env_routing", "llmsched/Routing-v0", "chatbot", dict(qps=20, duration_s=10, instances=4),
                dict(horizon=None)),
        EnvCase("env_flow_control", "llmsched/FlowControl-v0", "codegen", dict(qps=34.5, duration_s=20),
                dict(horizon=15.0, control_interval=0.1, reward="e2e")),
        EnvCase("env_admission", "llmsched/Admission-v0", "codegen", dict(qps=34.5, duration_s=8),
                dict(horizon=None, control_interval=0.1, reward="slo", flow_control="soft-reflective-ceiling")),
        EnvCase("env_vector_routing", "llmsched/Routing-v0", "codegen", dict(qps=10, duration_s=12),
                dict(horizon=8.0), num_envs=3),
    ]
