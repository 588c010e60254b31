"""The chart against the Prometheus Operator's CRDs and the conventions of kube-prometheus-stack: durations,
scrape timeouts, merged labels, trusted scrape labels, NOTES, README, Chart.yaml; and the dashboard's
panels (ids, units, the Jobs table, the Reconcile axes)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from chart_support import CHART, NAMESPACE, RELEASE, REPO, one, run_helm, set_args, template

from envtest.upstream import prometheus_operator_crds
from flashrl_operator.generate.dashboard import dashboard

pytestmark = pytest.mark.chart

ALL_ON = {
    "metrics.serviceMonitor.enabled": "true",
    "monitoring.podMonitor.enabled": "true",
    "monitoring.prometheusRule.enabled": "true",
    "monitoring.dashboard.enabled": "true",
}
CRD_FILES = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


def crd_schema(kind: str) -> dict[str, Any]:
    """The Prometheus Operator's own schema of ``kind``, from its Go module (``make tools``)."""
    (path,) = [p for p in prometheus_operator_crds() if p.name == CRD_FILES[kind]]
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def render_text(values: dict[str, str], *extra: str, check: bool = True) -> str:
    proc = run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values), *extra, check=check
    )
    return proc.stdout if check else proc.stderr


# --- the Prometheus Operator's CRDs ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_monitoring_objects_validate_against_the_prometheus_operators_crds(kind: str) -> None:
    values = {**ALL_ON, "metrics.serviceMonitor.interval": "1d", "monitoring.podMonitor.interval": "1h30m"}
    # Not jsonschema.validate: it first checks the schema, and one CRD pattern uses Go's mid-pattern
    # "(?i)" that Python's re refuses (on a field the chart does not set).
    errors = [
        e.message
        for e in jsonschema.Draft7Validator(crd_schema(kind)).iter_errors(one(template(values), kind))
    ]
    assert errors == []


def test_the_duration_pattern_is_the_crds_own() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    endpoint = crd_schema("ServiceMonitor")["properties"]["spec"]["properties"]["endpoints"]["items"]
    assert schema["definitions"]["duration"]["pattern"] == endpoint["properties"]["interval"]["pattern"]


@pytest.mark.parametrize("duration", ["1d", "1h30m", "30s", "500ms", "2w", "0"])
def test_durations_the_prometheus_operator_accepts_are_accepted(duration: str) -> None:
    keys = ("metrics.serviceMonitor", "monitoring.podMonitor")
    extra = [arg for key in keys for arg in ("--set-string", f"{key}.interval={duration}")]
    if duration in ("500ms", "0"):  # shorter than the default 10s timeout: give each a shorter one
        extra += [arg for key in keys for arg in ("--set-string", f"{key}.scrapeTimeout={duration}")]
    docs = template(ALL_ON, extra)
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"] == duration
    assert one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["interval"] == duration


@pytest.mark.parametrize("duration", ["30s1m", "5m10m", "1m1h", "", "10", "1.5m", "-1s"])
def test_durations_the_prometheus_operator_refuses_are_refused(duration: str) -> None:
    for key in ("metrics.serviceMonitor.interval", "monitoring.podMonitor.scrapeTimeout"):
        stderr = render_text({**ALL_ON, key: duration}, check=False)
        assert "values don't meet the specifications of the schema" in stderr, (key, duration, stderr)


@pytest.mark.parametrize("monitor", ["metrics.serviceMonitor", "monitoring.podMonitor"])
def test_a_scrape_timeout_longer_than_the_interval_fails_with_a_message(monitor: str) -> None:
    stderr = render_text(
        {**ALL_ON, f"{monitor}.interval": "1m", f"{monitor}.scrapeTimeout": "1m30s"}, check=False
    )
    assert f"{monitor}.scrapeTimeout (1m30s) must not be longer than {monitor}.interval (1m)" in stderr
    # Equal is fine; so is a day-long interval against the default 10s timeout.
    template({**ALL_ON, f"{monitor}.interval": "1m", f"{monitor}.scrapeTimeout": "60s"})
    template({**ALL_ON, f"{monitor}.interval": "1d"})


