"""llm-d EndpointPickerConfig import/export (llmsched_gym/epp.py, docs/epp.md)."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest
import yaml

from llmsched_gym import make_scenario
from llmsched_gym.cli import main
from llmsched_gym.errors import ConfigError
from llmsched_gym.gateway.epp import (
    canonical_policies,
    dump_epp_config,
    epp_config_from_dict,
    load_epp_config,
    to_epp_config,
)
from llmsched_gym.scenarios import load_scenario
from llmsched_gym.simulator import GatewayConfig

# llm-d-router deploy/config/soft-reflective-ceiling-epp-config.yaml (the article's "single YAML change").
ARTICLE = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates:
- flowControl
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: soft-reflective-ceiling-policy
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2.0
  - pluginRef: kv-cache-utilization-scorer
    weight: 2.0
  - pluginRef: prefix-cache-scorer
    weight: 3.0
flowControl:
  usageLimitPolicyPluginRef: soft-reflective-ceiling-policy
"""


@pytest.fixture
def article(tmp_path):
    p = tmp_path / "soft-reflective-ceiling-epp-config.yaml"
    p.write_text(ARTICLE)
    return p


def test_article_yaml_maps_to_llmd_and_soft_reflective(article):
    cfg = load_epp_config(article)
    assert cfg.flow_control == "soft-reflective-ceiling" and cfg.admission == "always-admit"
    assert cfg.router.startswith("llm-d:queue_weight=2.0,kv_weight=2.0,prefix_weight=3.0,block_tokens=64,")
    assert (cfg.ttl_s, cfg.band_capacity, cfg.saturation, cfg.warnings) == (60.0, 5000, None, ())


def test_article_yaml_gives_identical_requests(article):
    """Same seed: per-request results equal those of --router llm-d --flow-control soft-reflective-ceiling."""
    sc = make_scenario("codegen", qps=30, duration_s=20)
    a = sc.simulator(5, **load_epp_config(article).gateway_kwargs()).run()
    b = sc.simulator(5, router="llm-d", flow_control="soft-reflective-ceiling").run()
    for name in ("dispatch_t", "first_token_t", "finish_t", "instance", "outcome", "prefix_hit", "preemptions"):
        np.testing.assert_array_equal(getattr(a.table, name), getattr(b.table, name), err_msg=name)
    waited = a.table.dispatch_t - a.table.arrival
    assert (waited > 0.05).sum() > 20  # the soft-reflective ceiling actually gated dispatch


def _summary(path):
    s = json.loads(path.read_text())
    s = s[0] if isinstance(s, list) else s
    return {k: v for k, v in s.items() if k not in ("wall_seconds",)}


def test_article_yaml_cli_run_matches(article, tmp_path):
    common = ["run", "--scenario", "codegen", "--qps", "30", "--horizon", "25", "--seed", "2"]
    assert main(common + ["--epp-config", str(article), "--json", str(tmp_path / "a.json")]) == 0
    assert main(common + ["--router", "llm-d", "--flow-control", "soft-reflective-ceiling",
                          "--json", str(tmp_path / "b.json")]) == 0
    a, b = _summary(tmp_path / "a.json"), _summary(tmp_path / "b.json")
    assert a["classes"] == b["classes"] and a["flow_control"] == b["flow_control"] == "soft-reflective-ceiling"


def test_scenario_yaml_gateway_epp_config(article, tmp_path):
    doc = {"name": "epp", "cluster": {"instances": 2}, "qps": 5,
           "workload": {"arrival": {"process": "poisson", "rate": 5}, "input": {"dist": "fixed", "mean": 100},
                        "output": {"dist": "fixed", "mean": 10}, "duration_s": 5},
           "gateway": {"epp_config": article.name}}
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(doc))
    sc = load_scenario(p)
    assert sc.gateway.flow_control == "soft-reflective-ceiling" and sc.gateway.router.startswith("llm-d:")
    assert sc.gateway.admission == "always-admit" and sc.gateway.ttl_s == 60.0
    doc["gateway"]["router"] = "jsq"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"gateway: give either epp_config or router"):
        load_scenario(p)


COMBINATIONS = [
    "llm-d:prefix_weight=2+soft-reflective-ceiling",
    "llm-d",
    "soft-reflective-ceiling",
    "llm-d+legacy",
    "random+probabilistic",
    "random+probabilistic:k=50,power=3,queueDepthThreshold=4,kvCacheUtilThreshold=0.7",
    "llm-d:queue_weight=1,kv_weight=0,block_tokens=128,lru_blocks=1000,max_prefix_blocks=64+static-usage-limit:threshold=0.8",
    "llm-d:queue_weight=0,kv_weight=0,prefix_weight=1+priority-holdback:cmin=0.3",
    "random+static-usage-limit+always-admit",
]


@pytest.mark.parametrize("spec", COMBINATIONS)
def test_export_import_round_trip(spec, tmp_path):
    p = tmp_path / "epp.yaml"
    assert main(["policies", "--to-epp-config", spec, "--out", str(p)]) == 0
    back = load_epp_config(p)
    assert canonical_policies(back) == canonical_policies(spec)
    assert yaml.safe_load(p.read_text()) == to_epp_config(spec)  # the file is the dict, comments aside


