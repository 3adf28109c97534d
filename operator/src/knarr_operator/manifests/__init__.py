"""Kubernetes manifests of a Pipeline's children: pure functions from spec to plain dicts."""

from knarr_operator.manifests.meta import PipelineRef
from knarr_operator.manifests.render import Children, render_children

__all__ = ["Children", "PipelineRef", "render_children"]
