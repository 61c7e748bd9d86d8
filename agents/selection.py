"""Model selection by the harness's own metrics (``llmsched-gym train --select``).

SB3's ``EvalCallback`` keeps the model of the evaluation with the highest mean episode
reward in ``best/``. The reward is a proxy (minus a priority-weighted waiting-time
integral); the comparison harness ranks policies by per-class metrics instead (TTFT mean
/ p99, SLO attainment, goodput, ...; ``llmsched_gym.evaluation.metrics.summarize``). The
SB3 adapter (:mod:`agents.sb3`) puts each finished episode's summary into
``infos[i]["episode_metrics"]``; :class:`HarnessSelectionMixin` collects those of the
held-out evaluation episodes and keeps the model whose *median over the evaluation
episodes* (the statistic of ``compare``'s table and of ``tune``'s objective) of the
selected ``METRIC:CLASS`` is best: lower for latencies and counts of failures, higher
for ``slo_attainment``, ``goodput_rps``, ``throughput_rps``, ``output_tokens_per_s``,
``prefix_hit_token_ratio`` and ``finished``. Equal values are broken by the mean reward;
``--select reward`` is SB3's own rule.

An evaluation whose episodes have no value of the metric (the class had no requests)
scores NaN, which ranks below every number (between NaNs the mean reward decides).

Every evaluation is recorded in ``eval/evaluations_metrics.json`` (next to
``evaluations.npz``): timesteps, mean reward, the selected metric per episode and its
median, the medians of the key metrics per class, and whether it became the new best.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmsched_gym.errors import ConfigError

#: Metrics where lower is better (seconds or counts of requests that fared badly).
LOWER_IS_BETTER = (
    "ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99", "ttft_censored",
    "tpot_mean", "tpot_p50", "tpot_p90", "tpot_p99",
    "e2e_mean", "e2e_p50", "e2e_p90", "e2e_p99",
    "rejected", "expired", "dropped", "evicted", "in_flight", "preemptions",
)
#: Metrics where higher is better.
HIGHER_IS_BETTER = ("slo_attainment", "goodput_rps", "throughput_rps", "output_tokens_per_s",
                    "prefix_hit_token_ratio", "finished")
#: Recorded per class at every evaluation (beside the selected metric).
RECORDED = ("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_p99", "throughput_rps", "slo_attainment",
            "goodput_rps")

#: ``--select`` default per environment (docs/agents.md, "Model selection"):
#: Routing has no gateway queue and the harness compares routers on TTFT, class ``all``;
#: FlowControl's studies and the agents page report the critical class, headed by its
#: TTFT p99 (what holding the sheddable band buys); Admission rejects requests, which a
#: latency would reward, so it is SLO attainment over every arrival (rejections are misses);
#: so is Gateway, which admits too.
DEFAULT_SELECT = {
    "llmsched/Routing-v0": "ttft_mean:all",
    "llmsched/FlowControl-v0": "ttft_p99:critical",
    "llmsched/Admission-v0": "slo_attainment:all",
    "llmsched/Gateway-v0": "slo_attainment:all",
}

_CLASS = re.compile(r"^(all|critical(-p[1-9][0-9]*)?|sheddable(-p-[0-9]+)?)$")


@dataclass(frozen=True)
class Selection:
    """``METRIC:CLASS`` (or ``reward``) and its direction."""

    metric: str
    cls: str = "all"
    higher_is_better: bool = True

    @property
    def text(self) -> str:
        return "reward" if self.metric == "reward" else f"{self.metric}:{self.cls}"

    def episode_value(self, metrics: "dict | None") -> float:
        """The metric of one episode's summary (NaN if absent)."""
        try:
            v = float(metrics["classes"][self.cls][self.metric])
        except (KeyError, TypeError, ValueError):
            return math.nan
        return v

    def value(self, episodes: list) -> float:
        """Median over the evaluation episodes (NaN ones left out; all NaN: NaN)."""
        x = np.array([self.episode_value(m) for m in episodes], float)
        x = x[np.isfinite(x)]
        return float(np.median(x)) if len(x) else math.nan

    def key(self, value: float, mean_reward: float) -> tuple:
        """Sort key: larger is better (finite first, then the metric, then the reward)."""
        r = float(mean_reward) if np.isfinite(mean_reward) else -math.inf
        if self.metric == "reward":
            return (True, r, r)
        if not np.isfinite(value):
            return (False, -math.inf, r)
        return (True, value if self.higher_is_better else -value, r)


