"""``flashrl render``: the Kubernetes objects a FlashRLJob becomes, exactly as the operator applies them;
for a FlashRLExperiment, each variant's FlashRLJob as the operator creates it, and what each becomes."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Mapping
from typing import Any

from flashrl_api import Problem, load_documents
from flashrl_operator.cli.common import (
    Command,
    ExperimentRuns,
    read_job,
    read_text,
    report_problems,
    source_name,
)
from flashrl_operator.job.overrides import protected_problems


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    p.add_argument(
        "file", help="manifest holding one FlashRLJob or FlashRLExperiment, or '-' for standard input"
    )


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl render``."""
    from flashrl_operator.generate._yaml import dump_all
    from flashrl_operator.render import render

    text = read_text(args.file)
    docs = load_documents(text, source_name(args.file))
    if len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") == "FlashRLExperiment":
        return _render_experiment(docs[0])
    job = read_job(args.file, io.StringIO(text))
    # Keys the spec owns would desynchronise the pods from verl; never render them. (Composing the
    # overrides against verl is `flashrl validate`'s job: render stays fast and needs no hydra.)
    protected = protected_problems(job)
    if protected:
        return report_problems(protected, sys.stderr)
    sys.stdout.write(dump_all(render(job).manifests()))
    return 0


def _render_experiment(raw: Mapping[str, Any]) -> int:
    """Each variant's FlashRLJob, then the objects it becomes, in the variants' order. The operator
    creates them one ``spec.parallelism`` at a time; what each becomes does not depend on when."""
    from flashrl_operator.experiment.plan import job_object
    from flashrl_operator.generate._yaml import dump_all
    from flashrl_operator.render import render

    read = ExperimentRuns.read(raw)
    if not isinstance(read, ExperimentRuns):
        return report_problems(read, sys.stderr)
    found: list[Problem] = []
    for variant, job in read.runs:
        for problem in protected_problems(job):
            located = Problem(read.field_path(variant, problem.path), problem.message)
            if located not in found:
                found.append(located)
    if found:
        return report_problems(found, sys.stderr)
    documents: list[Any] = []
    for job in read.jobs:
        documents.append(job_object(job))
        documents.extend(render(job).manifests())
    sys.stdout.write(dump_all(documents))
    return 0


COMMAND = Command(
    "render",
    help="print the Kubernetes objects a FlashRLJob (or each variant of a FlashRLExperiment) becomes",
    description=(
        "Validate a FlashRLJob and print, as a YAML stream, the objects the operator "
        "creates for it (the KubeRay RayJob, its ConfigMap, ServiceAccount and RBAC), exactly as the "
        "operator would apply them. For a FlashRLExperiment, each variant's FlashRLJob as the operator "
        "creates it, followed by the objects that job becomes, in the variants' order. Nothing is sent "
        "to a cluster."
    ),
    arguments=arguments,
    run=run,
)
