"""Documentation shared by the environments (spliced into their docstrings)."""

from .core import OBS_DOC

REWARDS_DOC = """\
    ``reward="ttft"`` (default): minus the priority-weighted time-integral of the number
    of requests waiting for their first token since the previous step, in
    weighted-request-seconds (times ``reward_scale``, default 1). An episode's return is
    therefore ``-sum_r w_r * T_r`` over the requests that arrived, where ``T_r`` is the
    request's TTFT; a request that leaves without a first token (rejected: at arrival,
    expired: after the gateway TTL, dropped: at dispatch) counts its time in the system
    plus ``unserved_penalty_s`` (default: the gateway TTL, 60 s), and one still waiting
    at truncation counts its wait up to the horizon (censored). Weights ``w_r`` default to
    ``2**priority`` clipped to [1/16, 16] (critical 1, sheddable 0.5); override with
    ``priority_weights={priority: weight}``. ``llmsched_gym.envs.episode_cost(sim, setup)``
    is the closed form. ``reward="e2e"``: the same with completion instead of first
    token. ``reward="slo"``: ``-w_r`` per request that misses its class's TTFT or TPOT
    SLO or is unserved, charged as soon as the miss is known."""

ARGS_DOC = """\
    ``gymnasium.make(id, **kwargs)`` (also ``gymnasium.make_vec(id, num_envs=N, **kwargs)``,
    which uses the native vector environment):

    ======================  =================  ======================================================
    keyword                 default            meaning
    ======================  =================  ======================================================
    ``scenario``            ``"codegen"``      registered name, ``Scenario`` or YAML path; the default
                                               runs codegen (2 x H100) at ``qps=12``
    ``qps``/``load``/...    scenario's         scenario overrides (``qps``, ``load``, ``paper_qps``,
                                               ``instances``, ``duration_s``, ``num_requests``,
                                               ``hardware``, ``model``, ``kv_blocks``, ...)
    ``horizon``             ``60.0``           episode length in simulated seconds (truncation);
                                               ``None`` runs until the workload drains
    ``reward``              ``"ttft"``         ``ttft``, ``e2e`` or ``slo`` (see Rewards)
    ``reward_scale``        ``1.0``            multiplies every reward
    ``unserved_penalty_s``  gateway TTL        extra cost (s) of a request never served
    ``priority_weights``    ``2**priority``    ``{priority: weight}``
    ``observation``         ``{}``             ``{"normalize": bool, "exclude": [keys]}``
    ======================  =================  ======================================================

    ``reset(seed=s)`` seeds the env's generator; each reset draws a workload seed from it
    (episodes differ but are reproducible). ``reset(options={"workload_seed": n})``
    builds exactly ``scenario.simulator(n)`` (the workload and gateway rng of
    ``llmsched-gym run --seed n``). ``env.unwrapped.simulator`` is the episode's
    simulator; ``info`` carries ``sim_time``, ``arrivals``, ``open_requests`` (requests
    whose reward cost can still grow) and ``episode_cost``, and at the episode's end
    ``episode`` (return, length, workload seed and ``metrics.summarize`` of the run).
    Bad actions (wrong shape or type, NaN, out of range) raise ``ValueError``."""

OBSERVATION_DOC = OBS_DOC


def fill(doc: str, **parts: str) -> str:
    for k, v in parts.items():
        doc = doc.replace("<<" + k + ">>", v)
    return doc