def parse_select(text: "str | None") -> Selection:
    """``reward`` or ``METRIC[:CLASS]`` (class default ``all``), e.g. ``ttft_p99:critical``."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"--select {text!r} is invalid; give reward or METRIC[:CLASS], e.g. ttft_mean:all")
    t = text.strip()
    if t == "reward":
        return Selection("reward", "all", True)
    metric, _, cls = t.partition(":")
    metric, cls = metric.strip(), (cls.strip() or "all") if _ else "all"
    allowed = LOWER_IS_BETTER + HIGHER_IS_BETTER
    if metric not in allowed:
        raise ConfigError(f"--select {text!r}: unknown metric {metric!r}; choose reward or one of {', '.join(allowed)}")
    if not _CLASS.match(cls):
        raise ConfigError(f"--select {text!r}: unknown class {cls!r}; use all, critical, sheddable "
                          "(or critical-pN / sheddable-p-N for other priority bands)")
    return Selection(metric, cls, metric in HIGHER_IS_BETTER)


def default_select(env_id: str) -> str:
    return DEFAULT_SELECT.get(env_id, "reward")


def _num(x: float):
    return float(x) if np.isfinite(x) else None  # JSON: null for NaN/inf


class HarnessSelectionMixin:
    """Put before an ``EvalCallback`` class: the best model by a harness metric.

    The parent evaluates and logs as usual (``evaluations.npz``); the mixin hides
    ``best_model_save_path`` / ``callback_on_new_best`` from it during an evaluation and
    itself saves ``best_model.zip`` and triggers ``callback_on_new_best``
    (:class:`agents.vec.SaveBestStats`) when the evaluation's key beats the best one.
    ``best_mean_reward`` then is the mean reward of the selected model."""

    def __init__(self, *args, select: "str | Selection" = "reward", evaluate_start: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.evaluate_start = evaluate_start
        self.selection = parse_select(select) if isinstance(select, str) else select
        self._episode_metrics: list = []
        self.evaluations_metrics: list[dict] = []
        self.best_key: "tuple | None" = None
        self.best_evaluation: "dict | None" = None
        self._best_reward = -np.inf

    @property
    def metrics_path(self) -> "Path | None":
        return None if self.log_path is None else Path(self.log_path).parent / "evaluations_metrics.json"

    def _log_success_callback(self, locals_, globals_) -> None:
        super()._log_success_callback(locals_, globals_)
        if locals_["done"]:
            self._episode_metrics.append(locals_["info"].get("episode_metrics"))

    def _on_training_start(self) -> None:
        """With ``evaluate_start`` (a policy that starts at a baseline: ``--policy
        residual``), evaluate the untrained policy first (timestep 0), so that ``best/``
        never ranks below that baseline on the selection episodes."""
        super()._on_training_start()
        if self.evaluate_start and self.eval_freq > 0:
            self._on_step()  # n_calls is 0: an evaluation step

    def _on_step(self) -> bool:
        if not (self.eval_freq > 0 and self.n_calls % self.eval_freq == 0):
            return super()._on_step()
        self._episode_metrics = []
        save_path, on_best = self.best_model_save_path, self.callback_on_new_best
        self.best_model_save_path, self.callback_on_new_best = None, None
        self.best_mean_reward = np.inf  # the parent never finds a new best; select() decides
        try:
            cont = super()._on_step()
        finally:
            self.best_model_save_path, self.callback_on_new_best = save_path, on_best
            self.best_mean_reward = self._best_reward
        return self.select(self._episode_metrics, self.last_mean_reward) and cont

    def select(self, episodes: list, mean_reward: float) -> bool:
        """Record one evaluation (its episodes' summaries and mean reward); save the model
        and run ``callback_on_new_best`` if it is the best so far. Returns whether to go on."""
        sel = self.selection
        if sel.metric != "reward" and episodes and all(m is None for m in episodes):
            raise ConfigError(f"--select {sel.text}: the evaluation episodes carry no harness metrics "
                              "(infos['episode_metrics'], given by agents.sb3); use --select reward")
        value = float(mean_reward) if sel.metric == "reward" else sel.value(episodes)
        key = sel.key(value, mean_reward)
        new_best = self.best_key is None or key > self.best_key
        rec = {"timesteps": int(self.num_timesteps), "mean_reward": _num(float(mean_reward)), "select": sel.text,
               "value": _num(value), "episodes": [_num(sel.episode_value(m)) for m in episodes]
               if sel.metric != "reward" else [], "new_best": bool(new_best), "classes": {}}
        classes = sorted({c for m in episodes if m for c in m.get("classes", {})})
        for c in classes:
            rec["classes"][c] = {k: _num(Selection(k, c).value(episodes)) for k in RECORDED}
        self.evaluations_metrics.append(rec)
        if self.verbose >= 1:
            print(f"Eval num_timesteps={self.num_timesteps}, {sel.text}={value:.6g}"
                  + (" (new best)" if new_best else ""))
        if sel.metric != "reward" and getattr(self, "model", None) is not None:
            self.logger.record(f"eval/{sel.metric}_{sel.cls}", value)
        cont = True
        if new_best:
            self.best_key = key
            self._best_reward = self.best_mean_reward = float(mean_reward)
            self.best_evaluation = rec
            if self.best_model_save_path is not None:
                self.model.save(os.path.join(self.best_model_save_path, "best_model"))
            if self.callback_on_new_best is not None:
                cont = bool(self.callback_on_new_best.on_step())
        if self.metrics_path is not None:
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
            self.metrics_path.write_text(json.dumps({"select": sel.text, "higher_is_better": sel.higher_is_better,
                                                     "evaluations": self.evaluations_metrics}, indent=1))
        return cont

    def best_metric(self) -> "dict | None":
        """What ``agent.json`` records of the selected best model."""
        b = self.best_evaluation
        if b is None:
            return None
        return {"select": b["select"], "higher_is_better": self.selection.higher_is_better, "value": b["value"],
                "timesteps": b["timesteps"], "mean_reward": b["mean_reward"], "statistic": "median over episodes"}


def eval_callback_class(maskable: bool):
    """The EvalCallback (``MaskableEvalCallback`` for MaskablePPO) with harness selection."""
    if maskable:
        from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback as Base
    else:
        from stable_baselines3.common.callbacks import EvalCallback as Base

    return type(f"Harness{Base.__name__}", (HarnessSelectionMixin, Base), {"__module__": __name__})
