"""``llmsched-gym train``: train an RL agent (stable-baselines3 / sb3-contrib).

Registered with the CLI through the ``llmsched_gym.commands`` entry point group, so the
simulator package does not import the agents.

The training code lives in :mod:`agents.train` (a readable, CleanRL-style script;
``python -m agents.train`` takes the same arguments); hyperparameters in
``agents/hyperparams/<env>.yaml``. A trained model is a policy like any baseline:
``llmsched-gym compare --policies 'jsq;lmetric;agent:OUT'`` (FlowControl models:
``fc=agent:OUT``).
"""

from __future__ import annotations

from agents.train import add_arguments, run_from_args
from llmsched_gym.validation import require_extra

_TRAIN_HELP = """\
Train an agent on a native vector environment through the SB3 adapter, with
VecNormalize (statistics saved next to the model), EvalCallback on held-out workload
seeds, TensorBoard logs (OUT/tb) and checkpoints (OUT/checkpoints).

Examples:
  llmsched-gym train --env llmsched/Routing-v0 --scenario chatbot --algo maskable-ppo \\
      --load 0.5 --timesteps 100000 --seed 1 --out runs/routing-chatbot
  llmsched-gym train --env llmsched/FlowControl-v0 --scenario codegen --algo sac \\
      --paper-qps 16 --timesteps 30000 --out runs/fc-codegen
  # curriculum / generalization: a mixture of scenarios and a load range,
  # evaluated (EvalCallback) on a held-out scenario and loads
  llmsched-gym train --scenario chatbot,agent --load 0.3:0.7:3 \\
      --eval-scenario coder --eval-rates 0.5,0.8 --timesteps 200000 --out runs/mix

  # residual policy: LMetric's logits + a learned correction that starts at zero
  llmsched-gym train --scenario chatbot --load 0.5 --policy residual \\
      --timesteps 60000 --out runs/residual
  # FlowControl residual: the soft-reflective ceiling + a learned ramp/period adjustment
  # (one decision per second on full 180 s episodes, critical weighted 150x; about 4 min)
  llmsched-gym train --env llmsched/FlowControl-v0 --scenario codegen --algo ppo \\
      --policy residual --paper-qps 16 --timesteps 200000 --out runs/fc-residual
  # Gateway residual: admission + routing factors, starting at lmetric + always-admit
  llmsched-gym train --env llmsched/Gateway-v0 --scenario codegen --paper-qps 16 --policy residual \\
      --env-set admission_action=rejection --env-set flow_action=none --timesteps 200000 \\
      --select reward --out runs/gateway-codegen

  # evolution strategies: CMA-ES over 9 numbers correcting LMetric, every candidate on the
  # same workload seeds (training seeds 0-99 only); OUT/agent.json is the agent
  llmsched-gym train --env llmsched/Routing-v0 --scenario toolagent --algo cmaes --env-set horizon=10 \\
      --generations 30 --popsize 10 --seeds-per-gen 4 --seed 1 --out runs/es-toolagent

  # imitation of the lookahead planner: behaviour cloning, then DAgger rounds
  # (labels from workload seeds 0-99 only; agents/imitation, docs/agents.md)
  llmsched-gym train --algo dagger --scenario agent --env-set horizon=8 \\
      --teacher 'lookahead:mode=mpc,samples=2,horizon_s=1,base=preble' \\
      --n-envs 4 --set episodes=1 --set rounds=2 --out runs/imit-agent
  (--algo bc|dagger writes OUT/model.zip, OUT/labels.npz and OUT/agent.json only.)

Output: OUT/model.zip, OUT/vecnormalize.pkl, OUT/agent.json, OUT/best/ (best_model.zip
with the statistics of its moment; chosen by --select, a harness metric such as
ttft_mean:all), OUT/checkpoints/ (each with its statistics), OUT/eval/evaluations.npz
(learning curve) and OUT/eval/evaluations_metrics.json (harness metrics per
evaluation). Evaluate: llmsched-gym compare --policies 'jsq;agent:OUT' (or
agent:OUT/best, agent:OUT/checkpoints/model_N_steps.zip).
"""


def add_cli(subparsers) -> None:
    """Register ``llmsched-gym train``."""
    import argparse

    p = subparsers.add_parser("train", help="train an RL agent (stable-baselines3) on an llmsched environment",
                              description=_TRAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)

    add_arguments(p)
    p.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    require_extra("llmsched-gym train")  # torch, stable-baselines3, sb3-contrib: the [rl] extra

    run_from_args(args)
    return 0