def test_export_gateway_settings_round_trip():
    d = to_epp_config("llm-d+soft-reflective-ceiling", ttl_s=30, band_capacity=200)
    cfg = epp_config_from_dict(d)
    assert (cfg.ttl_s, cfg.band_capacity) == (30.0, 200)
    assert dump_epp_config("llm-d").startswith("# EndpointPickerConfig for the policy combination 'llm-d'")


@pytest.mark.parametrize("spec, needle", [
    ("jsq", "router 'jsq' has no EndpointPickerConfig equivalent"),
    ("llm-d:block_tokens=32", "below 64 tokens"),
    ("llm-d+always-admit", "always-admit without flow control cannot be deployed"),
    ("llm-d+soft-reflective-ceiling+legacy", "with flow control cannot be deployed"),
    ("llm-d+static-usage-limit:threshold=1.5", "threshold in (0, 1]"),
    ("llm-d+soft-reflective-ceiling:period_scale=2", "only ramp=1, period_scale=1 can be deployed"),
])
def test_export_refuses_what_llmd_cannot_deploy(spec, needle, capsys):
    assert main(["policies", "--to-epp-config", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


BASE = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "queue-scorer"}, {"type": "max-score-picker"}],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "queue-scorer", "weight": 2}]}]}


def _with(**changes):
    d = json.loads(json.dumps(BASE))
    for k, v in changes.items():
        d[k] = v
    return d


BAD = [
    ("unknown plugin type",
     _with(plugins=[{"type": "queue-scorer"}, {"type": "session-affinity-scorer"}]),
     "plugins[1].type='session-affinity-scorer' is not a plugin type the simulator models; supported: queue-scorer"),
    ("dangling pluginRef",
     _with(schedulingProfiles=[{"name": "default", "plugins": [{"pluginRef": "prefix-cache-scorer"}]}]),
     "pluginRef='prefix-cache-scorer' references a plugin that is not defined; defined: queue-scorer"),
    ("non-numeric weight",
     _with(schedulingProfiles=[{"name": "default", "plugins": [{"pluginRef": "queue-scorer", "weight": "heavy"}]}]),
     "weight='heavy' is invalid; it must be a number"),
    ("boolean weight",
     _with(schedulingProfiles=[{"name": "default", "plugins": [{"pluginRef": "queue-scorer", "weight": True}]}]),
     "weight=True is invalid; it must be a number"),
    ("dangling usage limit",
     _with(featureGates=["flowControl"], flowControl={"usageLimitPolicyPluginRef": "my-policy"}),
     "usageLimitPolicyPluginRef='my-policy' references a plugin that is not defined"),
    ("unknown apiVersion", _with(apiVersion="v2"), "apiVersion='v2' is not known; allowed: llm-d.ai/v1alpha1"),
    ("unknown gate", _with(featureGates=["fastPath"]), "featureGates[0]='fastPath' is not a known feature gate"),
    ("two profiles",
     _with(schedulingProfiles=[{"name": "prefill", "plugins": []}, {"name": "decode", "plugins": []}]),
     "has 2 profiles; several profiles (prefill/decode disaggregation) are not simulated"),
    ("unknown parameter",
     _with(plugins=[{"type": "queue-scorer"}, {"type": "max-score-picker"},
                    {"type": "static-usage-limit-policy", "parameters": {"limit": 0.5}}]),
     "static-usage-limit-policy has no parameter 'limit'; allowed: threshold"),
    ("byte limit", _with(featureGates=["flowControl"], flowControl={"maxBytes": "1Gi"}),
     "flowControl.maxBytes='1Gi' is not simulated"),
    ("per-band capacities differ",
     _with(featureGates=["flowControl"], flowControl={"priorityBands": [{"priority": 0, "maxRequests": 100},
                                                                        {"priority": -1, "maxRequests": 10}]}),
     "band maxRequests differ"),
    ("admitter after dispatch",
     _with(featureGates=["flowControl"], plugins=BASE["plugins"] + [{"type": "probabilistic-admitter"}]),
     "runs the admitter after dispatch"),
    ("match length weight",
     _with(plugins=[{"type": "prefix-cache-scorer", "parameters": {"matchLengthWeight": 0.5}}],
           schedulingProfiles=[{"name": "default", "plugins": [{"pluginRef": "prefix-cache-scorer"}]}]),
     "matchLengthWeight=0.5 is not simulated"),
    ("holdback by value",
     _with(featureGates=["flowControl"],
           plugins=BASE["plugins"] + [{"type": "priority-holdback-policy",
                                       "parameters": {"minCeiling": 0.5, "domain": "value"}}],
           flowControl={"usageLimitPolicyPluginRef": "priority-holdback-policy"}),
     "domain='value' is not simulated; allowed: rank"),
]


