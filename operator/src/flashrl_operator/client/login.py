"""The operator's one credential path, for its own requests and for kopf's watches.

:class:`Credentials` loads a ``kubernetes_asyncio`` client configuration the way kubectl finds its
cluster: an explicit server (tests, the demo), else the pod's service account, else
``$KUBECONFIG`` (or ``~/.kube/config``) and its current context, read when called so a changed
environment is honoured. The library does the work: in-cluster tokens that rotate (it re-reads the
token file), kubeconfig ``exec`` credential plugins (EKS ``aws eks get-token``, GKE
``gke-gcloud-auth-plugin``, AKS ``kubelogin``: a token, or a client certificate), static client
certificates, ``proxy-url``, ``tls-server-name``. :meth:`Credentials.connection_info` hands the same
credentials to kopf (its ``on.login`` handler), so kopf's watches and the operator's writes go the
same way.

One patch on top of the library, :func:`_renew_exec_credentials`: ``kubernetes_asyncio``'s
kubeconfig loader runs an ``exec`` plugin once, when the configuration is loaded, and installs no
refresh hook for it (it does for in-cluster tokens, ``config/incluster_config.py``), so a plugin's
token with an ``expirationTimestamp`` would be sent past its expiry. The hook asks the loader again
before each request; the loader re-runs the plugin only when its credential expired
(``KubeConfigLoader.load_from_exec_plugin``). A 401 makes :class:`~flashrl_operator.client.kube.KubeClient`
load everything afresh (:meth:`Credentials.configuration`), which also re-runs the plugin and
re-reads a rotated service-account token at once.

What the library does not do and this module does not add: ``provideClusterInfo`` (the plugin is not
told the cluster) and resolving a plugin command relative to the kubeconfig's directory; a
plugin's ``installHint`` is not shown, but its exit status and standard error are.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import kopf
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

#: Where Kubernetes mounts a pod's service account token and CA.
SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG: Final = "~/.kube/config"


class CredentialError(Exception):
    """No usable credentials: nothing to log in with, or the kubeconfig or its plugin failed."""


class Credentials:
    """Where the operator's credentials come from; every call loads them afresh.

    ``server`` forces an explicit API server without authentication (tests, the demo).
    ``environ`` and ``service_account_dir`` default to the process's (tests point them elsewhere).
    """

    def __init__(
        self,
        server: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    ) -> None:
        self.server = server
        self._environ = environ
        self._service_account_dir = service_account_dir

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment read now (the process's unless given)."""
        return os.environ if self._environ is None else self._environ

    def _in_cluster(self) -> bool:
        return (
            bool(self.environ.get("KUBERNETES_SERVICE_HOST"))
            and (self._service_account_dir / "token").is_file()
        )

    def _kubeconfig_paths(self) -> str:
        return self.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG

    def available(self) -> bool:
        """Whether there is anything to log in with (a server, a service account, a kubeconfig file)."""
        if self.server is not None or self._in_cluster():
            return True
        return any(Path(p).expanduser().is_file() for p in self._kubeconfig_paths().split(os.pathsep) if p)

    async def configuration(self) -> Configuration:
        """A fresh client configuration; raises :class:`CredentialError` when there is none."""
        config, _ = await self._load()
        return config

    async def _load(self) -> tuple[Configuration, KubeConfigLoader | None]:
        config = Configuration()
        if self.server is not None:
            config.host = self.server.rstrip("/")
            return config, None
        try:
            if self._in_cluster():
                load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=config,
                    token_filename=str(self._service_account_dir / "token"),
                    cert_filename=str(self._service_account_dir / "ca.crt"),
                    environ=self.environ,
                )
                return config, None
            if not self.available():
                raise CredentialError(
                    "no Kubernetes credentials: not in a pod with a service account, and no kubeconfig "
                    f"({self._kubeconfig_paths()})"
                )
            loader = await load_kube_config(
                config_file=self._kubeconfig_paths(), client_configuration=config, persist_config=False
            )
        except ConfigException as exc:
            raise CredentialError(f"cannot load Kubernetes credentials: {exc}") from exc
        if loader._user is not None and "exec" in loader._user:
            config.refresh_api_key_hook = _renew_exec_credentials(loader)
        return config, loader

    async def connection_info(self) -> kopf.ConnectionInfo:
        """The same credentials for kopf's login (kopf asks again on a 401 or when they expire)."""
        config, loader = await self._load()
        header = await config.get_api_key_with_prefix("BearerToken") or ""
        scheme, _, token = header.partition(" ") if " " in header else ("", "", header)
        expiry = getattr(loader, "exec_plugin_expiry", None)
        return kopf.ConnectionInfo(
            server=str(config.host),
            ca_path=config.ssl_ca_cert,
            insecure=not config.verify_ssl,
            scheme=scheme or None,
            token=token or None,
            certificate_path=config.cert_file,
            private_key_path=config.key_file,
            proxy_url=config.proxy,
            expiration=_aware(expiry) if isinstance(expiry, datetime.datetime) else None,
        )


def _renew_exec_credentials(loader: KubeConfigLoader) -> Any:
    """The refresh hook the library lacks for ``exec`` plugins (see the module docstring)."""

    async def renew(config: Configuration) -> None:
        await loader.load_from_exec_plugin()
        token = getattr(loader, "token", None)
        if token:
            config.api_key["BearerToken"] = token

    return renew


def _aware(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)
