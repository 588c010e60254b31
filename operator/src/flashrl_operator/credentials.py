"""Kubeconfig exec credential plugins, the way kubectl runs them.

Managed clusters rarely put a token in the kubeconfig: EKS has ``aws eks get-token``, GKE
``gke-gcloud-auth-plugin``, AKS ``kubelogin``, each named under ``users[].user.exec``. kubectl runs
that command and reads an ``ExecCredential`` (``client.authentication.k8s.io/v1`` or ``v1beta1``)
from its stdout: a bearer token or a client certificate, usually with an expiry. kopf's kubeconfig
login reads static fields only, so without this module ``flashrl operator`` could not reach such a
cluster from a laptop. Credentials from a plugin carry their expiry;
:class:`~flashrl_operator.kube.KubeClient` and kopf both ask again when it passes or on an HTTP 401.

Parsing is pure (:func:`exec_config_of`, :func:`parse_exec_credential`); :func:`run_exec_plugin` is
the one place that starts the command (argument list, no shell, bounded by a timeout).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

EXEC_API_VERSIONS: Final = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
#: How long a plugin may take (an SSO prompt is not possible: the operator is never interactive).
EXEC_TIMEOUT_SECONDS: Final = 60.0


class CredentialError(Exception):
    """The kubeconfig's credential plugin could not produce credentials; the message says why."""


@dataclass(frozen=True)
class ExecConfig:
    """``users[].user.exec`` of the current context, with what the plugin may be told about the cluster."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = None
    """The current cluster's kubeconfig entry, passed on when ``provideClusterInfo`` is true."""
    base_dir: str = "."
    """Directory of the kubeconfig file that named the plugin (relative commands resolve there)."""


@dataclass(frozen=True)
class ExecCredential:
    """What the plugin returned."""

    token: str | None = None
    client_certificate_data: str | None = None
    client_key_data: str | None = None
    expiration: datetime.datetime | None = None


def kubeconfig_paths(environ: Mapping[str, str]) -> list[Path]:
    """``$KUBECONFIG`` (a path list) or ``~/.kube/config``, as kubectl and kopf read them."""
    value = environ.get("KUBECONFIG", "")
    paths = [Path(p.strip()).expanduser() for p in value.split(os.pathsep) if p.strip()]
    if paths:
        return paths
    default = Path("~/.kube/config").expanduser()
    return [default] if default.exists() else []


def exec_config_of(documents: Sequence[tuple[Path, Mapping[str, Any]]]) -> ExecConfig | None:
    """The current context's exec plugin, merging kubeconfig files the way kopf does (first wins)."""
    current: str | None = None
    contexts: dict[str, Mapping[str, Any]] = {}
    clusters: dict[str, Mapping[str, Any]] = {}
    users: dict[str, tuple[Path, Mapping[str, Any]]] = {}
    for path, config in documents:
        if current is None and isinstance(config.get("current-context"), str):
            current = config["current-context"]
        for key, into in (("contexts", contexts), ("clusters", clusters)):
            for item in config.get(key) or []:
                if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                    into.setdefault(item["name"], item.get(key[:-1]) or {})
        for item in config.get("users") or []:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                users.setdefault(item["name"], (path, item.get("user") or {}))
    if current is None or current not in contexts:
        return None
    context = contexts[current]
    found = users.get(str(context.get("user")))
    if found is None:
        return None
    path, user = found
    spec = user.get("exec")
    if not isinstance(spec, Mapping):
        return None
    command = spec.get("command")
    if not isinstance(command, str) or not command:
        raise CredentialError(f"kubeconfig user {context.get('user')!r}: exec has no command")
    api_version = str(spec.get("apiVersion") or EXEC_API_VERSIONS[0])
    if api_version not in EXEC_API_VERSIONS:
        raise CredentialError(
            f"kubeconfig user {context.get('user')!r}: exec apiVersion {api_version!r} is not one of "
            + ", ".join(EXEC_API_VERSIONS)
        )
    env = tuple(
        (str(e["name"]), str(e.get("value", "")))
        for e in spec.get("env") or []
        if isinstance(e, Mapping) and "name" in e
    )
    cluster = clusters.get(str(context.get("cluster"))) if spec.get("provideClusterInfo") else None
    return ExecConfig(
        command=command,
        args=tuple(str(a) for a in spec.get("args") or []),
        env=env,
        api_version=api_version,
        install_hint=str(spec.get("installHint") or ""),
        cluster=cluster,
        base_dir=str(path.parent),
    )


