"""Configuration models: one rule per field, the same one-line error from every entry
point (Python, ``make_scenario``, YAML, environment keywords, CLI flags), nested paths,
and validation when a config is built (``replace`` included), not after."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest

import llmsched_gym  # noqa: F401  (registers the environments)
from llmsched_gym.cli import main
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.eviction import EvictionConfig
from llmsched_gym.scenarios import ScenarioOverrides, load_scenario, make_scenario
from llmsched_gym.simulator import ClusterConfig

WANT = "is invalid; it must be an integer in [1, 1024]; larger is beyond what any real cluster or study needs"
YAML = "name: tiny\ncluster: {instances: 5000}\nworkload: {input: 100, output: 10, num_requests: 10}\n"


def _message(fn) -> str:
    with pytest.raises(ConfigError) as ei:
        fn()
    return str(ei.value)


def test_one_rule_for_every_entry_point(tmp_path, capsys):
    """``instances`` is declared once (ClusterConfig's field type); every entry point says
    the same about a value above its limit, under its own name for the field."""
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text(YAML)
    assert _message(lambda: ClusterConfig(instances=5000)) == f"cluster.instances=5000 {WANT}"
    assert _message(lambda: make_scenario("codegen", instances=5000)) == f"instances=5000 {WANT}"
    assert _message(lambda: load_scenario(yaml_file)) == f"{yaml_file}.cluster.instances=5000 {WANT}"
    assert _message(lambda: gym.make("llmsched/Routing-v0", instances=5000)) == f"instances=5000 {WANT}"
    assert main(["run", "--scenario", "codegen", "--instances", "5000"]) == 2
    assert capsys.readouterr().err.strip() == f"llmsched-gym run: error: --instances=5000 {WANT}"


def test_a_flag_is_named_by_the_flag_that_sets_the_field(capsys):
    """``--horizon`` sets ``horizon_s`` and ``--kv-link-latency`` ``kv_link_latency_s``: their
    errors name the flags, without the "or none" a Python caller may pass."""
    assert main(["run", "--scenario", "codegen", "--horizon", "0"]) == 2
    assert capsys.readouterr().err.strip().endswith("--horizon=0.0 is invalid; it must be a finite number in "
                                                    "(0, 2592000]")
    assert main(["run", "--scenario", "pd-longprompt", "--kv-link-latency", "-1"]) == 2
    assert "--kv-link-latency=-1.0 is invalid; it must be a finite number in [0, 60]" in capsys.readouterr().err


def test_nested_positional_and_unknown_fields():
    assert _message(lambda: ClusterConfig(engine={"max_num_seqs": 2.5})) == (
        "cluster.engine.max_num_seqs=2.5 is invalid; it must be an integer in [1, 4096]")
    assert "cluster.engine (EngineConfig): unknown field 'max_seqs'; allowed: max_num_seqs" in _message(
        lambda: ClusterConfig(engine={"max_seqs": 2}))
    assert _message(lambda: EvictionConfig(2, -1.0)).startswith("eviction.confirmation_grace_s=-1.0 is invalid")
    assert _message(lambda: ClusterConfig(hardware="H100", engine={"eviction": "lru"})) == (
        "cluster.engine.eviction='lru' is invalid; choose one of cached-last, vllm")
    unknown = _message(lambda: make_scenario("codegen", qsp=3))
    assert unknown.startswith("make_scenario: unknown keyword 'qsp'; allowed: ")
    assert set(ScenarioOverrides.model_fields) <= set(unknown.split("allowed: ")[1].split(", "))


def test_built_once_and_by_replace():
    """A config is checked when built, by ``dataclasses.replace`` too; a numpy integer is an
    integer; a value it holds is not checked again (a hot path reads plain attributes)."""
    np = pytest.importorskip("numpy")
    c = ClusterConfig(instances=np.int64(4))
    assert c.instances == 4 and type(c.instances) is int
    with pytest.raises(ConfigError, match=r"cluster.instances=0 is invalid"):
        dataclasses.replace(c, instances=0)
    with pytest.raises(ConfigError, match=r"cluster.prefill_instances=4 is invalid; it must leave a decode instance"):
        dataclasses.replace(c, prefill_instances=4)
