"""Every reason the experiment controller writes is a member of ExperimentReason."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import flashrl_operator.experiment as experiment_package
from flashrl_api import API_VERSION
from flashrl_api.experiment import (
    EXPERIMENT_KIND,
    ExperimentReason,
    FlashRLExperiment,
    FlashRLExperimentStatus,
    parse_experiment,
)
from flashrl_operator.experiment.plan import invalid_status, plan
from flashrl_operator.experiment.reconciler import ExperimentReconciler

NOW = "2026-01-01T00:00:00Z"
NAMES = ("x-blockwise-fp8", "x-channel-fp8", "x-bf16")
SOURCES = sorted(Path(experiment_package.__file__).parent.glob("*.py"))


def _experiment(status: dict[str, Any] | None = None, parallelism: int | None = None) -> FlashRLExperiment:
    raw: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "metadata": {"name": "x", "namespace": "rl", "uid": "u", "generation": 1},
        "spec": {} if parallelism is None else {"parallelism": parallelism},
    }
    if status is not None:
        raw["status"] = status
    return parse_experiment(raw)


def _child(phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "ignored"},
        "status": {"phase": phase, "progress": {"step": 1, "totalSteps": 9}},
    }


def _reasons(status: FlashRLExperimentStatus) -> set[str]:
    found = {c.reason for c in status.conditions} | {v.reason for v in status.variants if v.reason}
    return found | ({status.reason} if status.reason else set())


def test_the_status_reasons_are_members() -> None:
    seen: set[str] = set()
    for phases in (
        (None, None, None),
        ("Running", None, None),
        ("Succeeded", "Succeeded", "Succeeded"),
        ("Failed", "Running", None),
        ("Failed", "Succeeded", "Succeeded"),
    ):
        children = {name: _child(phase) for name, phase in zip(NAMES, phases, strict=True) if phase}
        seen |= _reasons(plan(_experiment(), children, NOW).status)
    seen |= _reasons(invalid_status({"generation": 1}, ["spec.variants: bad"], NOW))
    # One at a time (spec.parallelism 1): waiting for a slot, then for a finished variant's GPUs; and
    # the Events of each variant's transitions on the way.
    one = _experiment({}, parallelism=1)
    first = plan(one, {}, NOW)
    running = plan(_experiment(first.status.to_wire(), 1), {NAMES[0]: _child("Running")}, NOW)
    ended = _child("Failed")
    ended["status"]["attempts"] = [{"attempt": 1, "startTime": NOW, "endTime": NOW}]
    held = plan(_experiment(running.status.to_wire(), 1), {NAMES[0]: ended}, NOW)
    ended["status"]["attempts"][0]["releaseTime"] = NOW
    done = {NAMES[0]: ended, NAMES[1]: _child("Succeeded")}
    freed = plan(_experiment(held.status.to_wire(), 1), done, NOW)
    for step in (first, running, held, freed):
        seen |= _reasons(step.status) | {e.reason for e in step.events}
    # A variant whose job was created and then deleted.
    before = plan(_experiment(), {NAMES[0]: _child("Running")}, NOW).status.to_wire()
    gone = plan(_experiment(before), {}, NOW).status
    seen |= {v.reason for v in gone.variants if v.reason}
    assert seen <= set(ExperimentReason)
    taken = ExperimentReconciler._taken({"variants": [{"jobName": NAMES[0]}]}, NAMES[0], {})
    assert taken["reason"] in set(ExperimentReason)
    # Everything but the reconciler's own two (JobNameTaken, JobRejected) came from the pure plan, and
    # VariantsRunning, which the plan computes but a Running experiment without failures does not show
    # (its status has no reason, its conditions say NotSucceeded and NotFailed).
    unseen = set(ExperimentReason) - seen
    assert unseen == {
        ExperimentReason.JOB_NAME_TAKEN,
        ExperimentReason.JOB_REJECTED,
        ExperimentReason.VARIANTS_RUNNING,
    }


def _reason_values(tree: ast.AST) -> list[ast.expr]:
    """Expressions the code writes as a reason: ``reason=...`` keywords, ``"reason": ...`` entries,
    ``reason = ...`` assignments and a condition's reason argument."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "reason":
            found.append(node.value)
        elif isinstance(node, ast.Dict):
            found += [
                v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == "reason"
            ]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for name, value in zip(names, values, strict=False):
                    if isinstance(name, ast.Name) and name.id == "reason" and value is not None:
                        found.append(value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_condition":
            found.append(node.args[2])
    return found


def _literals(expr: ast.expr) -> list[str]:
    return [n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_no_reason_is_a_bare_string_in_the_experiment_controller() -> None:
    assert SOURCES, "no sources found"
    bare = {}
    for path in SOURCES:
        for expr in _reason_values(ast.parse(path.read_text())):
            # Strings inside a reason expression may only be the phases it tests, never a reason.
            strings = [s for s in _literals(expr) if s not in ("Succeeded", "Failed", "Pending", "reason")]
            if strings:
                bare[f"{path.name}:{expr.lineno}"] = strings
    assert bare == {}


def test_the_experiment_crd_lists_the_reasons() -> None:
    description = FlashRLExperimentStatus.model_fields["reason"].description or ""
    assert all(reason.value in description for reason in ExperimentReason)
