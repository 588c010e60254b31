"""The ``flashrl`` command: validate and render FlashRLJobs, print the CRD, run the demo and the operator.

One module per subcommand (``validate``, ``preflight``, ``render``, ``crd``, ``report``, ``demo``,
``run_operator``), each ending with its :class:`~flashrl_operator.cli.common.Command`: its name and
help, an ``arguments`` function and a ``run`` function (its body); :data:`SUBCOMMANDS` lists them in
``--help`` order, so adding a subcommand is one module and one line here. What they
share (reading a job, reporting problems) is :mod:`flashrl_operator.cli.common`. Imports beyond
pydantic and PyYAML happen inside the subcommand that needs them, so render, validate and crd work in
the trainer image, which has no kopf or aiohttp.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Final

from flashrl_api import SpecError
from flashrl_operator.cli import crd, demo, preflight, render, report, run_operator, validate
from flashrl_operator.cli.common import EXIT_INVALID, Command, Handler, read_job, report_problems, summary

#: Every subcommand, in ``--help`` order.
SUBCOMMANDS: Final[tuple[Command, ...]] = (
    validate.COMMAND,
    preflight.COMMAND,
    render.COMMAND,
    crd.COMMAND,
    report.COMMAND,
    demo.COMMAND,
    run_operator.COMMAND,
)


#: The distribution the commands ship in (``flashrl`` on the package index is another project).
DISTRIBUTION = "flashrl-k8s"


def distribution_version() -> str:
    """The installed ``flashrl-k8s`` version, as the package metadata records it (what a bug report
    should quote); ``unknown`` when the sources run without being installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="flashrl",
        description="FlashRL on Kubernetes: FP8-rollout RL post-training jobs (FlashRLJob, "
        "flashrl.dev/v1alpha1) run by an operator on KubeRay.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in SUBCOMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        command.arguments(p)
        p.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flashrl`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except SpecError as exc:
        return report_problems(exc.problems, sys.stderr)
    except BrokenPipeError:
        # `flashrl render job.yaml | head`: the reader left. Point stdout at /dev/null so the flush at
        # interpreter exit does not raise again, and exit quietly (as the Python docs recommend).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except RecursionError:
        # The readers bound nesting depth before anything recursive walks a document; this is the
        # backstop that keeps even an input they missed to one line.
        print("the input is nested too deeply to process", file=sys.stderr)
        return EXIT_INVALID


__all__ = ["EXIT_INVALID", "SUBCOMMANDS", "build_parser", "main", "read_job", "summary"]
