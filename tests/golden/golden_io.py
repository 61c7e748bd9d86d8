"""Reading and writing the golden files (shared by ``record.py`` and ``tests/test_golden.py``).

A golden file stores everything a run needs, so that later edits of the built-in
scenarios, the synthetic generator or the trace loaders cannot change what is replayed:

* the workload's arrays (``wl.*``) and its SLO dicts (JSON in ``meta``);
* per run ``k``: the cluster and gateway configs (JSON in ``meta``, policies as spec
  strings), seed and horizon, and the per-request records of ``sim.table``
  (``run{k}.instance``, ...) plus ``sim.now`` (``run{k}.now``).

Environment golden files (``env_*.npz``) store the workloads the episodes used, keyed by
workload seed, the scenario's cluster/gateway, the environment's keywords, the actions
taken and what came back (observations per key, rewards, terminated/truncated, a few
info fields).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from llmsched_gym import ClusterConfig, EngineConfig, GatewayConfig, Scenario, Simulator, Workload

DATA = Path(__file__).resolve().parent / "data"

#: Per-request records compared exactly (``sim.table`` attributes).
RECORD_FIELDS = ("instance", "dispatch_t", "first_token_t", "finish_t", "end_t", "outcome",
                 "prefix_hit", "preemptions", "generated")

_WL_ARRAYS = ("arrival_s", "input_tokens", "output_tokens", "priority", "hash_ids", "hash_offsets",
              "session_id", "prefix_group")


# ============================================================================ workloads
def workload_arrays(w: Workload, prefix: str = "wl.") -> tuple[dict, dict]:
    """(arrays, json-able metadata) of a workload."""
    arrays = {prefix + k: np.asarray(getattr(w, k)) for k in _WL_ARRAYS}
    meta = {"hash_block_tokens": int(w.hash_block_tokens), "name": str(w.name),
            "slo_ttft_s": {str(int(k)): float(v) for k, v in w.slo_ttft_s.items()},
            "slo_tpot_s": {str(int(k)): float(v) for k, v in w.slo_tpot_s.items()}}
    return arrays, meta


def workload_from(npz, meta: dict, prefix: str = "wl.") -> Workload:
    """Rebuild a workload stored by :func:`workload_arrays`."""
    return Workload(
        arrival_s=npz[prefix + "arrival_s"], input_tokens=npz[prefix + "input_tokens"],
        output_tokens=npz[prefix + "output_tokens"], priority=npz[prefix + "priority"],
        hash_ids=npz[prefix + "hash_ids"], hash_offsets=npz[prefix + "hash_offsets"],
        hash_block_tokens=int(meta["hash_block_tokens"]), session_id=npz[prefix + "session_id"],
        prefix_group=npz[prefix + "prefix_group"],
        slo_ttft_s={int(k): float(v) for k, v in meta["slo_ttft_s"].items()},
        slo_tpot_s={int(k): float(v) for k, v in meta["slo_tpot_s"].items()},
        name=meta["name"],
    )


# ============================================================================ configs
def _check_specs(g: GatewayConfig) -> None:
    for k in ("router", "admission", "flow_control"):
        v = getattr(g, k)
        if v is not None and not isinstance(v, str):
            raise TypeError(f"golden cases must name policies by spec string; gateway.{k}={v!r}")


def cluster_json(c: ClusterConfig) -> dict:
    return asdict(c)


def gateway_json(g: GatewayConfig) -> dict:
    _check_specs(g)
    return asdict(g)


def cluster_from(d: dict) -> ClusterConfig:
    d = dict(d)
    # Recorded before the engine had an eviction option: the order it used then.
    d["engine"] = EngineConfig(**{"eviction": "cached-last", **d["engine"]})
    d["latency_params"] = dict(d["latency_params"])
    return ClusterConfig(**d)


def gateway_from(d: dict) -> GatewayConfig:
    return GatewayConfig(**d)


# ============================================================================ runs
def records(sim: Simulator) -> dict[str, np.ndarray]:
    """The per-request records of a finished run, plus ``now`` (0-d)."""
    t = sim.table
    out = {k: np.array(getattr(t, k), copy=True) for k in RECORD_FIELDS}
    out["now"] = np.array(float(sim.now))
    return out


def run_case(workload: Workload, run: dict) -> Simulator:
    """Run one stored run (``run`` = its metadata: cluster, gateway, seed, horizon_s)."""
    return Simulator(workload, cluster_from(run["cluster"]), gateway_from(run["gateway"]),
                     seed=int(run["seed"]), horizon_s=run["horizon_s"]).run()


def save(path: Path, arrays: dict, meta: dict) -> None:
    arrays = dict(arrays)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    np.savez_compressed(path, **arrays)


def load(path: Path) -> tuple[dict, dict]:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, json.loads(str(arrays.pop("meta")))


# ============================================================================ env scenarios
class _Shared(dict):
    """A dict that deep copies to itself (scenarios are deep-copied by make_scenario)."""

    def __deepcopy__(self, memo):
        return self


@dataclass
class RecordingScenario(Scenario):
    """A scenario that remembers every workload it builds, keyed by seed."""

    built: dict | None = None

    def build_workload(self, seed: int = 0) -> Workload:
        w = super().build_workload(seed)
        self.built[int(seed)] = w.subset(slice(None))
        return w

    @classmethod
    def wrap(cls, sc: Scenario) -> "RecordingScenario":
        return cls(**{f.name: getattr(sc, f.name) for f in fields(Scenario)}, built=_Shared())


@dataclass
class FrozenScenario(Scenario):
    """A scenario replaying stored workloads by seed (no generator involved)."""

    frozen: dict | None = None

    def build_workload(self, seed: int = 0) -> Workload:
        if int(seed) not in self.frozen:
            raise KeyError(f"no stored workload for workload seed {seed} (stored: {sorted(self.frozen)})")
        return self.frozen[int(seed)].subset(slice(None))


def frozen_scenario(arrays: dict, meta: dict) -> FrozenScenario:
    """The scenario of an env golden file: its cluster, gateway and stored workloads.

    ``workload=[]`` (no specs) makes the environments take their priority bands from
    ``build_workload(0)``, which is stored for that reason.
    """
    wls = {int(s): workload_from(arrays, m, prefix=f"wl{s}.") for s, m in meta["workloads"].items()}
    return FrozenScenario(name=meta["scenario"], description="frozen golden workloads",
                          cluster=cluster_from(meta["cluster"]), workload=[],
                          gateway=gateway_from(meta["gateway"]), horizon_s=None, frozen=_Shared(wls))


# ============================================================================ env episodes
#: Info fields kept per frame (those an environment provides).
INFO_KEYS = ("sim_time", "arrivals", "open_requests", "episode_cost", "action_mask", "ceilings", "rejection_prob")


def draw_action(space, mask, rng: np.random.Generator):
    """A random action: a uniformly drawn valid instance (Discrete), else uniform in the Box."""
    if hasattr(space, "n"):
        valid = np.flatnonzero(np.ones(space.n, bool) if mask is None else mask)
        return np.int64(rng.choice(valid))
    return rng.uniform(space.low, space.high).astype(space.dtype)


def _stack_frames(frames: list[tuple[dict, dict]], prefix_obs="obs.", prefix_info="info.") -> dict:
    out = {}
    for k in frames[0][0]:
        out[prefix_obs + k] = np.stack([np.asarray(o[k]) for o, _ in frames])
    for k in INFO_KEYS:
        if k in frames[0][1]:
            out[prefix_info + k] = np.stack([np.asarray(i[k]) for _, i in frames])
    return out


def play_single(env, steps: int, seed: int, actions=None, rng=None) -> dict:
    """Play ``steps`` steps from ``reset(seed)``, resetting (unseeded) after each episode.

    Actions come from ``actions[s]`` (a replay) or are drawn with ``rng``. Frames are the
    observations returned by every reset and step, in order (``frame_kind`` 0 = reset,
    1 = step; ``frame_step`` = the step they follow, -1 for the first reset).
    """
    obs, info = env.reset(seed=seed)
    frames, kind, at = [(obs, info)], [0], [-1]
    acts, rew, term, trunc, returns = [], [], [], [], []
    for s in range(steps):
        a = actions[s] if actions is not None else draw_action(env.action_space, info.get("action_mask"), rng)
        acts.append(np.asarray(a))
        obs, r, te, tr, info = env.step(a)
        frames.append((obs, info))
        kind.append(1)
        at.append(s)
        rew.append(r)
        term.append(te)
        trunc.append(tr)
        if te or tr:
            returns.append(info["episode"]["return"])
            obs, info = env.reset()
            frames.append((obs, info))
            kind.append(0)
            at.append(s)
    out = _stack_frames(frames)
    out.update({"frame_kind": np.array(kind, np.int8), "frame_step": np.array(at, np.int64),
                "actions": np.stack(acts), "rewards": np.array(rew, np.float64),
                "terminated": np.array(term, bool), "truncated": np.array(trunc, bool),
                "episode_returns": np.array(returns, np.float64)})
    return out


def play_vector(venv, steps: int, seed: int, actions=None, rng=None) -> dict:
    """Same for a native vector env (``SAME_STEP`` autoreset): frames are ``(steps+1, n, ...)``;
    the final observations of ended episodes are ``final.*`` rows at ``final_at`` (step, env)."""
    n = venv.num_envs
    obs, info = venv.reset(seed=seed)
    frames = [(obs, info)]
    acts, rew, term, trunc, finals, final_at, returns = [], [], [], [], [], [], []
    space = venv.single_action_space
    for s in range(steps):
        if actions is not None:
            a = actions[s]
        else:
            masks = venv.action_masks() if hasattr(space, "n") else [None] * n
            a = np.stack([draw_action(space, masks[i], rng) for i in range(n)])
        acts.append(np.asarray(a))
        obs, r, te, tr, info = venv.step(a)
        frames.append((obs, info))
        rew.append(r)
        term.append(te)
        trunc.append(tr)
        if "final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                finals.append(info["final_obs"][i])
                final_at.append((s, i))
                returns.append(info["final_info"]["episode"]["return"][i])
    out = _stack_frames(frames)
    out.update({"actions": np.stack(acts), "rewards": np.stack(rew).astype(np.float64),
                "terminated": np.stack(term), "truncated": np.stack(trunc),
                "final_at": np.array(final_at, np.int64).reshape(-1, 2),
                "episode_returns": np.array(returns, np.float64)})
    for k in obs:
        out["final." + k] = (np.stack([f[k] for f in finals]) if finals
                             else np.zeros((0, *obs[k].shape[1:]), np.float32))
    return out


def make_env(meta: dict, scenario):
    """The environment of an env golden file, built on ``scenario``."""
    import gymnasium as gym

    kwargs = dict(meta["env_kwargs"])
    if meta["num_envs"]:
        return gym.make_vec(meta["env_id"], num_envs=int(meta["num_envs"]), scenario=scenario, **kwargs)
    return gym.make(meta["env_id"], scenario=scenario, **kwargs)


def play(env, meta: dict, actions=None, rng=None) -> dict:
    f = play_vector if meta["num_envs"] else play_single
    return f(env, int(meta["steps"]), int(meta["seed"]), actions=actions, rng=rng)
