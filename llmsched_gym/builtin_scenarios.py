"""The built-in scenarios (docs/scenarios.md). Names are fixed so results compare across versions.

Flow-control seed workloads (llm-d's flow-control article) on 2 x H100, Qwen3-14B,
linear step-time preset: ``codegen``, ``chat``, ``reasoning``. Their published QPS
points are regimes, not rates to copy, so ``paper_qps`` maps to a load:
``load = paper_qps / published_capacity`` with published capacities codegen 15, chat 70,
reasoning 0.55 QPS (estimated from the regimes the article reports: codegen 4 and 10
under capacity, 16 at or just above; chat 20 under, 40/60 approaching, 80 above;
reasoning 0.2 under, 0.7 above). Default: the highest published point.

LMetric-style routing families on 16 x H20, Qwen3-30B-A3B, roofline (``*-qwen2-7b``
variants on Qwen2-7B): ``chatbot``, ``agent``, ``coder``, ``toolagent`` at ``load=0.5``
of measured capacity by default, and ``kv-hotspot`` (``kv-hotspot-thinking``: its burst
made of thinking requests, the LMetric paper's hotspot shape).

Trace replays: ``mooncake-conversation``, ``azure-code``, ``azure-conv`` at the trace's
own rate by default (``qps``/``load`` rescale time).

Prefill/decode disaggregation: ``pd-longprompt``, long prompts on 2 prefill + 2 decode
H100s (``pd-aggregated`` runs the same 4 GPUs aggregated).
"""

from __future__ import annotations

from .engine import EngineConfig
from .scenarios import Scenario, TraceSource, register_scenario
from .simulator import ClusterConfig, GatewayConfig
from .workloads.synthetic import ArrivalSpec, ClassSpec, LengthSpec, PrefixSpec, WorkloadSpec


def _lognormal(mean: float, std: float, lo: int = 1, hi: int | None = None) -> LengthSpec:
    return LengthSpec("lognormal", mean, std, lo, hi)


def _two_classes(critical_share: float, ttft_slo_s: float, tpot_slo_s: float) -> list[ClassSpec]:
    return [
        ClassSpec("critical", 0, critical_share, ttft_slo_s, tpot_slo_s),
        ClassSpec("sheddable", -1, round(1.0 - critical_share, 10), ttft_slo_s * 5, tpot_slo_s * 2),
    ]


def _flow_control(name: str, description: str, inp: LengthSpec, out: LengthSpec, critical_share: float,
                  published_capacity: float, default_paper_qps: float, duration_s: float,
                  slo: tuple[float, float]) -> Scenario:
    spec = WorkloadSpec(arrival=ArrivalSpec("poisson", published_capacity), input=inp, output=out,
                        classes=_two_classes(critical_share, *slo), duration_s=duration_s, name=name)
    return Scenario(
        name=name, description=description,
        cluster=ClusterConfig(instances=2, hardware="H100", model="qwen3-14b", latency_model="linear",
                              engine=EngineConfig(max_num_batched_tokens=8192)),
        workload=spec,
        gateway=GatewayConfig(router="llm-d", flow_control="static-usage-limit"),
        published_capacity_qps=published_capacity, default_rate={"paper_qps": default_paper_qps},
        capacity_horizon_s=max(120.0, duration_s / 2),
    )


def codegen() -> Scenario:
    return _flow_control(
        "codegen", "llm-d flow control: code generation, in ~1176 / out ~195 tokens, 30% critical; 2 x H100 Qwen3-14B",
        _lognormal(1176, 600, 16, 8000), _lognormal(195, 150, 2, 2000), 0.3, 15.0, 16.0, 180.0, (1.0, 0.1))


def chat() -> Scenario:
    return _flow_control(
        "chat", "llm-d flow control: chat, in ~39 / out ~300 tokens, 30% critical; 2 x H100 Qwen3-14B",
        _lognormal(39, 30, 4, 512), _lognormal(300, 200, 2, 2000), 0.3, 70.0, 80.0, 120.0, (0.5, 0.1))


