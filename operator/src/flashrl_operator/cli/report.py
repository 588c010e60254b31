"""``flashrl report``: runs compared side by side in one HTML page (the ``report`` extra)."""

from __future__ import annotations

import argparse
import sys

from flashrl_operator.cli.common import EXIT_INVALID, Command, repeatable


def arguments(p: argparse.ArgumentParser) -> None:
    """Its arguments and their help."""
    repeatable(
        p,
        "--metrics",
        metavar="LABEL=PATH",
        help="a run: its label and its verl JSONL metrics file, or a directory of attempt-<k>.jsonl files "
        "(one per attempt, later attempts win for repeated steps); repeat for each run",
    )
    repeatable(
        p,
        "--validation",
        metavar="LABEL=DIR",
        help="a run's validation samples: the directory verl dumped them into (trainer.validation_data_dir: "
        "<step>.jsonl files, or the attempt-<k>/ directories a job keeps under <checkpoint dir>/validation); "
        "LABEL names a run given by --metrics, --experiment (the variant's name) or --job, and replaces the "
        "per-problem summaries --experiment/--job read from the job's ConfigMap. Each variant is then "
        "compared with the baseline problem by problem; repeat for each run. Only regular files inside DIR "
        "are read (no symbolic link is followed; a dump over 512 MiB is skipped, with a note)",
    )
    p.add_argument(
        "--experiment",
        metavar="NAME",
        help="a FlashRLExperiment on the cluster: each variant's job is a run. Uses the current kubeconfig "
        "context, as kubectl does, and reads the jobs' metrics history ConfigMaps (per-step metrics and each "
        "validation's per-problem counts, for the paired verdict), so it works after the Ray clusters are "
        "gone and needs no Prometheus and no copy off the checkpoint claim",
    )
    repeatable(
        p,
        "--job",
        metavar="NAME",
        help="a FlashRLJob on the cluster, labelled by its name; repeat for each run",
    )
    p.add_argument("-n", "--namespace", default="default", help="namespace of --experiment and --job")
    p.add_argument(
        "--output", required=True, metavar="DIR", help="directory to write report.html and PNGs into"
    )
    p.add_argument(
        "--baseline",
        metavar="LABEL",
        help="the run speed-ups are measured against (default: the one run whose label contains bf16)",
    )
    p.add_argument(
        "--title", help="the page title (default: names the experiment or says FlashRL comparison)"
    )
    p.add_argument("--banner", help="a line shown above everything, e.g. to mark synthetic data")


def run(args: argparse.Namespace) -> int:
    """The body of ``flashrl report``."""
    try:
        from flashrl_report import (
            MetricsInputError,
            RunMetrics,
            ValidationSamples,
            build_report,
            load_run,
            load_validation,
            parse_labelled_argument,
            write_report,
        )
    except ImportError as exc:
        print(
            f"flashrl report needs the report extra (pip install 'flashrl-k8s[report]'): {exc}",
            file=sys.stderr,
        )
        return 1
    if not args.metrics and not args.experiment and not args.job:
        print(
            "flashrl report: give --experiment NAME, --job NAME or --metrics LABEL=PATH (at least one run)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    title = args.title
    try:
        runs: list[RunMetrics] = []
        validation: list[ValidationSamples] = []
        if args.experiment or args.job:
            from flashrl_operator.client.report_runs import load_cluster_runs

            runs, validation, cluster_title = load_cluster_runs(args.namespace, args.experiment, args.job)
            title = title or cluster_title
        sources = [
            parse_labelled_argument("--metrics", v, "LABEL=PATH", "bf16=runs/bf16.jsonl")
            for v in args.metrics
        ]
        dumps = [
            parse_labelled_argument("--validation", v, "LABEL=DIR", "bf16=runs/bf16/validation")
            for v in args.validation
        ]
        runs += [load_run(label, path) for label, path in sources]
        # A run's dumps given with --validation replace its ConfigMap summaries (they are complete).
        given = [load_validation(label, path) for label, path in dumps]
        named = {s.label for s in given}
        validation = [s for s in validation if s.label not in named] + given
        report = build_report(
            runs,
            title=title or "FlashRL comparison",
            banner=args.banner,
            baseline=args.baseline,
            validation=validation,
        )
    except MetricsInputError as exc:
        print(f"flashrl report: {exc}", file=sys.stderr)
        return EXIT_INVALID
    written = write_report(report, args.output)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    drawn = sum(1 for plot in report.plots if plot.png is not None)
    if report.no_metrics:
        print(report.no_metrics)
    for line in report.verdicts:
        print(line)
    print(f"{written[-1]}: {len(runs)} runs, {drawn} of {len(report.plots)} figures")
    return 0


COMMAND = Command(
    "report",
    help="compare two or more runs side by side in an HTML report",
    description=(
        "Write DIR/report.html (self-contained: figures inlined) and one PNG per figure, "
        "comparing runs from verl's per-step metrics (its `file` logger's JSONL): validation score, "
        "response length, throughput, where the step time goes, the generation speed-up over the "
        "baseline, rollout/trainer mismatch, importance-sampling ESS and probability difference, and a "
        "summary table. With --validation (verl's validation dumps), each variant's accuracy is compared "
        "with the baseline's problem by problem: the difference with a paired bootstrap interval, called "
        "higher or lower only when the interval excludes 0. Each figure states how many steps it "
        "averages. Missing metrics, runs of different "
        "lengths and truncated files are reported on the page, and the rest is still drawn."
    ),
    arguments=arguments,
    run=run,
)
