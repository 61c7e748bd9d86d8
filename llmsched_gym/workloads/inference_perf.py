"""inference-perf's shared-prefix benchmark as a workload (docs/validation.md, "inference-perf profiles").

An :class:`InferencePerfProfile` is what an inference-perf run is configured with
(``data.shared_prefix`` and ``load``) and :meth:`InferencePerfProfile.generate` builds
the requests that client sends, following kubernetes-sigs/inference-perf's source as of
v0.4.0 (February 2026, the client of the measured vLLM v0.15.1 runs):

* **Prompt pool** (``datagen/shared_prefix_datagen.py``): ``num_groups`` system prompts of
  ``system_prompt_len`` random tokens, and per group ``prompts_per_group`` questions of
  ``question_len`` tokens: G x U distinct prompts, generated once. The n-th request of a
  stage uses pool entry ``n mod (G x U)`` (``load_lazy_data``), and every stage restarts
  at entry 0 (``run_stage`` calls ``get_data()`` anew). So prompts *repeat*: after the
  first G x U requests every prompt was seen before, and with vLLM's prefix cache all its
  full blocks hit. Single-turn pools are shuffled once (prompts with their output lengths).
* **Multi-turn flag**: with ``enable_multi_turn_chat`` the question is sent after a user
  session's context (first the group's system prompt) and the context would grow with
  each answer. In v0.4.0 every request carried a pydantic *copy* of its session
  (inference-perf PR #443, "Loss of locking sharing: Pydantic copied LocalUserSession
  objects across process boundaries", fixed in April 2026), so the context never grew and
  rounds were not serialized: a request's prompt is still one system prompt + one
  question, open loop. Only the pairing differs: question ``j`` (pool order, unshuffled)
  follows the system prompt of session ``sigma(j)`` (sessions shuffled). This is what
  ``multi_turn=True`` generates; the prefix sharing (U prompts per system prompt, G x U
  distinct prompts) is the same either way.
* **Arrivals** (``loadgen/load_timer.py``): a stage sends ``int(rate x duration)`` requests.
  ``constant``: exponential gaps rescaled to sum to the duration (so the last request is
  sent at the stage's end); ``poisson``: a Poisson count per second, spread the same way
  within the second. Stages run back to back, ``stage_gap_s`` apart (inference-perf's
  ``load.interval``, 1 s); inference-perf also waits for a stage to drain before the
  next, which an open-loop arrival table cannot know: that drain (seconds) is left out.
* **Lengths**: the nominal token counts (system prompt + question; ``output_len`` with
  ``ignore_eos``). inference-perf decodes the random token ids to text and the server
  re-tokenizes it, which changes counts by a few percent; that is not modelled.

Prefix structure: hash blocks of ``block_tokens`` (the engine's KV block size): the
blocks wholly inside the system prompt are shared by its group; every later block is
unique to its (system prompt, question) prompt, and shared by its repeats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from .workload import Workload

LOAD_TYPES = ("constant", "poisson")
_FIELDS = ("num_groups", "prompts_per_group", "system_prompt_len", "question_len", "output_len", "stages",
           "load_type", "multi_turn", "stage_gap_s", "block_tokens", "name", "seed")
#: inference-perf's spellings of the data fields (``SharedPrefix`` aliases) and ours.
_ALIASES = {"num_unique_system_prompts": "num_groups", "num_users_per_system_prompt": "prompts_per_group",
            "num_prompts_per_group": "prompts_per_group", "enable_multi_turn_chat": "multi_turn"}


def _pos_int(path: str, v, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ConfigError(f"{path}={v!r} is invalid; it must be an integer >= {lo}")
    return int(v)


def _pos_num(path: str, v, lo: float = 0.0, strict: bool = True) -> float:
    ok = isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) and np.isfinite(v)
    if not ok or (v <= lo if strict else v < lo):
        raise ConfigError(f"{path}={v!r} is invalid; it must be a finite number {'>' if strict else '>='} {lo}")
    return float(v)


@dataclass
class InferencePerfProfile:
    """One inference-perf shared-prefix run (see the module docstring for the semantics).

    Args:
        num_groups: distinct system prompts (``num_unique_system_prompts``).
        prompts_per_group: questions per system prompt (``num_users_per_system_prompt``).
        system_prompt_len, question_len, output_len: tokens.
        stages: ``[(rate req/s, duration s), ...]`` run in order.
        load_type: ``constant`` or ``poisson``.
        multi_turn: inference-perf's ``enable_multi_turn_chat`` (v0.4.0 pairing; see above).
        stage_gap_s: seconds between a stage's end and the next one's start.
        block_tokens: tokens per prefix hash block (the engine's KV block size).
        name: label for reports.
        seed: the client's own randomness (shuffles, gaps); None: the run's seed.
    """

    num_groups: int
    prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int
    stages: list = field(default_factory=list)
    load_type: str = "constant"
    multi_turn: bool = False
    stage_gap_s: float = 1.0
    block_tokens: int = 16
    name: str = "inference-perf"
    seed: int | None = None

    def __post_init__(self) -> None:
        self.stages = [tuple(s) if not isinstance(s, dict) else (s.get("rate"), s.get("duration", s.get("duration_s")))
                       for s in self.stages]
        self.validate()

    def validate(self, path: str = "inference_perf") -> None:
        """Check every field; raise a one-line ConfigError naming the bad one."""
        for f in ("num_groups", "prompts_per_group", "question_len", "output_len", "block_tokens"):
            setattr(self, f, _pos_int(f"{path}.{f}", getattr(self, f)))
        self.system_prompt_len = _pos_int(f"{path}.system_prompt_len", self.system_prompt_len, lo=0)
        if self.load_type not in LOAD_TYPES:
            raise ConfigError(f"{path}.load_type={self.load_type!r} is not known; allowed: {', '.join(LOAD_TYPES)}")
        if not isinstance(self.multi_turn, bool):
            raise ConfigError(f"{path}.multi_turn={self.multi_turn!r} is invalid; it must be true or false")
        self.stage_gap_s = _pos_num(f"{path}.stage_gap_s", self.stage_gap_s, strict=False)
        if not self.stages:
            raise ConfigError(f"{path}.stages is empty; give at least one {{rate, duration}}")
        for k, st in enumerate(self.stages):
            if len(st) != 2:
                raise ConfigError(f"{path}.stages[{k}]={st!r} is invalid; it must be (rate, duration)")
            rate = _pos_num(f"{path}.stages[{k}].rate", st[0])
            dur = _pos_num(f"{path}.stages[{k}].duration", st[1])
            if int(rate * dur) < 1:
                raise ConfigError(f"{path}.stages[{k}]: rate x duration = {rate * dur:g} < 1 request")
            self.stages[k] = (rate, dur)

    # ------------------------------------------------------------------ reading
    @classmethod
    def from_dict(cls, d: dict, path: str = "inference_perf") -> "InferencePerfProfile":
        """From our flat fields, or from an inference-perf config as is: ``{data: {type:
        shared_prefix, shared_prefix: {...}}, load: {type, stages: [{rate, duration}],
        interval}}`` (its field names and aliases)."""
        if not isinstance(d, dict):
            raise ConfigError(f"{path} must be a mapping, got {type(d).__name__}")
        if "data" in d or "load" in d:
            return cls.from_dict(_flatten_inference_perf(d, path), path)
        d = {_ALIASES.get(k, k): v for k, v in d.items()}
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {unknown}; allowed: {', '.join(_FIELDS)}")
        missing = [f for f in _FIELDS[:6] if f not in d]
        if missing:
            raise ConfigError(f"{path}: missing field(s) {missing}")
        return cls(**d)

    def to_dict(self) -> dict:
        return {"num_groups": self.num_groups, "prompts_per_group": self.prompts_per_group,
                "system_prompt_len": self.system_prompt_len, "question_len": self.question_len,
                "output_len": self.output_len, "stages": [{"rate": r, "duration": t} for r, t in self.stages],
                "load_type": self.load_type, "multi_turn": self.multi_turn, "stage_gap_s": self.stage_gap_s,
                "block_tokens": self.block_tokens, "name": self.name, "seed": self.seed}

    # ------------------------------------------------------------------ shape
    @property
    def pool_size(self) -> int:
        """Distinct prompts (G x U)."""
        return self.num_groups * self.prompts_per_group

    def stage_counts(self) -> list[int]:
        """Requests per stage: ``int(rate x duration)`` as inference-perf computes it."""
        return [int(r * t) for r, t in self.stages]

    def stage_windows(self) -> list[tuple[float, float]]:
        """Nominal (start, end) of each stage, seconds from the run's start (a Poisson stage
        may end a little before or after: see :meth:`stage_bounds`)."""
        out, t0 = [], 0.0
        for _, dur in self.stages:
            out.append((t0, t0 + dur))
            t0 += dur + self.stage_gap_s
        return out

    def stage_bounds(self, arrival_s: np.ndarray) -> list[tuple[float, float]]:
        """Arrival-time windows of the stages of a workload this profile generated: stage k
        holds requests ``[c_k, c_k+1)`` (its ``int(rate x duration)``), from its first
        arrival to the next stage's first (the last window closed at the last arrival)."""
        cuts = np.concatenate([[0], np.cumsum(self.stage_counts())])
        if cuts[-1] != len(arrival_s):
            raise ConfigError(f"stage_bounds: {len(arrival_s)} arrivals, but the stages send {cuts[-1]}")
        starts = [float(arrival_s[c]) for c in cuts[:-1]]
        return [(starts[k], starts[k + 1] if k + 1 < len(starts) else float(arrival_s[-1]))
                for k in range(len(starts))]

    @property
    def mean_rate(self) -> float:
        """Requests per second of sending time (the stages' weighted rate)."""
        return sum(self.stage_counts()) / sum(t for _, t in self.stages)

    def scaled(self, factor: float) -> "InferencePerfProfile":
        """A copy with every stage's rate multiplied by ``factor``."""
        d = self.to_dict()
        d["stages"] = [{"rate": r * factor, "duration": t} for r, t in self.stages]
        return InferencePerfProfile.from_dict(d)

    # ------------------------------------------------------------------ requests
    def _arrivals(self, rng: np.random.Generator) -> np.ndarray:
        parts, t0 = [], 0.0
        for rate, dur in self.stages:
            n = int(rate * dur)
            if self.load_type == "constant":
                gaps = rng.exponential(1.0 / rate, n)
                parts.append(np.minimum(t0 + np.cumsum(gaps * (dur / gaps.sum())), t0 + dur))
            else:  # per second, a Poisson count spread like a constant stage of that second
                times, sec = [], 0
                while sum(len(x) for x in times) < n:
                    k = int(rng.poisson(rate))
                    if k:
                        gaps = rng.exponential(1.0 / k, k)
                        times.append(t0 + sec + np.cumsum(gaps / gaps.sum()))
                    sec += 1
                parts.append(np.concatenate(times)[:n])
            t0 = max(t0 + dur, float(parts[-1][-1])) + self.stage_gap_s  # stages never overlap
        return np.concatenate(parts)

    def _pool(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(system-prompt group, question id) of each pool entry, in the order requests
        take them."""
        U = self.prompts_per_group
        question = np.arange(self.pool_size)
        if self.multi_turn:  # questions in order; each follows a shuffled session's system prompt
            session = rng.permutation(self.pool_size)
            return session // U, question
        order = rng.permutation(self.pool_size)  # prompts shuffled (with their output lengths)
        return order // U, order

    def generate(self, seed: int = 0) -> Workload:
        """The requests of this run (same seed, same requests)."""
        rng = np.random.default_rng(self.seed if self.seed is not None else seed)
        group_of, question_of = self._pool(rng)
        arrival = self._arrivals(rng)
        entry = np.concatenate([np.arange(n) % self.pool_size for n in self.stage_counts()])
        B, S, Q = self.block_tokens, self.system_prompt_len, self.question_len
        inp = S + Q
        nblocks = -(-inp // B)  # every block of the prompt, the partial last one included
        shared = S // B  # blocks wholly inside the system prompt
        k = np.arange(nblocks)
        # chain ids: a shared block by (group, k); a later one by (group, question, k)
        G = self.num_groups
        chains = np.where(k < shared, group_of[:, None] * nblocks + k,
                          G * nblocks + (group_of[:, None] * self.pool_size + question_of[:, None]) * nblocks + k)
        ids = chains[entry].reshape(-1).astype(np.int64)
        n = len(entry)
        offsets = np.arange(n + 1, dtype=np.int64) * nblocks
        return Workload(arrival, np.full(n, inp), np.full(n, self.output_len), hash_ids=ids, hash_offsets=offsets,
                        hash_block_tokens=B, prefix_group=group_of[entry], name=self.name)


def _flatten_inference_perf(d: dict, path: str) -> dict:
    """Our fields from an inference-perf config (``data`` + ``load`` sections)."""
    data, load = d.get("data") or {}, d.get("load") or {}
    if data.get("type", "shared_prefix") != "shared_prefix":
        raise ConfigError(f"{path}.data.type={data.get('type')!r} is not supported; allowed: shared_prefix")
    sp = data.get("shared_prefix")
    if not isinstance(sp, dict):
        raise ConfigError(f"{path}.data.shared_prefix is missing")
    out = {_ALIASES.get(k, k): v for k, v in sp.items()}
    out["stages"] = [{"rate": s.get("rate"), "duration": s.get("duration")} for s in load.get("stages") or []]
    out["load_type"] = str(load.get("type", "constant")).lower()
    if "interval" in load:
        out["stage_gap_s"] = load["interval"]
    for k in ("name", "seed", "block_tokens"):
        if k in d:
            out[k] = d[k]
    return out