def reasoning() -> Scenario:
    return _flow_control(
        "reasoning", "llm-d flow control: reasoning, in ~780 / out ~6200 tokens, 50% critical; 2 x H100 Qwen3-14B",
        _lognormal(780, 400, 16, 4000), _lognormal(6200, 2500, 100, 16000), 0.5, 0.55, 0.7, 900.0, (2.0, 0.1))


# --------------------------------------------------------------------------- LMetric families
_FAMILIES = {
    # name: (description, input, output, prefix, arrival cv)
    "chatbot": ("multi-turn chat with shared system prompts (Zipf), history reused by the next turn",
                _lognormal(150, 120, 4, 2000), _lognormal(250, 200, 4, 2000),
                PrefixSpec(block_tokens=64, system_prompt_groups=20, system_prompt_tokens=_lognormal(800, 400, 64, 4000),
                           zipf_s=1.1, session_share=0.7, turns=LengthSpec("gaussian", 4, 2, 2, 10),
                           think_time_s=20.0, decode_tokens_per_s=40.0), 1.0),
    "agent": ("API-calling agents: long shared tool prompts, short outputs",
              _lognormal(300, 200, 8, 3000), _lognormal(60, 40, 2, 600),
              PrefixSpec(block_tokens=64, system_prompt_groups=8, system_prompt_tokens=_lognormal(4000, 1500, 512, 12000),
                         zipf_s=1.0, session_share=0.4, turns=LengthSpec("gaussian", 3, 1, 2, 6),
                         think_time_s=2.0, decode_tokens_per_s=40.0), 1.5),
    "coder": ("coding assistant: long code context with high reuse across turns",
              _lognormal(400, 300, 16, 4000), _lognormal(300, 200, 8, 2000),
              PrefixSpec(block_tokens=64, system_prompt_groups=40, system_prompt_tokens=_lognormal(6000, 3000, 512, 20000),
                         zipf_s=1.2, session_share=0.6, turns=LengthSpec("gaussian", 5, 2, 2, 12),
                         think_time_s=15.0, decode_tokens_per_s=40.0), 1.0),
    "toolagent": ("Mooncake-style tool agent: long loops of short steps over a growing context",
                  _lognormal(500, 300, 16, 4000), _lognormal(100, 80, 2, 1000),
                  PrefixSpec(block_tokens=64, system_prompt_groups=4, system_prompt_tokens=_lognormal(2000, 800, 256, 8000),
                             zipf_s=1.0, session_share=0.9, turns=LengthSpec("gaussian", 8, 3, 2, 16),
                             think_time_s=1.0, decode_tokens_per_s=40.0), 2.0),
}


def _lmetric_cluster(model: str) -> ClusterConfig:
    return ClusterConfig(instances=16, hardware="H20", model=model, latency_model="roofline",
                         engine=EngineConfig(max_num_batched_tokens=8192))


def _family(name: str, model: str, suffix: str) -> Scenario:
    desc, inp, out, prefix, cv = _FAMILIES[name]
    arrival = ArrivalSpec("poisson", 20.0) if cv == 1.0 else ArrivalSpec("gamma", 20.0, cv)
    spec = WorkloadSpec(arrival=arrival, input=inp, output=out, classes=[ClassSpec("critical", 0, 1.0, 2.0, 0.15)],
                        prefix=prefix, duration_s=120.0, name=name + suffix)
    return Scenario(name=name + suffix, description=f"LMetric {name}: {desc}; 16 x H20 {model}",
                    cluster=_lmetric_cluster(model), workload=spec, gateway=GatewayConfig(router="llm-d"),
                    default_rate={"load": 0.5})


#: Output lengths of a thinking (reasoning) workload: the ``reasoning`` seed's (~6.2k tokens).
_THINKING_OUTPUT = _lognormal(6200, 2500, 100, 16000)


