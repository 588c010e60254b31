"""What the status tests of this folder share: a fixed clock and the status as the operator writes it.

A helper module rather than fixtures: the tests call these inside their own helpers and parametrised
tables, where a fixture cannot reach.
"""

from __future__ import annotations

from typing import Any

from flashrl_operator.job.status.mapping import Observation, operator_keys
from flashrl_operator.job.status.mapping import desired_status as typed_status

#: The reconcile's clock in these tests.
NOW = "2026-01-01T00:00:00Z"


def desired_status(obs: Observation, now: str) -> dict[str, Any]:
    """The typed status in wire form: the owned keys, ``None`` for absent ones."""
    return operator_keys(typed_status(obs, now))