def load_exec_config(environ: Mapping[str, str]) -> ExecConfig | None:
    """Read the kubeconfig files and return the current context's exec plugin, if it has one."""
    documents: list[tuple[Path, Mapping[str, Any]]] = []
    for path in kubeconfig_paths(environ):
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise CredentialError(f"cannot read kubeconfig {path}: {exc}") from exc
        if isinstance(loaded, Mapping):
            documents.append((path, loaded))
    return exec_config_of(documents)


#: Kubeconfig cluster fields a plugin is told when it sets ``provideClusterInfo`` (same names there).
_CLUSTER_INFO_FIELDS: Final = (
    "server",
    "tls-server-name",
    "insecure-skip-tls-verify",
    "certificate-authority-data",
    "proxy-url",
)


def exec_info(config: ExecConfig) -> str:
    """``KUBERNETES_EXEC_INFO``: the request kubectl hands the plugin (never interactive here)."""
    spec: dict[str, Any] = {"interactive": False}
    if config.cluster is not None:
        spec["cluster"] = {
            k: config.cluster[k] for k in _CLUSTER_INFO_FIELDS if config.cluster.get(k) is not None
        }
    return json.dumps({"apiVersion": config.api_version, "kind": "ExecCredential", "spec": spec})


def parse_exec_credential(stdout: str, api_version: str, now: datetime.datetime) -> ExecCredential:
    """Read the plugin's output; every way it can be wrong is a :class:`CredentialError`."""
    try:
        body = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise CredentialError(f"the credential plugin did not print JSON ({exc})") from None
    if not isinstance(body, Mapping) or body.get("kind") != "ExecCredential":
        raise CredentialError("the credential plugin did not print an ExecCredential")
    if body.get("apiVersion") != api_version:
        raise CredentialError(
            f"the credential plugin answered in {body.get('apiVersion')!r}, "
            f"but the kubeconfig asked for {api_version!r}"
        )
    status = body.get("status")
    if not isinstance(status, Mapping):
        raise CredentialError("the credential plugin's ExecCredential has no status")
    token = status.get("token") or None
    cert = status.get("clientCertificateData") or None
    key = status.get("clientKeyData") or None
    if token is None and (cert is None or key is None):
        raise CredentialError(
            "the credential plugin returned neither a token nor a client certificate and key"
        )
    expiration = None
    stamp = status.get("expirationTimestamp")
    if isinstance(stamp, str) and stamp:
        try:
            expiration = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            raise CredentialError(
                f"the credential plugin's expirationTimestamp {stamp!r} is not RFC 3339"
            ) from None
        if expiration.tzinfo is None:
            expiration = expiration.replace(tzinfo=datetime.UTC)
        if expiration <= now:
            raise CredentialError(f"the credential plugin returned credentials that expired at {stamp}")
    return ExecCredential(
        token=str(token) if token else None,
        client_certificate_data=str(cert) if cert else None,
        client_key_data=str(key) if key else None,
        expiration=expiration,
    )


def resolve_command(config: ExecConfig, environ: Mapping[str, str]) -> str:
    """The executable: a bare name is looked up on PATH, a relative path in the kubeconfig's directory."""
    command = config.command
    if os.sep in command and not Path(command).is_absolute():
        command = str(Path(config.base_dir) / command)
    found = shutil.which(command, path=environ.get("PATH"))
    if found is None:
        hint = f" {config.install_hint.strip()}" if config.install_hint.strip() else ""
        raise CredentialError(f"the kubeconfig's credential plugin {config.command!r} was not found.{hint}")
    return found


def run_exec_plugin(
    config: ExecConfig, environ: Mapping[str, str], timeout: float = EXEC_TIMEOUT_SECONDS
) -> ExecCredential:
    """Run the plugin once and return its credentials."""
    command = resolve_command(config, environ)
    env = {**environ, **dict(config.env), "KUBERNETES_EXEC_INFO": exec_info(config)}
    try:
        # An argument list from the user's own kubeconfig, as kubectl runs it; no shell.
        done = subprocess.run(
            [command, *config.args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CredentialError(
            f"the credential plugin {config.command!r} did not finish within {timeout:g}s"
        ) from None
    except OSError as exc:
        raise CredentialError(f"could not run the credential plugin {config.command!r}: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-500:]
        raise CredentialError(
            f"the credential plugin {config.command!r} exited with {done.returncode}"
            + (f": {detail}" if detail else "")
        )
    return parse_exec_credential(done.stdout, config.api_version, datetime.datetime.now(datetime.UTC))