@pytest.mark.parametrize("label, doc, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_config_one_line_exit_2(label, doc, needle, tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert main(["run", "--scenario", "codegen", "--qps", "5", "--epp-config", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert needle in err and str(p) in err


def test_invalid_yaml_and_missing_file(tmp_path, capsys):
    p = tmp_path / "broken.yaml"
    p.write_text("plugins: [\n  - type: x\n")
    assert main(["run", "--scenario", "codegen", "--qps", "5", "--epp-config", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not valid YAML" in err and len(err.splitlines()) == 1
    assert main(["run", "--scenario", "codegen", "--qps", "5", "--epp-config", str(tmp_path / "none.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["run", "--scenario", "codegen", "--qps", "5", "--epp-config", str(p), "--router", "jsq"]) == 2


def test_llmd_defaults_and_examples():
    # No picker: max-score; a scorer without weight: 1; no profile: every scorer and picker at weight 1.
    cfg = epp_config_from_dict(_with(schedulingProfiles=[{"name": "d", "plugins": [{"pluginRef": "queue-scorer"}]}]))
    assert cfg.router.startswith("llm-d:queue_weight=1.0,kv_weight=0.0,prefix_weight=0.0")
    assert (cfg.flow_control, cfg.admission) == (None, "legacy")  # no flowControl gate: llm-d's legacy gate
    assert epp_config_from_dict(_with(schedulingProfiles=[])).router.startswith("llm-d:queue_weight=1.0,")
    # deploy/config/probabilistic-admitter-epp-config.yaml: detector thresholds disable the legacy gate.
    prob = {"apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "EndpointPickerConfig",
            "plugins": [{"type": "probabilistic-admitter"}, {"type": "random-picker"},
                        {"type": "utilization-detector",
                         "parameters": {"queueDepthThreshold": 999999999, "kvCacheUtilThreshold": 1.0}}],
            "flowControl": {"saturationDetector": {"pluginRef": "utilization-detector"}},
            "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "random-picker"}]}]}
    cfg = epp_config_from_dict(prob)
    assert cfg.router == "random" and cfg.admission.startswith("probabilistic:") and cfg.flow_control is None
    assert "k=300.0" in cfg.admission or "coefficient=300.0" in cfg.admission
    # deploy/config/sim-epp-config.yaml: the producer's token cap becomes a block cap.
    sim = _with(plugins=[{"type": "approx-prefix-cache-producer",
                          "parameters": {"maxPrefixTokensToMatch": 16384, "lruCapacityPerServer": 31250}},
                         {"type": "prefix-cache-scorer"}, {"type": "decode-filter"}, {"type": "max-score-picker"},
                         {"type": "single-profile-handler"}],
                schedulingProfiles=[{"name": "default", "plugins": [
                    {"pluginRef": "decode-filter"}, {"pluginRef": "max-score-picker"},
                    {"pluginRef": "prefix-cache-scorer", "weight": 2}]}])
    assert epp_config_from_dict(sim).router.endswith("prefix_weight=2.0,block_tokens=64,lru_blocks=31250,"
                                                     "max_prefix_blocks=256")
    # flowControl settings without the gate are ignored, as llm-d does, with a warning.
    cfg = epp_config_from_dict(_with(flowControl={"defaultRequestTTL": "30s"}))
    assert cfg.flow_control is None and cfg.ttl_s is None and "ignored" in cfg.warnings[0]
    # Gate on: TTL and band capacity; "0s" disables eviction.
    fc = epp_config_from_dict(_with(featureGates=["flowControl"], flowControl={
        "defaultRequestTTL": "1m30s", "priorityBands": [{"priority": 0, "maxRequests": "1k"},
                                                        {"priority": -1, "maxRequests": 1000}]}))
    assert (fc.flow_control, fc.ttl_s, fc.band_capacity) == ("static-usage-limit:threshold=1.0", 90.0, 1000)
    assert epp_config_from_dict(_with(featureGates=["flowControl=true"],
                                      flowControl={"defaultRequestTTL": "0s"})).ttl_s >= 1e9


def test_non_default_saturation_detector():
    doc = _with(featureGates=["flowControl"],
                plugins=BASE["plugins"] + [{"type": "utilization-detector", "parameters": {"queueDepthThreshold": 10}}],
                flowControl={"saturationDetector": {"pluginRef": "utilization-detector"}})
    supported = {f.name for f in fields(GatewayConfig)} & {"saturation", "saturation_detector"}
    if supported:
        kw = epp_config_from_dict(doc).gateway_kwargs()
        assert any(k in kw for k in supported)
    else:
        with pytest.raises(ConfigError, match="saturation detector .*queueDepthThreshold=10.* is not simulated"):
            epp_config_from_dict(doc)
    # headroom only widens the detector's routing filter: the pool saturation is llm-d's default.
    doc["plugins"][-1]["parameters"] = {"headroom": 0.2}
    assert epp_config_from_dict(doc).saturation is None


def test_compare_takes_epp_entries(article, tmp_path):
    from llmsched_gym.cli.epp import with_epp_entries

    class Args:
        policies = "jsq"
        epp_configs = [str(article)]

    args = with_epp_entries(Args())
    assert args.policies.startswith("jsq;router=llm-d:") and args.policies.endswith("+label=" + article.stem)