def kv_hotspot(model: str = "qwen3-30b-a3b", suffix: str = "", output: LengthSpec | None = None,
               name: str = "kv-hotspot", what: str = "requests") -> Scenario:
    """Chatbot background plus a 60 s burst (t = 30-90 s) of requests that are almost
    entirely one shared 6k-token prefix (a few dozen new tokens each), a third of all
    traffic while it lasts: LMetric's failure case, where the prefix-caching instance
    looks ~250x cheaper than any other. ``output``: the hot requests' output lengths
    (default ~300 tokens; ``kv-hotspot-thinking`` gives them a thinking workload's)."""
    background = _family("chatbot", model, suffix).workload
    background.name = "background"
    burst = [[0, 1], [30, 1], [30, 50], [90, 50], [90, 1]]
    hot = WorkloadSpec(
        arrival=ArrivalSpec("poisson", 0.2, rate_curve=burst), input=_lognormal(24, 8, 4, 64),
        output=output or _lognormal(300, 150, 16, 1500), classes=[ClassSpec("critical", 0, 1.0, 2.0, 0.15)],
        prefix=PrefixSpec(block_tokens=64, system_prompt_groups=1, system_prompt_tokens=6000),
        duration_s=120.0, name="hot")
    return Scenario(name=name + suffix,
                    description=f"KV-cache hotspot: a burst of {what} sharing one 6k-token prefix over a chatbot background; 16 x H20 {model}",
                    cluster=_lmetric_cluster(model), workload=[background, hot],
                    gateway=GatewayConfig(router="llm-d"), default_rate={"load": 0.5})


def kv_hotspot_thinking() -> Scenario:
    """``kv-hotspot`` with the LMetric paper's hotspot shape: the burst's requests are
    *thinking* requests (a reasoning model's ~6.2k output tokens, the ``reasoning``
    seed's lengths) behind the shared 6k-token prefix, so each one holds a growing KV
    footprint for minutes on the instance it lands on."""
    return kv_hotspot(output=_THINKING_OUTPUT, name="kv-hotspot-thinking", what="thinking requests (~6.2k output tokens)")


def mixed_chatbot() -> Scenario:
    """``chatbot``'s workload on a mixed fleet of 16: 8 x H20 (TP1), 4 x A100 (TP2) and
    4 x L40S (TP2), each pool with its own step times (roofline) and KV capacity. The
    routers that score queues, cached prefixes or a fleet-wide step-time model (JSQ,
    llm-d's scorers, LMetric) do not see that an L40S iteration takes longer than an H20's
    while an A100 pair prefills faster: the heterogeneous case operators ask for."""
    base = _family("chatbot", "qwen3-30b-a3b", "")
    cluster = ClusterConfig(instances=16, hardware="H20", model="qwen3-30b-a3b", latency_model="roofline",
                            engine=EngineConfig(max_num_batched_tokens=8192),
                            pools=[{"instances": 8, "hardware": "H20"}, {"instances": 4, "hardware": "A100", "tp": 2},
                                   {"instances": 4, "hardware": "L40S", "tp": 2}])
    base.workload.name = "mixed-chatbot"
    return Scenario(name="mixed-chatbot",
                    description="LMetric chatbot on a mixed fleet: 8 x H20, 4 x A100 TP2, 4 x L40S TP2; qwen3-30b-a3b",
                    cluster=cluster, workload=base.workload, gateway=GatewayConfig(router="llm-d"),
                    default_rate={"load": 0.5})


#: ``flash-codegen``'s rate multiplier: a diurnal base (x0.5 to x1.5 over 600 s, lowest at
#: t = 0) with two flash crowds reached in 2 s: x6 over t = 150-180 s and x8 over t = 420-440 s.
def _flash_curve() -> list[list[float]]:
    import math

    def diurnal(t: float) -> float:
        return round(1.0 - 0.5 * math.cos(2 * math.pi * t / 600.0), 6)

    knots = [[float(t), diurnal(t)] for t in range(0, 601, 20)]
    for start, end, factor in ((150.0, 180.0, 6.0), (420.0, 440.0, 8.0)):
        knots += [[start - 2.0, diurnal(start - 2.0)], [start, factor * diurnal(start)],
                  [end, factor * diurnal(end)], [end + 2.0, diurnal(end + 2.0)]]
    knots = sorted(knots)
    inside = lambda t: any(s <= t <= e for s, e, _ in ((150.0, 180.0, 0), (420.0, 440.0, 0)))  # noqa: E731
    return [k for k in knots if not (inside(k[0]) and k[1] == diurnal(k[0]))]


