"""The Grafana dashboard the chart ships (``files/dashboards/flashrl-jobs.json``), built from code.

Code rather than hand-kept JSON because every query names series from one place
(:mod:`flashrl_api.exported_metrics` for the launcher, :mod:`flashrl_operator.vocab.metrics` for the
operator): a renamed metric changes the dashboard with it, and a test checks every expression against
the names actually exported and through ``promtool``. The JSON is Grafana's dashboard model (schema
version 39, Grafana 10/11; https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/),
loaded by the kube-prometheus-stack Grafana sidecar from a ConfigMap labelled ``grafana_dashboard: "1"``.

Regenerate after a change (the drift test says the same)::

    .venv/bin/python -m flashrl_operator.generate.dashboard \
        > charts/flashrl-operator/files/dashboards/flashrl-jobs.json
"""

from __future__ import annotations

import json
import sys
from typing import Any, Final

from flashrl_api import exported_metrics as m
from flashrl_api.goodput import TRAINING
from flashrl_operator.vocab import metrics as op

UID: Final = "flashrl-jobs"
#: Every job-level query is restricted to the selected namespaces and jobs (multi-select: an FP8 and a
#: BF16 job overlay in one panel).
SEL: Final = 'namespace=~"$namespace", job=~"$job"'
LEGEND: Final = "{{namespace}}/{{job}}"


def _target(expr: str, legend: str = LEGEND, ref: str = "A", table: bool = False) -> dict[str, Any]:
    """A Prometheus query; ``table``: the current value of each series as a row (an instant query in
    table format), not a range of samples a table would show as one row per timestamp."""
    target: dict[str, Any] = {
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
    }
    if table:
        target.update({"instant": True, "range": False, "format": "table"})
    return target


