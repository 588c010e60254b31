"""``flashrl demo``: the main job's whole lifecycle against an emulated API server and KubeRay."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashrl_operator.cli.common import Command, read_job, report_problems, summary
from flashrl_operator.job.overrides import override_problems


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    p.add_argument(
        "--file",
        default=None,
        help="FlashRLJob manifest to use (default: the example shipped with flashrl, "
        "examples/flashrljob.yaml in the repository)",
    )
    p.add_argument(
        "--stall",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up when nothing moved for this long (no write to the emulated API server, no operator "
        "log line, no check running; default: 60); there is no total time limit, so a busy machine only "
        "makes the demo slower, and a job that fails ends it at once",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="print the whole RayJob and the whole /metrics scrape (default: what a reader needs of them)",
    )
    p.add_argument(
        "--report",
        default="flashrl-demo-report",
        metavar="DIR",
        help="where the experiment's report goes (default: ./flashrl-demo-report); '' skips the experiment",
    )


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl demo``."""
    from flashrl_operator.render import render

    try:
        from flashrl_operator.sim.demo import EXAMPLE, run_demo
    except ImportError as exc:
        print(f"flashrl demo needs the sim extra (pip install 'flashrl-k8s[sim]'): {exc}", file=sys.stderr)
        return 1
    source = args.file if args.file is not None else str(EXAMPLE)
    job = read_job(source)
    report = override_problems(job, read_model_files=True)
    if report.note:
        print(report.note, file=sys.stderr)
    if report.problems:
        return report_problems(report.problems, sys.stderr)
    print(f'{source}: valid FlashRLJob "{job.name}" {summary(job)}')
    print("the operator will create:")
    for obj in render(job):
        meta = obj.get("metadata", {})
        print(f"  {obj.get('apiVersion')} {obj.get('kind')} {meta.get('namespace', '-')}/{meta.get('name')}")
    print()
    experiment_report = Path(args.report) if args.report else None
    return run_demo(
        source,
        sys.stdout,
        sys.stderr,
        stall_s=args.stall,
        experiment_report=experiment_report,
        full=args.full,
    )


COMMAND = Command(
    "demo",
    help="run the example job's whole lifecycle against an emulated API server and KubeRay",
    description=(
        "Start the real operator against an in-process emulated Kubernetes API server "
        "(kmock, on 127.0.0.1), apply the example FlashRLJob, play KubeRay's part (RayJob status "
        "transitions) and the launcher's (training progress), and print the timeline and the "
        "rendered RayJob. Then run an emulated two-variant FlashRLExperiment (blockwise FP8 vs BF16, "
        "synthetic metrics) and write its comparison report. Needs no cluster; exits non-zero if "
        "either does not complete."
    ),
    arguments=arguments,
    run=run,
)
