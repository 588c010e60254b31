"""``flashrl operator`` as the chart runs it: :mod:`flashrl_devcluster.operator`, shared with
``make dev-cluster``."""

from __future__ import annotations

from flashrl_devcluster.operator import OperatorProcess, container_service_account

__all__ = ["OperatorProcess", "container_service_account"]
