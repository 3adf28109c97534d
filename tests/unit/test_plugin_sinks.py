"""Plug-in sinks: a package's entry point becomes a sink type (the test plug-in is installed for real)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from knarr import BaseHandler, CollectResult, PluginPayload
from knarr.config.loading import config_from_dict, load_config
from knarr.errors import ConfigError, ExitCode
from knarr.sinks import SinkResolutionError, build_sinks
from knarr.sinks.delivery import Origin, SinkManager
from knarr.sinks.dlq import FileDeadLetterQueue
from knarr.sinks.plugins import PluginSinkError, installed

ROOT = Path(__file__).resolve().parents[2]


def config(tmp_path: Path, plugins: dict) -> dict:
    return {"sinks": {"plugin": plugins}, "handler": "knarr.demo.handler:SearchHandler"}


def write(tmp_path: Path, data: dict) -> Path:
    import yaml

    path = tmp_path / "knarr.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _payloads(sink: str, sink_type: str) -> float:
    return REGISTRY.get_sample_value("knarr_sink_payloads_delivered_total", {"sink": sink, "type": sink_type}) or 0.0


def test_the_test_plug_in_is_installed_as_an_entry_point_of_its_own_package():
    [plugin] = installed()["test-jsonl"]
    assert (plugin.target, plugin.package) == ("knarr_test_sink:JsonlSink", "knarr-test-sink")


def test_invalid_plug_in_options_are_named_by_their_key_when_the_config_loads(tmp_path):
    path = write(tmp_path, config(tmp_path, {"audit": {"type": "test-jsonl", "options": {"batch_limit": 0, "colour": 1}}}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).splitlines() == [
        f"invalid configuration in {str(path)!r}:",
        "  sinks.plugin.audit.options.path: required option is missing",
        "  sinks.plugin.audit.options.batch_limit: Input should be greater than or equal to 1",
        "  sinks.plugin.audit.options.colour: unknown option; check its spelling against the plug-in's documentation",
    ]


def test_an_unknown_plug_in_type_lists_the_installed_ones_and_how_to_install_one(tmp_path):
    with pytest.raises(ConfigError, match=r"sinks\.plugin\.audit\.type: no installed plug-in sink is called 'sqlite' "
                                          r"\(installed: test-jsonl \(knarr-test-sink 0\.1\.0\)\); install the package"):
        load_config(write(tmp_path, config(tmp_path, {"audit": {"type": "sqlite"}})))


def test_a_plug_in_may_not_take_a_built_in_types_name(tmp_path):
    cfg = config_from_dict(config(tmp_path, {"k": {"type": "kafka"}}))
    with pytest.raises(PluginSinkError, match=r"sinks\.plugin\.k\.type: 'kafka' is a built-in sink type; configure it as sinks\.kafka\.k"):
        build_sinks(cfg)


def test_the_sinks_config_stays_strict_about_unknown_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"sinks\.plugins: unknown key"):
        config_from_dict({"sinks": {"plugins": {"a": {"type": "test-jsonl"}}}})
    with pytest.raises(ConfigError, match=r"sinks\.plugin\.a\.path: unknown key"):
        config_from_dict({"sinks": {"plugin": {"a": {"type": "test-jsonl", "path": "x"}}}})


def test_knarr_check_lists_plug_in_sinks_with_their_package_and_fails_on_bad_options(tmp_path):
    good = write(tmp_path, config(tmp_path, {"audit": {"type": "test-jsonl", "options": {"path": str(tmp_path / "a.jsonl")}}}))
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "check", "--config", str(good)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "sinks:   plugin audit (test-jsonl from knarr-test-sink 0.1.0)\n" in proc.stdout
    assert "plug-in sink types installed: test-jsonl (knarr-test-sink 0.1.0)\n" in proc.stdout

    bad = write(tmp_path, config(tmp_path, {"audit": {"type": "test-jsonl"}}))
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "check", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == ExitCode.USAGE
    assert "sinks.plugin.audit.options.path: required option is missing" in proc.stderr


async def test_plug_in_payloads_reach_their_instance_through_the_delivery_path_labelled_with_the_plug_in_type(tmp_path):
    cfg = config_from_dict(config(tmp_path, {
        "a": {"type": "test-jsonl", "options": {"path": str(tmp_path / "a.jsonl")}},
        "b": {"type": "test-jsonl", "options": {"path": str(tmp_path / "b.jsonl")}}}))
    sinks = build_sinks(cfg)
    assert [(s.kind, s.sink_type, s.name) for s in sinks] == [("plugin", "test-jsonl", "a"), ("plugin", "test-jsonl", "b")]
    manager = SinkManager(sinks, FileDeadLetterQueue(str(tmp_path / "dlq.jsonl"), "in"), BaseHandler())
    await manager.connect_all()
    before = _payloads("b", "test-jsonl")
    await manager.deliver(CollectResult(plugin=[PluginPayload(sink="b", data={"n": 1}, meta={"m": 2}),
                                                PluginPayload(sink="a", data=[1])]), Origin(0, (5,)))
    await manager.close_all()
    assert [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()] == [{"sink": "b", "data": {"n": 1}, "meta": {"m": 2}}]
    assert [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()] == [{"sink": "a", "data": [1], "meta": {}}]
    assert _payloads("b", "test-jsonl") == before + 1
    with pytest.raises(SinkResolutionError, match=r"a plugin payload has no sink= but 2 plugin sinks are configured \(a, b\)"):
        manager.plan(CollectResult(plugin=[PluginPayload(data=1)]))


async def test_a_refusing_plug_in_dead_letters_with_its_type_and_the_payloads_meta(tmp_path):
    switch = tmp_path / "refuse"
    switch.touch()
    cfg = config_from_dict(config(tmp_path, {"only": {"type": "test-jsonl", "options": {
        "path": str(tmp_path / "o.jsonl"), "refuse_while": str(switch)}}}))
    manager = SinkManager(build_sinks(cfg), FileDeadLetterQueue(str(tmp_path / "dlq.jsonl"), "in"), BaseHandler())
    await manager.connect_all()
    await manager.deliver(CollectResult(plugin=[PluginPayload(data={"n": 1}, meta={"table": "t"})]), Origin(0, (5,)))
    [record] = [json.loads(x) for x in (tmp_path / "dlq.jsonl").read_text().splitlines()]
    assert (record["sink_type"], record["sink_name"], record["stage"], record["payload_kind"]) == ("test-jsonl", "only", "sink", "plugin")
    assert record["payload_fields"] == [{"meta": {"table": "t"}}]
    assert record["error"] == f"PermanentSinkError: {tmp_path / 'o.jsonl'} refuses payloads (switch file present)"