# --- labels ----------------------------------------------------------------------------------------------


TEMPLATES = {
    "ConfigMap": "dashboard",
    "PodMonitor": "podmonitor",
    "PrometheusRule": "prometheusrule",
    "ServiceMonitor": "servicemonitor",
}


def _label_lines(text: str, kind: str) -> list[str]:
    """The raw ``metadata.labels`` lines of the one document of ``kind`` (a YAML parser would silently
    keep only the last of two equal keys, the very defect under test)."""
    (doc,) = [d for d in text.split("\n---") if re.search(rf"^kind: {kind}$", d, re.M)]
    block = re.search(r"^  labels:\n((?:    .*\n)+)", doc, re.M)
    assert block is not None
    return block.group(1).splitlines()


@pytest.mark.parametrize(
    ("kind", "key"),
    [
        ("ConfigMap", "monitoring.dashboard.labels"),
        ("PodMonitor", "monitoring.podMonitor.labels"),
        ("PrometheusRule", "monitoring.prometheusRule.labels"),
        ("ServiceMonitor", "metrics.serviceMonitor.labels"),
    ],
)
def test_user_labels_are_merged_into_the_fixed_ones_never_appended(kind: str, key: str) -> None:
    text = render_text(
        {
            **ALL_ON,
            f"{key}.grafana_dashboard": "flashrl",
            f"{key}.app\\.kubernetes\\.io/part-of": "ml-platform",
            f"{key}.release": "prometheus",
        },
        "--show-only",
        f"templates/{TEMPLATES[kind]}.yaml",
    )
    lines = _label_lines(text, kind)
    keys = [line.split(":")[0].strip() for line in lines]
    assert len(keys) == len(set(keys)), lines
    labels = yaml.safe_load("\n".join(line[4:] for line in lines))
    assert labels["grafana_dashboard"] == "flashrl" and labels["release"] == "prometheus"
    assert labels["app.kubernetes.io/part-of"] == "ml-platform"
    assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_the_dashboard_keeps_its_sidecar_label_and_the_deprecated_service_monitor_key_still_works() -> None:
    docs = template({**ALL_ON, "metrics.serviceMonitor.additionalLabels.team": "ml"})
    dashboards = [
        d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]
    ]
    assert [d["metadata"]["labels"]["grafana_dashboard"] for d in dashboards] == ["1"]
    assert one(docs, "ServiceMonitor")["metadata"]["labels"]["team"] == "ml"


def test_the_observability_install_command_labels_every_monitoring_object_alike() -> None:
    text = (REPO / "docs" / "observability.md").read_text(encoding="utf-8")
    command = re.search(r"helm upgrade --install flashrl .*?```", text, re.S)
    assert command is not None
    labelled = set(re.findall(r"--set-string ([\w.]+)\.labels\.release=prometheus", command.group(0)))
    enabled = {
        k.removesuffix(".enabled") for k in re.findall(r"--set ([\w.]+\.enabled)=true", command.group(0))
    }
    assert labelled == enabled - {"monitoring.dashboard"}
    assert "metrics.serviceMonitor" in labelled


# --- whose labels a scrape trusts ------------------------------------------------------------------------


