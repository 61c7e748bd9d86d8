"""Studies of trained agents reported as one: the same models evaluated on disjoint seeds,
or disjoint training seeds evaluated on the same seeds (``benchmarks/studies/train_agents.py
pool``)."""

from __future__ import annotations

from llmsched_gym.errors import ConfigError


def pool_studies(rs: list[dict]) -> dict:
    """Studies of one configuration (saved by ``benchmarks/studies/train_agents.py``: ``study``,
    ``config``, ``train_seeds``, ``eval_seeds``, ``rows``) as one study (the first study's
    configuration): either the same models on disjoint evaluation seeds (all seeds pooled),
    or disjoint training seeds on the same evaluation seeds (all models pooled, the
    baselines' rows once)."""
    name = "+".join(r["study"] for r in rs)
    for r in rs[1:]:
        if r["config"].get("prefix") != rs[0]["config"].get("prefix") \
                or r["config"].get("model") != rs[0]["config"].get("model"):
            raise ConfigError(f"{r['study']} evaluated other models than {rs[0]['study']}")
    train = [s for r in rs for s in r["train_seeds"]]
    seeds = [s for r in rs for s in r["eval_seeds"]]
    if all(r["train_seeds"] == rs[0]["train_seeds"] for r in rs):
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"the studies share evaluation seeds ({seeds})")
        return {**rs[0], "study": name, "eval_seeds": seeds, "rows": [row for r in rs for row in r["rows"]]}
    if not all(r["eval_seeds"] == rs[0]["eval_seeds"] for r in rs) or len(set(train)) != len(train):
        raise ConfigError("the studies must share their training seeds (pooling evaluation seeds) or their "
                          f"evaluation seeds (pooling disjoint training seeds); got training seeds {train}, "
                          f"evaluation seeds {seeds}")
    agents = [row for r in rs for row in r["rows"] if row["policy"].startswith("agent-s")]
    base = [row for row in rs[0]["rows"] if not row["policy"].startswith("agent-s")]
    return {**rs[0], "study": name, "train_seeds": train, "rows": base + agents}
