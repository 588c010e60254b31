"""The emulated API server's server-side apply does what the operator relies on: create, remove, conflict."""

from __future__ import annotations

import pytest

from flashrl_operator.client.errors import ConflictError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.client.login import Credentials
from flashrl_operator.sim import EmulatedCluster
from flashrl_operator.vocab.kinds import CONFIG_MAP

pytestmark = pytest.mark.kmock(
    reason="tests the emulator itself (its server-side apply), which the kmock tests rely on"
)

NS = "team-a"


def config_map(**data: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": NS},
        "data": data,
    }


async def test_apply_creates_converges_and_reports_conflicts(emulated: EmulatedCluster) -> None:
    kube = await KubeClient.connect(Credentials(emulated.url))
    try:
        created = await kube.apply(config_map(a="1", b="2"), force=False)
        assert created["data"] == {"a": "1", "b": "2"}
        version = created["metadata"]["resourceVersion"]
        # The same configuration again changes nothing: no new resourceVersion.
        again = await kube.apply(config_map(a="1", b="2"), force=False)
        assert again["metadata"]["resourceVersion"] == version
        # A field this manager applied before and no longer applies is removed.
        dropped = await kube.apply(config_map(a="1"), force=False)
        assert dropped["data"] == {"a": "1"}
        # Someone else sets a field; applying another value for it conflicts unless forced.
        await emulated.api.patch("v1/configmaps", NS, "cm", {"data": {"a": "theirs"}})
        with pytest.raises(ConflictError, match=r"data\.a"):
            await kube.apply(config_map(a="1"), force=False)
        forced = await kube.apply(config_map(a="1"), force=True)
        assert forced["data"] == {"a": "1"}
        assert await kube.get(CONFIG_MAP, NS, "cm") == forced
        # Creation and the two stored changes were recorded as this manager's applies.
        applies = [w for w in emulated.server.writes if w.plural == "configmaps" and w.verb == "apply"]
        assert [w.actor for w in applies] == ["flashrl-operator"] * 3
    finally:
        await kube.close()