def _codegen_at(name: str, rate: float, curve, duration_s: float, instances: int, description: str,
                **gateway) -> Scenario:
    """codegen's requests (in ~1176 / out ~195 tokens, 30% critical, SLOs 1 s TTFT / 0.1 s
    TPOT, sheddable 5 s / 0.2 s) at ``rate`` x the rate ``curve``, on H100s with Qwen3-14B."""
    spec = WorkloadSpec(arrival=ArrivalSpec("poisson", rate, rate_curve=curve),
                        input=_lognormal(1176, 600, 16, 8000), output=_lognormal(195, 150, 2, 2000),
                        classes=_two_classes(0.3, 1.0, 0.1), duration_s=duration_s, name=name)
    return Scenario(
        name=name, description=description,
        cluster=ClusterConfig(instances=instances, hardware="H100", model="qwen3-14b", latency_model="linear",
                              engine=EngineConfig(max_num_batched_tokens=8192)),
        workload=spec, gateway=GatewayConfig(router="llm-d", **gateway), default_rate={"qps": rate},
        capacity_horizon_s=duration_s)


def flash_codegen() -> Scenario:
    """codegen's requests (30% critical) on 4 x H100 Qwen3-14B at a diurnal rate around
    8 req/s with two flash crowds (x6 and x8 within 2 s, for 30 and 20 s; see
    :func:`_flash_curve`): queues build within seconds, faster than a saturation detector
    averaged over a scrape interval reacts."""
    return _codegen_at("flash-codegen", 8.0, _flash_curve(), 600.0, 4,
                       "codegen's requests at a diurnal ~8 req/s with x6 and x8 flash crowds; 4 x H100 Qwen3-14B",
                       flow_control="soft-reflective-ceiling")


# --------------------------------------------------------------------------- autoscaling
#: ``diurnal-codegen``'s day, compressed to half an hour of simulated time (a day would be
#: 48 x slower to simulate); the rate swings over it as over a day, the cold starts and the
#: scaling interval are not compressed.
DIURNAL_PERIOD_S = 1800.0


def diurnal_codegen() -> Scenario:
    """codegen's requests (in ~1176 / out ~195 tokens, 30% critical, SLOs 1 s TTFT / 0.1 s
    TPOT, sheddable 5 s / 0.2 s) at a diurnal rate: ``30 x (1 + 0.8 cos(2 pi (t - 900) /
    1800))`` req/s, from 6 req/s at t = 0 to 54 req/s at the peak (t = 900 s) and back,
    one compressed day of ``DIURNAL_PERIOD_S``; at most 6 x H100 Qwen3-14B (the largest
    fleet of ``llmsched/Autoscaling-v0``; codegen's 2 instances sustain 27 req/s)."""
    curve = {"kind": "diurnal", "period_s": DIURNAL_PERIOD_S, "amplitude": 0.8, "peak_s": DIURNAL_PERIOD_S / 2}
    return _codegen_at("diurnal-codegen", 30.0, curve, DIURNAL_PERIOD_S, 6,
                       "codegen's requests at a diurnal rate (6-54 req/s, a day compressed to 30 min); "
                       "up to 6 x H100 Qwen3-14B")


