"""RL agents for llmsched-gym: training (:mod:`agents.train`), networks
(:mod:`agents.networks`) and trained models as gateway policies (:mod:`agents.policy`,
``make_policy("agent:PATH")``). See ``docs/agents.md``."""
