"""The chart's monitoring parts: PodMonitor, PrometheusRule (promtool check + unit tests) and the Grafana
dashboard (every query names an exported series and is valid PromQL for promtool)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import CHART, find, one, template

from flashrl_api import exported_metrics
from flashrl_operator.generate.dashboard import dashboard_json
from flashrl_operator.render.labels import MANAGED_BY
from flashrl_operator.render.pod import METRICS_PORT
from flashrl_operator.vocab import metrics as operator_metrics

pytestmark = pytest.mark.chart

ON = {
    "monitoring.podMonitor.enabled": "true",
    "monitoring.prometheusRule.enabled": "true",
    "monitoring.dashboard.enabled": "true",
}
DASHBOARD_FILE = CHART / "files" / "dashboards" / "flashrl-jobs.json"
RULES_TEST = Path(__file__).parent / "rules_test.yaml"
ALERTS = {
    "FlashRLJobStalled",
    "FlashRLRolloutMismatchHigh",
    "FlashRLThroughputDropped",
    "FlashRLWeightSyncSlow",
    "FlashRLRolloutPoolStarvesTrainer",
    "FlashRLJobFailed",
}

#: Every series name the launcher or the operator exports (histograms also as _bucket/_sum/_count).
EXPORTED = set(exported_metrics.ALL) | {
    value
    for name, value in vars(operator_metrics).items()
    if name.isupper() and isinstance(value, str) and value.startswith("flashrl_")
}


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: `make tools` installs Debian's prometheus package"
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=120)


def series_names(expr: str) -> set[str]:
    """The flashrl_* series an expression reads (histogram suffixes folded into their family)."""
    names = set(re.findall(r"\bflashrl_[a-z0-9_]+", expr))
    return {
        re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count")) else n
        for n in names
    }


def test_all_off_by_default() -> None:
    docs = template()
    assert not find(docs, "PodMonitor") and not find(docs, "PrometheusRule")
    assert not [d for d in find(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"].get("labels", {})]


def test_pod_monitor_scrapes_the_launchers_port_on_head_pods_with_the_pods_own_labels() -> None:
    monitor = one(template({**ON, "monitoring.podMonitor.labels.release": "prom"}), "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    selector = monitor["spec"]["selector"]["matchLabels"]
    # The labels the operator's renderer puts on the Ray pods, plus KubeRay's head label.
    assert selector == {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/component": "ray-job",
        "ray.io/node-type": "head",
    }
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == METRICS_PORT[0] and endpoint["path"] == "/metrics"
    # The pod's namespace and flashrl.dev/job label, never what its series claim (tenant spoofing).
    assert endpoint["honorLabels"] is False
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_label_flashrl_dev_job"],
        "targetLabel": "job",
    }.items() <= (endpoint["relabelings"][0].items())
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    scoped = one(template({**ON, "monitoring.podMonitor.namespaces": "{team-a}"}), "PodMonitor")
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def rendered_rules(*extra: str) -> dict[str, Any]:
    rule = one(template(ON, extra), "PrometheusRule")
    return {"groups": rule["spec"]["groups"]}


def test_rules_pass_promtool_check_and_name_exported_series(tmp_path: Path) -> None:
    rules = rendered_rules()
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert set(alerts) == ALERTS
    for name, rule in alerts.items():
        assert series_names(rule["expr"]) <= EXPORTED, name
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(tmp_path / "rules.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


def test_each_alert_fires_and_stays_quiet_in_promtools_unit_tests(tmp_path: Path) -> None:
    rules = rendered_rules()
    # The unit tests check labels; the annotation templates are checked by `promtool check rules`.
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yaml")
    tested = promtool("test", "rules", "rules_test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    covered = set(re.findall(r"alertname: (\w+)", RULES_TEST.read_text()))
    assert covered == ALERTS


def test_thresholds_follow_values() -> None:
    rules = rendered_rules("--set-json", "monitoring.prometheusRule.mismatchKL=0.05")
    mismatch = next(
        r for g in rules["groups"] for r in g["rules"] if r["alert"] == "FlashRLRolloutMismatchHigh"
    )
    assert mismatch["expr"] == "abs(flashrl_rollout_mismatch_kl) > 0.05"
    rules = rendered_rules("--set-json", "monitoring.prometheusRule.weightSyncShare=0.35")
    sync = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "FlashRLWeightSyncSlow")
    assert sync["expr"].endswith("> 0.35") and sync["for"] == "15m"


def test_dashboard_file_is_generated_from_code() -> None:
    assert DASHBOARD_FILE.read_text() == dashboard_json(), (
        "regenerate: .venv/bin/python -m flashrl_operator.generate.dashboard > "
        + str(DASHBOARD_FILE.relative_to(CHART.parents[1]))
    )


def dashboard_exprs(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def test_dashboard_configmap_queries_only_exported_series_as_valid_promql(tmp_path: Path) -> None:
    docs = template(ON)
    (cm,) = [
        d for d in find(docs, "ConfigMap") if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    board = json.loads(cm["data"]["flashrl-jobs.json"])
    names = {v["name"]: v for v in board["templating"]["list"]}
    assert names["namespace"]["multi"] and names["job"]["multi"]
    titles = {p["title"] for p in board["panels"]}
    assert {
        "Progress",
        "Validation score",
        "Response length",
        "Throughput per GPU",
        "Phase timings",
        "Mismatch KL",
        "IS effective sample size",
        "Jobs",
    } <= titles
    queries = [q for q in dashboard_exprs(board) if not q.startswith("label_values(")]
    used: set[str] = set()
    for query in queries:
        found = series_names(query)
        assert found, query
        assert found <= EXPORTED, f"{query} reads {found - EXPORTED}, which nothing exports"
        used |= found
    assert exported_metrics.MISMATCH_KL in used and operator_metrics.JOB_INFO in used
    assert exported_metrics.GPU_SECONDS in used  # the goodput row
    goodput = [p for p in board["panels"] if p.get("title") == "GPUs by phase"]
    assert goodput and goodput[0]["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert any(p["type"] == "row" and p["title"] == "Where the GPU-hours go" for p in board["panels"])
    # Grafana's variables replaced by what they expand to, each query becomes a recording rule: promtool
    # parses every one of them.
    concrete = [
        q.replace("$__rate_interval", "5m")
        .replace("$__range", "1d")
        .replace("$namespace", ".*")
        .replace("$job", ".*")
        for q in queries
    ]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:q{i}", "expr": q} for i, q in enumerate(concrete)],
            }
        ]
    }
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(tmp_path / "dashboard-rules.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
