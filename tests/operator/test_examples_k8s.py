"""What people are shown works on a real API server: every Pipeline manifest, and `kubectl explain`."""

from __future__ import annotations

import copy
import json
import re
import secrets

import pytest

from knarr_operator.schema import field_names
from tests.examples import pipeline_manifests
from tests.operator.cluster_helpers import namespace, wait_for

pytestmark = pytest.mark.k8s

MANIFESTS = pipeline_manifests()


@pytest.fixture(scope="module")
def ns(api):
    # No operator watches this namespace: the Pipelines are only stored, checked by schema and CEL.
    with namespace(api, f"knarr-examples-{secrets.token_hex(4)}") as name:
        yield name


@pytest.mark.parametrize("where", sorted(MANIFESTS))
def test_every_pipeline_manifest_shown_is_accepted_by_the_api_server(api, ns, where):
    body = copy.deepcopy(MANIFESTS[where])
    body["metadata"]["namespace"] = ns
    pipelines = api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline")
    created = pipelines.create(body=body, namespace=ns).to_dict()
    try:
        assert created["spec"]["handler"] == body["spec"]["handler"]
    finally:
        pipelines.delete(name=body["metadata"]["name"], namespace=ns)


def _published_spec(api) -> dict | None:
    """The Pipeline's spec schema as the API server publishes it: what `kubectl explain` reads."""
    response = api.request("GET", "/openapi/v3/apis/knarr.dev/v1alpha1", serialize=False)
    document = json.loads(response.data)
    schema = (document.get("components") or {}).get("schemas", {}).get("dev.knarr.v1alpha1.Pipeline")
    return schema["properties"]["spec"] if schema else None


def _descriptions(schema: dict, path: str = "spec") -> dict[str, str]:
    out = {}
    for key, prop in (schema.get("properties") or {}).items():
        out[f"{path}.{key}"] = prop.get("description", "")
        out.update(_descriptions(prop, f"{path}.{key}"))
    if isinstance(schema.get("additionalProperties"), dict):
        out.update(_descriptions(schema["additionalProperties"], f"{path}.<name>"))
    return out


def test_kubectl_explain_shows_camel_case_names_real_defaults_and_no_none(api):
    spec = wait_for(lambda: _published_spec(api), 60, "the Pipeline schema in the published OpenAPI")
    executor = spec["properties"]["executor"]["properties"]
    assert "maxExecutors" in executor and "max_executors" not in executor
    assert executor["maxExecutors"]["description"].endswith("Default: 4.")
    assert executor["windowLingerMs"]["description"].startswith("How long a window may wait to fill up to windowSize")
    snake = {name for name in field_names() if "_" in name}
    for path, text in _descriptions(spec).items():
        assert text, f"{path} has no description"
        assert "None" not in text, f"{path}: {text}"
        assert not [w for w in re.findall(r"[a-z0-9_]+", text) if w in snake], f"{path}: {text}"
