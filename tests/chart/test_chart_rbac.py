"""The operator's RBAC is least privilege, identical in both modes, and users get aggregated roles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from chart_support import NAMESPACE, find, one

pytestmark = pytest.mark.chart

#: (apiGroup, resource) -> verbs the operator needs; nothing more, nothing less.
EXPECTED: dict[tuple[str, str], set[str]] = {
    ("flashrl.dev", "flashrljobs"): {"get", "list", "watch", "create", "patch"},
    ("flashrl.dev", "flashrljobs/status"): {"get", "patch"},
    ("flashrl.dev", "flashrlexperiments"): {"get", "list", "watch", "patch"},
    ("flashrl.dev", "flashrlexperiments/status"): {"get", "patch"},
    ("ray.io", "rayjobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("ray.io", "rayclusters"): {"get", "list", "watch", "patch"},
    ("kueue.x-k8s.io", "workloads"): {"list"},
    ("", "pods"): {"list"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "persistentvolumeclaims"): {"get", "patch"},
    ("", "configmaps"): {"get", "create", "patch", "delete"},
    ("", "serviceaccounts"): {"get", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "roles"): {"get", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "create", "patch", "delete"},
    ("networking.k8s.io", "networkpolicies"): {"get", "create", "patch", "delete"},
    ("", "events"): {"create", "patch"},
}
#: Only the cluster-wide ClusterRole adds these (kopf's CRD scanning; read-only).
CLUSTER_ONLY: dict[tuple[str, str], set[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    # The GPU nodes, listed before a new job creates anything (NeverFits); cluster-scoped.
    ("", "nodes"): {"list"},
    # The PriorityClass a new job's pods name, read before it creates anything (PriorityClassNotFound).
    ("scheduling.k8s.io", "priorityclasses"): {"get"},
}


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """Flatten rules to (group, resource) -> verbs, refusing wildcards and name restrictions."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {field}: {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_cluster_mode_grants_exactly_the_needed_verbs(default_docs: list[dict[str, Any]]) -> None:
    roles = [
        r for r in find(default_docs, "ClusterRole") if "aggregate-to" not in str(r["metadata"]["labels"])
    ]
    (role,) = roles
    assert grants(role["rules"]) == EXPECTED | CLUSTER_ONLY
    binding = one(default_docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa = one(default_docs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert not find(default_docs, "Role") and not find(default_docs, "RoleBinding")


def test_namespace_mode_has_a_role_per_namespace_and_no_cluster_role(
    render: Callable[..., list[dict[str, Any]]],
) -> None:
    docs = render({"watchNamespaces": "{team-a,team-b}", "rbac.aggregateToDefaultRoles": "false"})
    assert not find(docs, "ClusterRole") and not find(docs, "ClusterRoleBinding")
    roles = find(docs, "Role")
    bindings = find(docs, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    sa = one(docs, "ServiceAccount")
    for role in roles:
        assert grants(role["rules"]) == EXPECTED
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
        ]


def test_both_modes_share_one_rule_set(
    default_docs: list[dict[str, Any]], render: Callable[..., list[dict[str, Any]]]
) -> None:
    cluster_role = next(
        r for r in find(default_docs, "ClusterRole") if "aggregate-to" not in str(r["metadata"]["labels"])
    )
    role = find(render({"watchNamespaces": "{team-a}"}), "Role")[0]
    assert cluster_role["rules"][: len(role["rules"])] == role["rules"]
    assert grants(cluster_role["rules"][len(role["rules"]) :]) == CLUSTER_ONLY


def test_aggregated_user_roles(default_docs: list[dict[str, Any]]) -> None:
    by_label = {}
    for role in find(default_docs, "ClusterRole"):
        labels = role["metadata"]["labels"]
        key = frozenset(
            k for k, v in labels.items() if k.startswith("rbac.authorization.k8s.io/") and v == "true"
        )
        by_label[key] = role
    editor = by_label[
        frozenset(
            {"rbac.authorization.k8s.io/aggregate-to-edit", "rbac.authorization.k8s.io/aggregate-to-admin"}
        )
    ]
    viewer = by_label[frozenset({"rbac.authorization.k8s.io/aggregate-to-view"})]
    editor_grants = grants(editor["rules"])
    assert editor_grants[("flashrl.dev", "flashrljobs")] >= {
        "create",
        "update",
        "patch",
        "delete",
        "get",
        "list",
    }
    assert (
        editor_grants[("flashrl.dev", "flashrlexperiments")] == editor_grants[("flashrl.dev", "flashrljobs")]
    )
    assert editor_grants[("flashrl.dev", "flashrljobs/status")] == {"get"}
    assert editor_grants[("flashrl.dev", "flashrlexperiments/status")] == {"get"}
    viewer_grants = grants(viewer["rules"])
    assert viewer_grants == {
        ("flashrl.dev", "flashrljobs"): {"get", "list", "watch"},
        ("flashrl.dev", "flashrljobs/status"): {"get"},
        ("flashrl.dev", "flashrlexperiments"): {"get", "list", "watch"},
        ("flashrl.dev", "flashrlexperiments/status"): {"get"},
    }


def test_rbac_and_service_account_can_be_disabled(render: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render(
        {"rbac.create": "false", "serviceAccount.create": "false", "serviceAccount.name": "existing"}
    )
    assert not find(docs, "ServiceAccount")
    assert not find(docs, "ClusterRoleBinding") and not find(docs, "RoleBinding")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"


def test_every_kind_the_operator_applies_or_reads_is_granted(default_docs: list[dict[str, Any]]) -> None:
    """A child kind added to the renderer (and to flashrl_operator.vocab.kinds) needs its chart rule."""
    from flashrl_operator.vocab.kinds import ANNOTATED_KINDS, CHILD_KINDS, READ_KINDS

    (role,) = [
        r for r in find(default_docs, "ClusterRole") if "aggregate-to" not in str(r["metadata"]["labels"])
    ]
    granted = grants(role["rules"])
    for kind in CHILD_KINDS:
        # A server-side apply that creates the object needs `create` as well as `patch`.
        assert granted.get((kind.group, kind.plural), set()) >= {"get", "create", "patch"}, kind
    for kind in READ_KINDS:
        assert granted.get((kind.group, kind.plural)), kind
    for kind in ANNOTATED_KINDS:
        # Read, and annotated with a merge patch (the claims: what is staged on them).
        assert granted.get((kind.group, kind.plural), set()) >= {"get", "patch"}, kind


def documented_grants(path: str) -> dict[tuple[str, str], set[str]]:
    """The `| apiGroup | resources | verbs | ...` table of a doc, as (group, resource) -> verbs."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / path).read_text(encoding="utf-8")
    table = text[text.index("| apiGroup | resources | verbs |") :].split("\n\n", 1)[0]
    out: dict[tuple[str, str], set[str]] = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        group = cells[0].strip("`").strip('"')
        verbs = {v.strip() for v in cells[2].split("(")[0].split(",") if v.strip()}
        for resource in cells[1].split(","):
            out[(group, resource.strip().strip("`"))] = verbs
    return out


@pytest.mark.parametrize("doc", ["docs/install.md", "docs/operator.md"])
def test_documented_rbac_is_what_the_chart_grants(doc: str, default_docs: list[dict[str, Any]]) -> None:
    (role,) = [
        r for r in find(default_docs, "ClusterRole") if "aggregate-to" not in str(r["metadata"]["labels"])
    ]
    assert documented_grants(doc) == grants(role["rules"])
