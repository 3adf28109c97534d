"""Real Kubernetes control plane (envtest-style) and tool paths for the test suite.

The cluster is etcd + kube-apiserver + kube-controller-manager on loopback,
managed by ``hack/envtest/envtest.sh`` (state in ``<repo>/.cache/envtest``).
There is no kubelet or scheduler, so Pods stay Pending, but admission, RBAC,
server-side dry-run, Deployment -> ReplicaSet and ownerReference garbage
collection are all real. There is no fake: if the cluster cannot be started,
the ``kubeconfig`` fixture errors with the components' log tails.

Register the session fixture from ``tests/conftest.py``::

    pytest_plugins = ["tests.services.envtest"]

The admin identity in the kubeconfig is in ``system:masters``. The cluster is
shared by every test in the session (and left running afterwards), so use
unique namespace names and clean up what you create.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ENVTEST_DIR = REPO_ROOT / "hack" / "envtest"
ENVTEST_SH = ENVTEST_DIR / "envtest.sh"
BUILD_SH = ENVTEST_DIR / "build.sh"
# envtest.sh honours KNARR_ENVTEST_DIR (a second, private cluster) too.
STATE_DIR = Path(os.environ.get("KNARR_ENVTEST_DIR") or REPO_ROOT / ".cache" / "envtest")
LOG_DIR = STATE_DIR / "logs"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")

# A cold `up` compiles kube-apiserver, kube-controller-manager, etcd and helm
# from source (tens of minutes on 2 cores); a warm one takes seconds.
_UP_TIMEOUT_S = 3600


class EnvtestUnavailable(RuntimeError):
    """The local control plane, or one of the tools, could not be provided."""


def _log_tails(lines: int = 60) -> str:
    parts = []
    for name in COMPONENTS:
        path = LOG_DIR / f"{name}.log"
        try:
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            tail = f"(no log: {exc})"
        parts.append(f"--- last {lines} lines of {path} ---\n{tail}")
    return "\n".join(parts)


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["bash", str(script), *args]
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=_UP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise EnvtestUnavailable(
            f"`{' '.join(cmd)}` did not finish within {_UP_TIMEOUT_S}s.\n"
            f"--- stderr ---\n{exc.stderr or ''}\n{_log_tails()}"
        ) from exc


def ensure_envtest() -> str:
    """Start the control plane (or reuse the running one); return the kubeconfig path.

    Raises EnvtestUnavailable with envtest.sh's output and each component's
    log tail.
    """
    proc = _run(ENVTEST_SH, "up")
    for line in proc.stdout.splitlines():
        if line.startswith("KUBECONFIG="):
            path = line.removeprefix("KUBECONFIG=").strip()
            if proc.returncode == 0 and path and Path(path).is_file():
                return path
    raise EnvtestUnavailable(
        f"`hack/envtest/envtest.sh up` failed (exit {proc.returncode}); "
        f"retry with `make envtest-down envtest-up`.\n"
        f"--- envtest.sh stdout ---\n{proc.stdout}\n"
        f"--- envtest.sh stderr ---\n{proc.stderr}\n{_log_tails()}"
    )


def tools() -> dict[str, str]:
    """build.sh's NAME=value lines: pinned versions (KUBE_VERSION, HELM_VERSION, ...)
    and binary paths (KUBE_APISERVER, ETCD, HELM, HADOLINT, ...).

    Builds whatever is not cached yet (seconds when everything is).
    """
    proc = _run(BUILD_SH)
    if proc.returncode != 0:
        raise EnvtestUnavailable(
            f"`hack/envtest/build.sh` failed (exit {proc.returncode}).\n"
            f"--- stderr ---\n{proc.stderr}"
        )
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def helm_bin() -> str:
    """Absolute path of the pinned helm v3 binary (built on first use)."""
    path = tools().get("HELM", "")
    if not path or not Path(path).is_file():
        raise EnvtestUnavailable(f"build.sh reported no usable helm binary ({path!r})")
    return path


def hadolint_bin() -> str | None:
    """Absolute path of the pinned hadolint binary, or None if it could not be fetched."""
    path = tools().get("HADOLINT", "")
    return path if path and Path(path).is_file() else None


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    """Absolute path of the admin kubeconfig of the running envtest cluster.

    Started once per session and left running afterwards, so the next session
    reuses it; stop it with `make envtest-down`.
    """
    try:
        return ensure_envtest()
    except EnvtestUnavailable as exc:
        pytest.fail(f"envtest control plane unavailable:\n{exc}", pytrace=False)
