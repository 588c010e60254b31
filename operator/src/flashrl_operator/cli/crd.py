"""``flashrl crd``: a CustomResourceDefinition generated from the API models."""

from __future__ import annotations

import argparse
import sys

from flashrl_operator.cli.common import Command


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    p.add_argument(
        "--kind",
        choices=("FlashRLJob", "FlashRLExperiment"),
        default="FlashRLJob",
        help="which CRD to print (default: FlashRLJob)",
    )


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl crd``."""
    if args.kind == "FlashRLExperiment":
        from flashrl_operator.generate.crd_experiment import experiment_crd_yaml

        sys.stdout.write(experiment_crd_yaml())
        return 0
    from flashrl_operator.generate.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


COMMAND = Command(
    "crd",
    help="print a CustomResourceDefinition (FlashRLJob by default)",
    description=(
        "Print a CustomResourceDefinition generated from the API models (schema, defaults, "
        "CEL rules, printer columns): FlashRLJob, or FlashRLExperiment with --kind. `make crd` writes both "
        "into the Helm chart."
    ),
    arguments=arguments,
    run=run,
)
