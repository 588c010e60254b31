"""Fixtures of the real-trainer tier: the tiny model, tokenizer and data (made once per session with the
trainer environment's Python), and the integration layer's real control plane with the real operator
running on it, shared by the module's runs.

The cluster is the run's session control plane (``tests/conftest.py``, started once for every layer) with
the chart and KubeRay's CRDs, and its view is the integration layer's own (``tests/integration/
operator_harness.py``, imported as the integration tests import it). The tests' namespaces are made empty
once, when the module starts, not before each test: the module's runs are reused (scenario (a)'s job and
scenario (b)'s are compared, from the cluster, by scenario (d)).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from trainer_env import HERE, python

# The integration layer's harness, importable by its bare name as in its own tests (the real cluster's
# view, the operator's settings on it).
sys.path.insert(0, str(HERE.parent / "integration"))

from operator_harness import (
    WATCHED,
    Cluster,
    fresh_namespaces,
    real_cluster,
    real_operator_config,
)

from envtest.audit import AuditLog
from envtest.chart import ready_for_jobs
from envtest.control_plane import OPERATOR_USER, ControlPlane
from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim import eventually


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``model/`` (a random Qwen3 and its tokenizer) and ``data/{train,validation}.parquet``."""
    out = tmp_path_factory.mktemp("tiny")
    done = subprocess.run(
        [str(python()), str(HERE / "make_tiny.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def trainer_plane(control_plane: ControlPlane) -> ControlPlane:
    """The session's real control plane, with the chart's CRDs and KubeRay's, and empty namespaces."""
    python()  # the tier fails here, before any control-plane work, when its environment is missing
    plane = ready_for_jobs(control_plane)
    fresh_namespaces(plane)
    return plane


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kube(trainer_plane: ControlPlane) -> AsyncIterator[Cluster]:
    """An admin's view of the cluster, with KubeRay played (``kube.kuberay``)."""
    view = real_cluster(trainer_plane)
    try:
        yield view
    finally:
        await view.api.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def operator(trainer_plane: ControlPlane, kube: Cluster) -> AsyncIterator[OperatorThread]:
    """The real operator (in this process, its own thread and loop) for the module: it renders and
    creates every job's children, reads the launcher's reports, keeps the history and the ledger, and
    retries a failed attempt (a short back-off)."""
    assert trainer_plane.audit_log is not None
    op = OperatorThread(real_operator_config(trainer_plane, retry_backoff=0.5))
    audit = AuditLog(trainer_plane.audit_log)
    audit.mark()
    try:
        await asyncio.to_thread(op.start)

        async def watching() -> bool:
            return all(audit.watching(OPERATOR_USER, plural) for plural in WATCHED)

        await eventually(watching, "the operator to open its watches", 60.0, 0.2)
        yield op
    finally:
        await asyncio.to_thread(op.stop)
    assert not op.alive, "the operator thread outlived the module"
