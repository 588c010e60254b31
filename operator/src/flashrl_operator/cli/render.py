"""``flashrl render``: the Kubernetes objects a FlashRLJob becomes, exactly as the operator applies them."""

from __future__ import annotations

import argparse
import sys

from flashrl_operator.cli.common import Command, read_job, report_problems
from flashrl_operator.job.overrides import protected_problems


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    p.add_argument("file", help="manifest holding one FlashRLJob, or '-' for standard input")


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl render``."""
    from flashrl_operator.generate._yaml import dump_all
    from flashrl_operator.render import render

    job = read_job(args.file)
    # Keys the spec owns would desynchronise the pods from verl; never render them. (Composing the
    # overrides against verl is `flashrl validate`'s job: render stays fast and needs no hydra.)
    protected = protected_problems(job)
    if protected:
        return report_problems(protected, sys.stderr)
    sys.stdout.write(dump_all(render(job).manifests()))
    return 0


COMMAND = Command(
    "render",
    help="print the Kubernetes objects a FlashRLJob becomes",
    description=(
        "Validate a FlashRLJob and print, as a YAML stream, the objects the operator "
        "creates for it (the KubeRay RayJob, its ConfigMap, ServiceAccount and RBAC), exactly as the "
        "operator would apply them. Nothing is sent to a cluster."
    ),
    arguments=arguments,
    run=run,
)