def test_the_jobs_pod_monitor_does_not_honour_the_series_labels() -> None:
    (endpoint,) = one(template(ALL_ON), "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is False
    assert endpoint["relabelings"] == [
        {
            "sourceLabels": ["__meta_kubernetes_pod_label_flashrl_dev_job"],
            "targetLabel": "job",
            "action": "replace",
        }
    ]
    (drop,) = endpoint["metricRelabelings"]
    assert drop["action"] == "labeldrop"
    assert re.fullmatch(drop["regex"], "exported_namespace") and re.fullmatch(drop["regex"], "exported_job")
    assert not re.fullmatch(drop["regex"], "namespace")


def test_the_pods_job_label_is_the_one_the_relabeling_reads() -> None:
    from flashrl_operator.render.labels import JOB_LABEL

    meta = "__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9_]", "_", JOB_LABEL)
    (endpoint,) = one(template(ALL_ON), "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["relabelings"][0]["sourceLabels"] == [meta]


# --- NOTES, README, Chart.yaml ---------------------------------------------------------------------------


def test_notes_name_both_crds() -> None:
    proc = run_helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "flashrljobs.flashrl.dev" in notes and "flashrlexperiments.flashrl.dev" in notes
    assert "kubectl delete crd flashrljobs.flashrl.dev flashrlexperiments.flashrl.dev" in notes


def _leaf_keys(values: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted keys down to the ones the README documents as one row (maps of free keys are leaves)."""
    whole = {"resources.requests", "resources.limits", "securityContext.capabilities"}
    keys: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in whole and not path.endswith("seccompProfile"):
            keys |= _leaf_keys(value, path + ".")
        else:
            keys.add(path)
    return keys


def test_the_chart_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]*)` \| (.+) \|$", readme, re.M)
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert [key for key, _, _ in rows] and {key for key, _, _ in rows} == _leaf_keys(values)
    assert all(text.strip() for _, _, text in rows), "every row says what the value does"
    for key, default, _ in rows:
        node: Any = values
        for part in key.split("."):
            node = node[part]
        shown = json.dumps(node) if not isinstance(node, str) or node == "" else node
        assert default == shown, key


def test_chart_yaml_names_its_home_and_sources() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["home"].startswith("https://")
    assert chart["sources"] and all(s.startswith("https://") for s in chart["sources"])


# --- the dashboard ---------------------------------------------------------------------------------------

#: Unit ids Grafana ships (public/app/features/dimensions / @grafana/data valueFormats) that the
#: dashboard may use, plus Grafana's custom-unit syntax ("suffix:<text>").
GRAFANA_UNITS = {"short", "percent", "percentunit", "s", "ms", "cps", "ops", "reqps", "none", "bytes"}


def _panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"]]


def test_every_panel_has_a_unique_id() -> None:
    ids = [p.get("id") for p in _panels()]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids)


def test_every_unit_is_one_grafana_knows() -> None:
    units = [p["fieldConfig"]["defaults"]["unit"] for p in _panels() if "fieldConfig" in p]
    units += [
        prop["value"]
        for p in _panels()
        for o in p.get("fieldConfig", {}).get("overrides", [])
        for prop in o["properties"]
        if prop["id"] == "unit"
    ]
    unknown = [u for u in units if u not in GRAFANA_UNITS and not u.startswith("suffix:")]
    assert unknown == []


def test_the_jobs_table_is_an_instant_query_in_table_format() -> None:
    (jobs,) = [p for p in _panels() if p["title"] == "Jobs"]
    assert jobs["type"] == "table"
    (target,) = jobs["targets"]
    assert target["instant"] is True and target["range"] is False and target["format"] == "table"


def test_reconcile_does_not_put_seconds_and_errors_under_one_unit() -> None:
    for panel in [p for p in _panels() if "targets" in p]:
        default = panel["fieldConfig"]["defaults"]["unit"]
        overridden = {
            o["matcher"]["options"]: prop["value"]
            for o in panel["fieldConfig"]["overrides"]
            if o["matcher"]["id"] == "byFrameRefID"
            for prop in o["properties"]
            if prop["id"] == "unit"
        }
        for target in panel["targets"]:
            unit = overridden.get(target["refId"], default)
            if "rate(" in target["expr"] and "histogram_quantile" not in target["expr"]:
                assert unit != "s", (panel["title"], target["expr"])
            if "histogram_quantile" in target["expr"] and "duration" in target["expr"]:
                assert unit == "s", (panel["title"], target["expr"])


def test_the_chart_readme_is_packaged() -> None:
    ignore = (CHART / ".helmignore").read_text(encoding="utf-8")
    assert "README" not in ignore
    assert Path(CHART / "README.md").is_file()
