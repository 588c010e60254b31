"""Kubeconfig exec credential plugins: parsing, and running a real plugin (a small script)."""

from __future__ import annotations

import datetime
import json
import re
import stat
import sys
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from flashrl_operator.credentials import (
    CredentialError,
    ExecConfig,
    exec_config_of,
    exec_info,
    kubeconfig_paths,
    load_exec_config,
    parse_exec_credential,
    run_exec_plugin,
)
from flashrl_operator.kube import resolve_credentials

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
V1 = "client.authentication.k8s.io/v1"


def kubeconfig(
    user: dict[str, Any], *, current: str = "prod", cluster: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "contexts": [
            {"name": "prod", "context": {"cluster": "eks", "user": "sso"}},
            {"name": "local", "context": {"cluster": "eks", "user": "static"}},
        ],
        "clusters": [{"name": "eks", "cluster": cluster or {"server": "https://10.0.0.1:443"}}],
        "users": [{"name": "sso", "user": user}, {"name": "static", "user": {"token": "t"}}],
    }


EKS_USER = {
    "exec": {
        "apiVersion": V1,
        "command": "aws",
        "args": ["eks", "get-token", "--cluster-name", "gpu"],
        "env": [{"name": "AWS_PROFILE", "value": "ml"}],
        "installHint": "Install the AWS CLI: https://aws.amazon.com/cli/",
        "interactiveMode": "Never",
    }
}


def credential(status: dict[str, Any], api_version: str = V1) -> str:
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": status})


def test_exec_config_of_the_current_context() -> None:
    config = exec_config_of([(Path("/home/me/.kube/config"), kubeconfig(EKS_USER))])
    assert config == ExecConfig(
        command="aws",
        args=("eks", "get-token", "--cluster-name", "gpu"),
        env=(("AWS_PROFILE", "ml"),),
        api_version=V1,
        install_hint="Install the AWS CLI: https://aws.amazon.com/cli/",
        cluster=None,
        base_dir="/home/me/.kube",
    )


def test_static_users_have_no_exec_config() -> None:
    assert exec_config_of([(Path("k"), kubeconfig(EKS_USER, current="local"))]) is None
    assert exec_config_of([(Path("k"), {"contexts": []})]) is None


def test_first_file_wins_when_merging() -> None:
    first = {"current-context": "prod", "users": [{"name": "sso", "user": {"token": "from-first"}}]}
    second = kubeconfig(EKS_USER)
    assert exec_config_of([(Path("a"), first), (Path("b"), second)]) is None  # the first "sso" is static


def test_cluster_info_only_when_asked() -> None:
    user = {"exec": {**EKS_USER["exec"], "provideClusterInfo": True}}
    cluster = {"server": "https://10.0.0.1:443", "certificate-authority-data": "Q0E=", "proxy-url": None}
    config = exec_config_of([(Path("k"), kubeconfig(user, cluster=cluster))])
    assert config is not None and config.cluster == cluster
    assert json.loads(exec_info(config)) == {
        "apiVersion": V1,
        "kind": "ExecCredential",
        "spec": {
            "interactive": False,
            "cluster": {"server": "https://10.0.0.1:443", "certificate-authority-data": "Q0E="},
        },
    }


@pytest.mark.parametrize(
    ("exec_spec", "message"),
    [
        ({"apiVersion": V1}, "exec has no command"),
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}, "is not one of"),
    ],
)
def test_bad_exec_configs_are_explained(exec_spec: dict[str, Any], message: str) -> None:
    with pytest.raises(CredentialError, match=message):
        exec_config_of([(Path("k"), kubeconfig({"exec": exec_spec}))])


def test_token_and_expiry_are_read() -> None:
    out = credential({"token": "k8s-aws-v1.abc", "expirationTimestamp": "2026-12-02T12:15:00Z"})
    got = parse_exec_credential(out, V1, NOW)
    assert got.token == "k8s-aws-v1.abc"
    assert got.expiration == datetime.datetime(2026, 12, 2, 12, 15, tzinfo=datetime.UTC)