def bursty_codegen() -> Scenario:
    """codegen's requests (as ``diurnal-codegen``) at 12 req/s with two bursts over 30
    minutes: x4 (48 req/s) for t = 300-420 s and x3 (36 req/s) for t = 1080-1260 s, each
    reached and left over a 30 s ramp; at most 6 x H100 Qwen3-14B."""
    curve = [[0, 1], [270, 1], [300, 4], [420, 4], [450, 1], [1050, 1], [1080, 3], [1260, 3], [1290, 1]]
    return _codegen_at("bursty-codegen", 12.0, curve, 1800.0, 6,
                       "codegen's requests at 12 req/s with x4 and x3 bursts (2-3 min each); up to 6 x H100 Qwen3-14B")


def pd_longprompt() -> Scenario:
    """Prefill-heavy requests (in ~4000 / out ~250 tokens, lognormal, no shared prefixes)
    on 4 x H100 Qwen3-14B (linear step-time preset), the first 2 the prefill pool, KV over
    a 400 Gb/s RDMA NIC per GPU; 8 req/s by default, near the prefill pool's capacity
    (docs/results.md, "Prefill/decode disaggregation"). The gateway disaggregates every
    request (``pd-always``); ``pd-aggregated`` serves whole requests on all 4."""
    spec = WorkloadSpec(arrival=ArrivalSpec("poisson", 8.0), input=_lognormal(4000, 1500, 512, 12000),
                        output=_lognormal(250, 120, 16, 1000), duration_s=300.0, name="pd-longprompt")
    return Scenario(
        name="pd-longprompt",
        description="P/D: in ~4000 / out ~250 tokens at 8 req/s; 2 prefill + 2 decode x H100 Qwen3-14B over RDMA",
        cluster=ClusterConfig(instances=4, hardware="H100", model="qwen3-14b", latency_model="linear",
                              engine=EngineConfig(max_num_batched_tokens=8192), prefill_instances=2, kv_link="rdma"),
        workload=spec, gateway=GatewayConfig(router="llm-d", pd="pd-always"), default_rate={"qps": 8.0},
        capacity_horizon_s=300.0)


def _trace(name: str, description: str, path: str, fmt: str, instances: int) -> Scenario:
    return Scenario(name=name, description=description,
                    cluster=ClusterConfig(instances=instances, hardware="H100", model="qwen3-14b", latency_model="linear",
                                          engine=EngineConfig(max_num_batched_tokens=8192)),
                    workload=TraceSource(path, fmt, critical_share=0.3), gateway=GatewayConfig(router="llm-d"),
                    capacity_horizon_s=600.0)


register_scenario("codegen", codegen)
register_scenario("chat", chat)
register_scenario("reasoning", reasoning)
for _name in _FAMILIES:
    register_scenario(_name, lambda n=_name: _family(n, "qwen3-30b-a3b", ""))
    register_scenario(f"{_name}-qwen2-7b", lambda n=_name: _family(n, "qwen2-7b", "-qwen2-7b"))
register_scenario("kv-hotspot", kv_hotspot)
register_scenario("kv-hotspot-qwen2-7b", lambda: kv_hotspot("qwen2-7b", "-qwen2-7b"))
register_scenario("kv-hotspot-thinking", kv_hotspot_thinking)
register_scenario("diurnal-codegen", diurnal_codegen)
register_scenario("bursty-codegen", bursty_codegen)
register_scenario("pd-longprompt", pd_longprompt)
register_scenario("mixed-chatbot", mixed_chatbot)
register_scenario("flash-codegen", flash_codegen)
register_scenario("mooncake-conversation", lambda: _trace(
    "mooncake-conversation", "Mooncake (Kimi) conversation trace, 12k requests with prefix hashes; 4 x H100 Qwen3-14B",
    "mooncake/conversation_trace.jsonl", "mooncake", 4))
register_scenario("azure-code", lambda: _trace(
    "azure-code", "Azure LLM inference 2023, code (bursty), 8.8k requests; 2 x H100 Qwen3-14B",
    "azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure", 2))
register_scenario("azure-conv", lambda: _trace(
    "azure-conv", "Azure LLM inference 2023, conversation, 19k requests; 2 x H100 Qwen3-14B",
    "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure", 2))
