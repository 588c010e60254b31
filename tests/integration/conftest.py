"""Fixtures: the emulated API server (``cluster``) and the real operator (``start_operator``).

Both come from :class:`flashrl_operator.sim.EmulatedCluster`, the one way the demo, the tests and the
benchmark run the operator against the emulator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import Cluster, StartOperator

from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim import EmulatedCluster, StagingStandIn


@pytest.fixture
async def emulated() -> AsyncIterator[EmulatedCluster]:
    async with EmulatedCluster() as emulated:
        yield emulated


@pytest.fixture
async def cluster(emulated: EmulatedCluster) -> Cluster:
    return Cluster(emulated.server, emulated.url, emulated.api, emulated.kuberay)


@pytest.fixture
async def start_operator(emulated: EmulatedCluster) -> AsyncIterator[StartOperator]:
    """Start the real operator against ``cluster``; keyword arguments override OperatorConfig."""

    async def start(**overrides: Any) -> OperatorThread:
        return await emulated.start_operator(**overrides)

    yield start
    operators = list(emulated.operators)
    await emulated.stop_operators()
    assert not any(op.alive for op in operators), "an operator thread outlived its test"


@pytest.fixture
def staging(emulated: EmulatedCluster) -> StagingStandIn:
    """The Job controller and the stage command, played for staging Jobs."""
    return emulated.staging
