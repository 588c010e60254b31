"""Fixtures: a cluster (``cluster``), the real operator on it (``start_operator``), staging's end
(``staging``).

By default the cluster is the run's real control plane (``tests/conftest.py``), with the chart's CRDs
installed by ``helm`` and the tests' namespaces made empty before each test. A module marked
``pytest.mark.kmock(reason=...)`` gets kmock's emulated API server instead (:mod:`flashrl_operator.sim`):
only tests that inject a fault the real server cannot produce may ask for it, and the reason says
which (``tests/unit/project`` checks that every such mark gives one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import (
    WATCHED,
    Cluster,
    RealStaging,
    StartOperator,
    emulated_view,
    fresh_namespaces,
    real_cluster,
    real_operator_config,
)

from envtest.audit import AuditLog
from envtest.chart import ready_for_jobs
from envtest.control_plane import OPERATOR_USER, ControlPlane
from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim import EmulatedCluster, StagingStandIn, eventually


@pytest.fixture(scope="module")
def jobs_plane(control_plane: ControlPlane) -> ControlPlane:
    """The real control plane with the chart (defaults) and KubeRay's CRDs."""
    return ready_for_jobs(control_plane)


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """The real control plane, or kmock's emulator for a test marked kmock."""
    if request.node.get_closest_marker("kmock") is not None:
        async with EmulatedCluster() as emulated:
            yield emulated_view(emulated)
        return
    jobs_plane: ControlPlane = request.getfixturevalue("jobs_plane")
    await asyncio.to_thread(fresh_namespaces, jobs_plane)
    view = real_cluster(jobs_plane)
    try:
        yield view
    finally:
        await view.api.close()


@pytest.fixture
def emulated(cluster: Cluster) -> EmulatedCluster:
    """kmock's emulated cluster itself (tests marked kmock)."""
    assert cluster.emulated is not None, "kmock's emulator is only for tests marked kmock(reason=...)"
    return cluster.emulated


@pytest.fixture
async def start_operator(cluster: Cluster) -> AsyncIterator[StartOperator]:
    """Start the real operator against ``cluster``; keyword arguments override OperatorConfig."""
    if cluster.emulated is not None:
        emulated = cluster.emulated

        async def start_emulated(**overrides: Any) -> OperatorThread:
            return await emulated.start_operator(**overrides)

        yield start_emulated
        operators = list(emulated.operators)
        await emulated.stop_operators()
        assert not any(op.alive for op in operators), "an operator thread outlived its test"
        return

    plane = cluster.real
    assert plane.audit_log is not None
    started: list[OperatorThread] = []

    async def start(**overrides: Any) -> OperatorThread:
        operator = OperatorThread(real_operator_config(plane, **overrides))
        started.append(operator)
        audit = AuditLog(plane.audit_log)  # this operator's watches, not an earlier one's
        audit.mark()
        await asyncio.to_thread(operator.start)

        async def watching() -> bool:
            return all(audit.watching(OPERATOR_USER, plural) for plural in WATCHED)

        await eventually(watching, "the operator to open its watches", 60.0, 0.2)
        return operator

    try:
        yield start
    finally:
        for operator in started:
            await asyncio.to_thread(operator.stop)
    assert not any(op.alive for op in started), "an operator thread outlived its test"


@pytest.fixture
def staging(cluster: Cluster) -> StagingStandIn | RealStaging:
    """The end of a staging Job: on the real server the pod's end (the Job controller does the rest);
    on the emulator the Job controller and the stage command played."""
    if cluster.emulated is not None:
        return cluster.emulated.staging
    return RealStaging(cluster.api)
