"""``flashrl validate``: a FlashRLJob or FlashRLExperiment checked offline, as the operator and the
API server will judge it (field types and ranges, CEL twins, verl's own checks).
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Mapping
from typing import Any

from flashrl_api import Problem, SpecError, load_documents, spec_warnings
from flashrl_jobs.verl_args import check_key
from flashrl_operator.cli.common import (
    Command,
    ExperimentRuns,
    read_job,
    read_text,
    report_problems,
    source_name,
    summary,
)
from flashrl_operator.job.overrides import ConfigReport, override_problems
from flashrl_operator.job.preflight import offline_limits


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    p.add_argument(
        "file", help="manifest holding one FlashRLJob or FlashRLExperiment, or '-' for standard input"
    )


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl validate``."""
    text = read_text(args.file)
    docs = load_documents(text, source_name(args.file))
    if len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") == "FlashRLExperiment":
        return _validate_experiment(args.file, docs[0])
    earlier: list[Problem] = []
    try:
        job = read_job(args.file, io.StringIO(text))
    except SpecError as exc:
        if exc.job is None:
            raise
        # Only cross-field rules failed: check the overrides too, so one run reports everything.
        job, earlier = exc.job, list(exc.problems)
    report = override_problems(job, start_up_checks=not earlier, read_model_files=True)
    problems = earlier + report.problems
    if report.note:
        print(report.note, file=sys.stderr)
    if problems:
        return report_problems(problems, sys.stderr)
    print(f'{source_name(args.file)}: valid FlashRLJob "{job.name}" {summary(job)}')
    for path, message in spec_warnings(job.spec):
        print(f"warning: spec.{path}: {message}", file=sys.stderr)
    print(offline_limits(job, report.skipped), file=sys.stderr)
    return 0


def _validate_experiment(source: str, raw: Mapping[str, Any]) -> int:
    """Every variant merged over the template and checked as the FlashRLJob it becomes: its verl
    overrides and verl's start-up checks too, each problem at the variant's field when the variant
    set it, at the template's otherwise (once)."""
    read = ExperimentRuns.read(raw)
    if not isinstance(read, ExperimentRuns):
        return report_problems(read, sys.stderr)
    experiment, jobs = read.experiment, read.jobs
    found: list[Problem] = []
    notes: list[str] = []
    # Replicas differ only in the seed, which composes alike: one composition per check key, as the
    # operator keeps one verdict per key (each composition runs verl's checks in a child, seconds each).
    reports: dict[str, ConfigReport] = {}
    for variant, job in read.runs:
        key = check_key(job)
        if key not in reports:
            reports[key] = override_problems(job, read_model_files=True)
        report = reports[key]
        if report.note and report.note not in notes:
            notes.append(report.note)
        for problem in report.problems:
            path = read.field_path(variant, problem.path)
            suffix = "" if path.startswith("spec.variants") else f" (in variant {variant.name!r})"
            located = Problem(path, problem.message + suffix)
            if not any(p.path == located.path for p in found):
                found.append(located)
    for note in notes:
        print(note, file=sys.stderr)
    if found:
        return report_problems(found, sys.stderr)
    replicas = experiment.spec.replicas
    count = f"{len(jobs)} variants" if replicas == 1 else f"{len(read.index)} variants × {replicas} replicas"
    print(f'{source_name(source)}: valid FlashRLExperiment "{experiment.name}", {count}:')
    for job in jobs:
        print(f"  {job.name} {summary(job)}")
    warnings: list[str] = []
    for variant, job in read.runs:
        for path, message in spec_warnings(job.spec):
            line = f"warning: {read.field_path(variant, 'spec.' + path)}: {message}"
            if line not in warnings:
                warnings.append(line)
    for line in [*warnings, *dict.fromkeys(offline_limits(job) for job in jobs)]:
        print(line, file=sys.stderr)
    return 0


COMMAND = Command(
    "validate",
    help="check a FlashRLJob or FlashRLExperiment manifest",
    description=(
        "Check a FlashRLJob manifest the way the operator and the API server will: field "
        "types and ranges, unknown fields, cross-field rules, and the verl overrides (composed against "
        "the pinned verl config when hydra and verl are installed). A FlashRLExperiment is checked as "
        "a whole (variants differ, only in fields that keep the comparison's meaning unless allowed) "
        "and each variant as the FlashRLJob it becomes. Prints what is valid and exits 0; otherwise "
        "prints one 'field.path: message' line per problem on stderr and exits 2."
    ),
    arguments=arguments,
    run=run,
)