def _panel(
    title: str,
    targets: list[dict[str, Any]],
    width: int,
    unit: str = "short",
    kind: str = "timeseries",
    description: str = "",
    overrides: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A panel ``width`` columns wide (of 24); :func:`_rows` places it."""
    for i, target in enumerate(targets):
        target["refId"] = chr(ord("A") + i)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": 0, "y": 0, "w": width, "h": 0},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": overrides or []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": targets,
    }


def _series_panel(
    title: str,
    metric: str,
    width: int,
    unit: str = "short",
    kind: str = "timeseries",
    description: str = "",
    labels: str = "",
) -> dict[str, Any]:
    """A panel of one metric's series of the selected jobs (``labels``: more matchers), one line a job."""
    return _panel(title, [_target(_selected(metric, labels))], width, unit, kind, description)


def _rows(y: int, *rows: tuple[str, int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows from ``y`` down, each a (title, height, panels): its header, then its panels side by side,
    left to right, as tall as the row."""
    laid_out: list[dict[str, Any]] = []
    for title, height, row_panels in rows:
        laid_out.append(
            {"type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}}
        )
        x = 0
        for panel in row_panels:
            panel["gridPos"].update(x=x, y=y + 1, h=height)
            x += panel["gridPos"]["w"]
        laid_out.extend(row_panels)
        y += 1 + height
    return laid_out


def _selected(metric: str, labels: str = "") -> str:
    """The series of ``metric`` of the selected namespaces and jobs (``labels``: more matchers)."""
    return f"{metric}{{{SEL}{labels}}}"


#: Grafana has no tokens unit; a custom unit ("suffix:<text>", Grafana's own syntax) appends the text.
TOKENS_PER_SECOND: Final = "suffix: tokens/s"


def _unit_override(ref: str, unit: str, right_axis: bool = False) -> dict[str, Any]:
    """Another unit for one query's series (so seconds and a rate never share an axis)."""
    properties: list[dict[str, Any]] = [{"id": "unit", "value": unit}]
    if right_axis:
        properties.append({"id": "custom.axisPlacement", "value": "right"})
    return {"matcher": {"id": "byFrameRefID", "options": ref}, "properties": properties}


def panels() -> list[dict[str, Any]]:
    """The dashboard's panels, top to bottom."""
    progress = [
        _panel(
            "Progress",
            [_target(f"100 * {_selected(m.TRAINING_STEP)} / {_selected(m.TRAINING_TOTAL_STEPS)}")],
            6,
            unit="percent",
            description="Completed training steps over the run's total.",
        ),
        _series_panel(
            "Time left",
            m.TRAINING_REMAINING_SECONDS,
            6,
            unit="s",
            kind="stat",
            description="Steps left times the mean of the last 10 step durations.",
        ),
        _panel(
            "Seconds since the last step",
            [_target(f"time() - {_selected(m.TRAINING_LAST_STEP_TIMESTAMP)}")],
            6,
            unit="s",
            description="FlashRLJobStalled fires when this exceeds a multiple of the step time.",
        ),
        _panel(
            "Steps since the last checkpoint",
            [_target(f"{_selected(m.TRAINING_STEP)} - {_selected(m.CHECKPOINT_STEP)}")],
            6,
            description="Completed steps a failure now would lose (the retry resumes from "
            "flashrl_checkpoint_step); at most spec.checkpoint.interval - 1.",
        ),
    ]
    quality = [
        _panel(
            "Validation score",
            [
                _target(
                    _selected(m.VALIDATION_SCORE, ', metric=~".*/mean@.*"'),
                    "{{job}} {{data_source}} {{metric}}",
                )
            ],
            12,
            unit="percentunit",
            description="verl's val-core/<data source>/<variable>/mean@N (AIME-2024 in the origin recipe).",
        ),
        _panel(
            "Response length",
            [
                _target(_selected(m.RESPONSE_LENGTH, ', stat="mean"'), "{{job}} mean"),
                _target(_selected(m.RESPONSE_LENGTH, ', stat="max"'), "{{job}} max"),
            ],
            6,
            description="Response tokens per step (verl response_length/mean and /max).",
        ),
        _series_panel(
            "Responses cut at the maximum length",
            m.RESPONSE_LENGTH,
            6,
            labels=', stat="clip_ratio"',
            unit="percentunit",
            description="verl response_length/clip_ratio.",
        ),
    ]
    speed = [
        _series_panel(
            "Throughput per GPU",
            m.THROUGHPUT,
            8,
            unit=TOKENS_PER_SECOND,
            description="verl perf/throughput: prompt and response tokens per second per GPU, whole step.",
        ),
        _series_panel(
            "Step time",
            m.TRAINING_STEP_SECONDS,
            8,
            unit="s",
            description="verl timing_s/step.",
        ),
        _panel(
            "Phase timings",
            [_target(_selected(m.PHASE_SECONDS), "{{job}} {{phase}}")],
            8,
            unit="s",
            description="verl timing_s/<phase>: generation (gen), weight sync (update_weights), "
            "actor update (update_actor) ...",
        ),
    ]
    mismatch = [
        _series_panel(
            "Mismatch KL",
            m.MISMATCH_KL,
            8,
            description="verl rollout_corr/kl; verl's docs warn above |0.1|. Watch for upward drift.",
        ),
        _series_panel(
            "IS effective sample size",
            m.IS_ESS,
            8,
            unit="percentunit",
            description="verl rollout_corr/rollout_is_eff_sample_size; verl's docs warn below 0.3.",
        ),
        _panel(
            "IS weights and probability gap",
            [
                _target(_selected(m.IS_MEAN), "{{job}} IS mean"),
                _target(_selected(m.IS_CLIPPED_FRACTION), "{{job}} clipped fraction"),
                _target(_selected(m.PROBS_DIFF_MEAN), "{{job}} probs diff mean"),
            ],
            8,
            description="Mean truncated IS weight, fraction clipped at the cap, "
            "mean |p_rollout - p_trainer|.",
        ),
    ]
    operator = [
        _panel(
            "Jobs",
            [_target(_selected(op.JOB_INFO), "{{namespace}}/{{job}} {{phase}} {{quantization}}", table=True)],
            8,
            kind="table",
            description="flashrl_job_info: one series per FlashRLJob with its phase and quantization.",
        ),
        _panel("Jobs by phase", [_target(f"sum by (phase) ({op.JOBS})", "{{phase}}")], 8),
        _panel(
            "Reconcile",
            [
                _target(
                    "histogram_quantile(0.9, sum by (le) "
                    f"(rate({op.RECONCILE_DURATION}_bucket[$__rate_interval])))",
                    "p90 duration",
                ),
                _target(
                    f"sum by (reason) (rate({op.RECONCILE_ERRORS}[$__rate_interval]))", "errors {{reason}}"
                ),
            ],
            8,
            unit="s",
            description="p90 reconcile duration (seconds, left axis) and reconcile errors per second by "
            "reason (right axis).",
            overrides=[_unit_override("B", "cps", right_axis=True)],
        ),
    ]
    return _rows(
        0,
        ("Progress", 7, progress),
        ("Quality", 8, quality),
        ("Speed", 8, speed),
        ("Rollout/trainer mismatch", 8, mismatch),
        ("Operator", 8, operator),
    )


#: The goodput phases that trained the model, as a PromQL regex (flashrl_api.goodput.TRAINING).
_TRAINING_RE: Final = "|".join(sorted(str(p) for p in TRAINING))


def _stacked(panel: dict[str, Any]) -> dict[str, Any]:
    """A timeseries panel whose series stack (one band per phase)."""
    panel["fieldConfig"]["defaults"]["custom"] = {
        "stacking": {"mode": "normal", "group": "A"},
        "fillOpacity": 60,
    }
    return panel


def goodput_panels(y: int) -> list[dict[str, Any]]:
    """The row "Where the GPU-hours go": ``flashrl_gpu_seconds_total{phase}`` from the launcher and the
    operator (each phase counted by one of them), per job."""
    gpu = m.GPU_SECONDS
    held = _stacked(
        _panel(
            "GPUs by phase",
            [
                _target(
                    f"sum by (namespace, job, phase) (rate({_selected(gpu)}[$__rate_interval]))",
                    "{{job}} {{phase}}",
                )
            ],
            12,
            unit="short",
            description="GPUs held, stacked by goodput phase (docs/observability.md): the rate of "
            "flashrl_gpu_seconds_total. Pick one job to read its bands; the top is the GPUs it held.",
        )
    )
    hours = _panel(
        "GPU-hours by phase",
        [_target(f"sum by (job, phase) (increase({_selected(gpu)}[$__range])) / 3600", "{{job}} {{phase}}")],
        6,
        unit="short",
        kind="barchart",
        description="GPU-hours each phase took over the dashboard's time range.",
    )
    trained = _selected(gpu, f', phase=~"{_TRAINING_RE}"')
    productive = _panel(
        "Productive fraction",
        [
            _target(
                f"sum by (namespace, job) (rate({trained}[$__rate_interval]))"
                f" / sum by (namespace, job) (rate({_selected(gpu)}[$__rate_interval]))"
            )
        ],
        6,
        unit="percentunit",
        description="Share of the held GPU-seconds spent in the steps that trained the model "
        "(status.goodput.productiveFraction over the job's whole life).",
    )
    return _rows(y, ("Where the GPU-hours go", 9, [held, hours, productive]))


def async_panels(y: int) -> list[dict[str, Any]]:
    """The row "Rollout pool and asynchrony" (training.mode colocate-async / separate-async): whether the
    rollout pool keeps the trainer fed, what each pool waits for, how stale the samples are, what the
    off-policy limit drops and what the parameter sync costs. Empty for sync jobs (no series)."""
    starving = _panel(
        "Trainer waiting for samples",
        [_target(_selected(m.ASYNC_SAMPLE_WAIT_FRACTION))],
        6,
        unit="percentunit",
        description="separate-async: share of the last step the trainer waited for the rollout pool's "
        "samples (verl timing_s/gen / timing_s/step). FlashRLRolloutPoolStarvesTrainer fires when it "
        "stays high: the rollout pool is too small to keep the trainer fed.",
    )
    pools = _panel(
        "GPUs per pool, and waiting",
        [
            _target(
                f"sum by (namespace, job, pool) (rate({_selected(m.POOL_GPU_SECONDS)}[$__rate_interval]))",
                "{{job}} {{pool}} held",
            ),
            _target(
                "sum by (namespace, job, pool, waiting_for) "
                f"(rate({_selected(m.POOL_WAITING_GPU_SECONDS)}[$__rate_interval]))",
                "{{job}} {{pool}} waiting for {{waiting_for}}",
            ),
        ],
        6,
        description="separate-async: GPUs each pool holds and how many of them wait for the other pool "
        "(status.goodput.pools: the trainer for samples, the rollout pool for weights).",
    )
    staleness = _panel(
        "Sample staleness",
        [
            _target(_selected(m.ASYNC_STALENESS_MEAN), "{{job}} mean"),
            _target(_selected(m.ASYNC_STALENESS_MAX), "{{job}} max"),
        ],
        6,
        description="Model versions the last step's trajectories lag the policy (verl "
        "training/off_policy/trajectory_staleness); bounded by spec.training.async.maxOffPolicyVersions.",
    )
    drops = _panel(
        "Off-policy drops and parameter sync",
        [
            _target(_selected(m.ASYNC_OFF_POLICY_EVICTED), "{{job}} dropped samples"),
            _target(_selected(m.PHASE_SECONDS, ', phase="update_weights"'), "{{job}} parameter sync"),
        ],
        6,
        description="Samples dropped for exceeding the off-policy limit in the last step (verl "
        "training/off_policy/evicted_samples, left axis) and the parameter sync's seconds (verl "
        "timing_s/update_weights, right axis).",
        overrides=[_unit_override("B", "s", right_axis=True)],
    )
    return _rows(y, ("Rollout pool and asynchrony", 8, [starving, pools, staleness, drops]))


def _variable(name: str, query: str, label: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name},
        "definition": query,
        "multi": True,
        "includeAll": True,
        "refresh": 2,
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def dashboard() -> dict[str, Any]:
    """The whole dashboard model."""
    return {
        "uid": UID,
        "title": "FlashRL jobs",
        "description": "FP8-rollout RL jobs: progress, validation score, response length, throughput, "
        "phase timings and the rollout/trainer mismatch (docs/observability.md).",
        "tags": ["flashrl", "verl", "rl"],
        "schemaVersion": 39,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"selected": True, "text": "Prometheus", "value": "prometheus"},
                },
                _variable("namespace", f"label_values({m.TRAINING_STEP}, namespace)", "Namespace"),
                _variable("job", f'label_values({m.TRAINING_STEP}{{namespace=~"$namespace"}}, job)', "Job"),
            ]
        },
        # Grafana keys panel state (links, repeat, library panels) by id: every panel, rows included.
        "panels": [
            {"id": number, **panel}
            for number, panel in enumerate([*panels(), *goodput_panels(44), *async_panels(54)], 1)
        ],
    }


def dashboard_json() -> str:
    """The file's exact text."""
    return json.dumps(dashboard(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dashboard_json())
