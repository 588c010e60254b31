"""One credential path through kubernetes_asyncio: in-cluster tokens, kubeconfig, proxy-url, client certs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from kubeconfigs import kubeconfig, serving

from flashrl_operator.client.kube import KubeClient
from flashrl_operator.client.login import CredentialError, Credentials
from flashrl_operator.run.handlers import OperatorConfig, credentials_for
from flashrl_operator.vocab.kuberay import RAY_JOB


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


async def test_in_cluster_tokens_are_read_again_when_loaded_again(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("token-1")
    (tmp_path / "ca.crt").write_text("not checked until a request is made")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    credentials = Credentials(environ=env, service_account_dir=tmp_path)
    assert credentials.available()
    config = await credentials.configuration()
    assert config.host == "https://10.0.0.1:443"
    assert await config.get_api_key_with_prefix("BearerToken") == "Bearer token-1"
    (tmp_path / "token").write_text("token-2")  # the kubelet rotated the projected token
    assert (
        await (await credentials.configuration()).get_api_key_with_prefix("BearerToken") == "Bearer token-2"
    )
    assert (await credentials.connection_info()).token == "token-2"


async def test_kubeconfig_is_read_when_called_and_client_certificates_are_kept(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    credentials = Credentials(environ=env)
    env["KUBECONFIG"] = str(tmp_path / "missing")
    assert not credentials.available()
    with pytest.raises(CredentialError, match="no Kubernetes credentials"):
        await credentials.configuration()
    (tmp_path / "client.crt").write_text("CERT")
    (tmp_path / "client.key").write_text("KEY")
    user = {"client-certificate": str(tmp_path / "client.crt"), "client-key": str(tmp_path / "client.key")}
    env["KUBECONFIG"] = f"{tmp_path / 'missing'}:" + str(
        kubeconfig(
            tmp_path / "config",
            {"server": "https://api.example:6443", "insecure-skip-tls-verify": True},
            user,
        )
    )
    info = await credentials.connection_info()
    assert info.server == "https://api.example:6443" and info.insecure
    assert info.certificate_path is not None and read(info.certificate_path) == "CERT"
    assert info.private_key_path is not None and read(info.private_key_path) == "KEY"


async def test_a_bad_kubeconfig_is_a_credential_error(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", {"server": "http://127.0.0.1:9"}, {"exec": {"command": "x"}})
    with pytest.raises(CredentialError, match="apiVersion"):
        await Credentials(environ={"KUBECONFIG": str(path)}).configuration()


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A forward proxy on loopback that answers for the API server and records what it was asked."""
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(f"{request.method} {request.url}")
        return web.json_response({"metadata": {"name": "via-proxy"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with serving(app) as url:
        yield url, asked


async def test_the_kubeconfigs_proxy_url_carries_the_operators_requests_and_kopfs(
    tmp_path: Path, proxy: tuple[str, list[str]]
) -> None:
    proxy_url, asked = proxy
    # A server no one listens on: only the proxy can answer.
    path = kubeconfig(
        tmp_path / "config",
        {"server": "http://api.cluster.invalid:6443", "proxy-url": proxy_url},
        {"token": "t"},
    )
    credentials = Credentials(environ={"KUBECONFIG": str(path)})
    assert (await credentials.connection_info()).proxy_url == proxy_url
    client = await KubeClient.connect(credentials)
    try:
        assert await client.get(RAY_JOB, "ml", "x") == {"metadata": {"name": "via-proxy"}}
    finally:
        await client.close()
    assert asked == ["GET http://api.cluster.invalid:6443/apis/ray.io/v1/namespaces/ml/rayjobs/x"]


async def test_an_explicit_kubeconfig_wins_over_the_environment_and_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flashrl operator --kubeconfig FILE`` as kubectl's flag: that file, whatever $KUBECONFIG says and
    even inside a pod."""
    chosen = kubeconfig(tmp_path / "chosen", {"server": "https://chosen:6443"}, {"token": "t"})
    other = kubeconfig(tmp_path / "other", {"server": "https://other:6443"}, {"token": "o"})
    monkeypatch.setenv("KUBECONFIG", str(other))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert (await credentials_for(OperatorConfig(kubeconfig=str(chosen))).connection_info()).server == (
        "https://chosen:6443"
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert (await credentials_for(OperatorConfig()).connection_info()).server == "https://other:6443"
