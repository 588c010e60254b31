"""Two or more operator replicas without double work: a Lease decides which one reconciles.

Every replica runs kopf and watches (so a follower knows every job the moment it takes over), but
only the holder of the Lease ``<lease_name>`` (``coordination.k8s.io/v1``) reconciles; the others
wait. Leader election is ``kubernetes_asyncio``'s own (``leaderelection.LeaderElection`` with a
``LeaseLock``, the Lease protocol of client-go's leader election): the leader renews the Lease every
``retry_period``; a replica that is killed stops renewing, and another takes the Lease once
``lease_duration`` has passed without a renewal, then resyncs every job it knows.

kopf's own peering was the other candidate; it pauses kopf's handlers in a follower but not the
operator's resync loop (it does not expose its pause state), and it needs the KopfPeering CRD.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from flashrl_operator.client.kube import COMPONENT
from flashrl_operator.client.login import CredentialError, Credentials

logger = logging.getLogger(__name__)

#: Name of the Lease the replicas share.
LEASE_NAME: Final = "flashrl-operator"


def default_identity() -> str:
    """This replica's name in the Lease: the pod's name when set, else host and process."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def default_namespace() -> str:
    """Where the Lease lives: the operator's own namespace when known."""
    return os.environ.get("POD_NAMESPACE") or "default"


@dataclass(frozen=True)
class ElectionTiming:
    """``lease_duration`` seconds without renewal before another replica takes over.

    The leader gives up after failing to renew for two thirds of it, and tries every sixth (at least
    a second, as the library requires).
    """

    lease_duration: int = 15

    @property
    def renew_deadline(self) -> float:
        """How long the leader keeps trying to renew before it stops leading."""
        return self.lease_duration * 2 / 3

    @property
    def retry_period(self) -> float:
        """Between two attempts to acquire or renew."""
        return max(1.01, self.lease_duration / 6)


class Leadership:
    """Whether this replica may reconcile, kept up to date by a leader election task."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        namespace: str,
        identity: str,
        timing: ElectionTiming,
        on_elected: Callable[[], Awaitable[None]],
        lease_name: str = LEASE_NAME,
    ) -> None:
        self.identity = identity
        self._credentials = credentials
        self._namespace = namespace
        self._timing = timing
        self._on_elected = on_elected
        self._lease_name = lease_name
        self._leading = asyncio.Event()

    @property
    def leading(self) -> bool:
        """This replica holds the Lease."""
        return self._leading.is_set()

    async def run(self) -> None:
        """Take part in the election until cancelled, again after every lost Lease or failure."""
        while True:
            try:
                await self._elect_once()
            except asyncio.CancelledError:
                raise
            except (CredentialError, Exception) as exc:  # An API blip must not end the election.
                logger.warning("Leader election (%s): %s; trying again", self.identity, exc)
            self._leading.clear()
            await asyncio.sleep(self._timing.retry_period)

    async def _elect_once(self) -> None:
        async with ApiClient(configuration=await self._credentials.configuration()) as api:
            api.user_agent = COMPONENT
            lock = LeaseLock(self._lease_name, self._namespace, self.identity, api)
            config = electionconfig.Config(
                lock,
                lease_duration=self._timing.lease_duration,
                renew_deadline=self._timing.renew_deadline,
                retry_period=self._timing.retry_period,
                onstarted_leading=self._lead,
                onstopped_leading=self._stop_leading,
            )
            await leaderelection.LeaderElection(config).run()

    async def _lead(self) -> None:
        logger.info("Leading (%s holds Lease %s/%s)", self.identity, self._namespace, self._lease_name)
        self._leading.set()
        with contextlib.suppress(Exception):
            await self._on_elected()
        await asyncio.Event().wait()  # until the library cancels it when the Lease is lost

    async def _stop_leading(self) -> None:
        logger.warning("No longer leading (%s): the Lease was not renewed in time", self.identity)
        self._leading.clear()