def test_client_certificate_credentials() -> None:
    out = credential(
        {"clientCertificateData": "-----BEGIN CERTIFICATE-----", "clientKeyData": "-----BEGIN KEY"}
    )
    got = parse_exec_credential(out, V1, NOW)
    assert (got.token, got.client_certificate_data, got.expiration) == (
        None,
        "-----BEGIN CERTIFICATE-----",
        None,
    )


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("Please log in", "did not print JSON"),
        (json.dumps({"kind": "Status"}), "did not print an ExecCredential"),
        (credential({"token": "x"}, "client.authentication.k8s.io/v1beta1"), "but the kubeconfig asked for"),
        (json.dumps({"apiVersion": V1, "kind": "ExecCredential"}), "has no status"),
        (credential({"clientCertificateData": "c"}), "neither a token nor a client certificate and key"),
        (credential({"token": "x", "expirationTimestamp": "tomorrow"}), "is not RFC 3339"),
        (credential({"token": "x", "expirationTimestamp": "2026-12-02T11:00:00Z"}), "expired at"),
    ],
)
def test_bad_plugin_output_is_explained(stdout: str, message: str) -> None:
    with pytest.raises(CredentialError, match=message):
        parse_exec_credential(stdout, V1, NOW)


def test_kubeconfig_paths_follow_the_environment(tmp_path: Path) -> None:
    env = {"KUBECONFIG": f"{tmp_path / 'a'}:{tmp_path / 'b'}:"}
    assert kubeconfig_paths(env) == [tmp_path / "a", tmp_path / "b"]


# --- a real plugin: a script run the way kubectl runs it --------------------------------------------

PLUGIN = """
import json, os, pathlib, sys
here = pathlib.Path(__file__).parent
with (here / "calls.jsonl").open("a") as calls:
    calls.write(json.dumps({"args": sys.argv[1:], "profile": os.environ.get("AWS_PROFILE"),
                            "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"])}) + "\\n")
if (here / "fail").exists():
    print("token request denied: SSO session expired", file=sys.stderr)
    sys.exit(3)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": (here / "token").read_text().strip(),
                             "expirationTimestamp": "2099-01-01T00:00:00Z"}}))
"""


def install_plugin(tmp_path: Path, token: str = "token-1") -> Path:
    """A kubeconfig whose user runs ./bin/get-token (relative: resolved next to the kubeconfig)."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "get-token"
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "bin" / "token").write_text(token)
    user = {
        "exec": {
            "apiVersion": V1,
            "command": "./bin/get-token",
            "args": ["--cluster", "gpu"],
            "env": [{"name": "AWS_PROFILE", "value": "ml"}],
            "provideClusterInfo": True,
        }
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(user, cluster={"server": "http://127.0.0.1:9"})))
    return path


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "bin" / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_run_exec_plugin_runs_the_command_like_kubectl(tmp_path: Path) -> None:
    path = install_plugin(tmp_path)
    config = load_exec_config({"KUBECONFIG": str(path)})
    assert config is not None
    got = run_exec_plugin(config, {"PATH": "/usr/bin:/bin"})
    assert got.token == "token-1"
    (call,) = calls(tmp_path)
    assert call["args"] == ["--cluster", "gpu"]
    assert call["profile"] == "ml"
    assert call["info"]["spec"] == {"interactive": False, "cluster": {"server": "http://127.0.0.1:9"}}


def test_a_failing_plugin_says_what_it_printed(tmp_path: Path) -> None:
    path = install_plugin(tmp_path)
    (tmp_path / "bin" / "fail").touch()
    config = load_exec_config({"KUBECONFIG": str(path)})
    assert config is not None
    with pytest.raises(CredentialError, match=r"exited with 3: token request denied: SSO session expired"):
        run_exec_plugin(config, {"PATH": "/usr/bin:/bin"})


def test_a_missing_plugin_shows_the_install_hint() -> None:
    config = ExecConfig(command="no-such-auth-plugin", install_hint="Install it from the vendor.")
    with pytest.raises(
        CredentialError, match=re.escape("'no-such-auth-plugin' was not found. Install it from the vendor.")
    ):
        run_exec_plugin(config, {"PATH": "/nonexistent"})


def test_resolve_credentials_puts_the_plugin_token_into_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = install_plugin(tmp_path, token="from-plugin")
    monkeypatch.setenv("KUBECONFIG", str(path))
    # Not in a pod: no service account to prefer.
    monkeypatch.setattr(kopf, "login_with_service_account", lambda **_: None)
    info = resolve_credentials(kopf.OperatorSettings())
    assert info is not None
    assert info.server == "http://127.0.0.1:9"
    assert info.as_http_headers() == {"Authorization": "Bearer from-plugin"}
    assert info.expiration == datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)
