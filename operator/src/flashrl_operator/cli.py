"""The ``flashrl`` command: validate and render FlashRLJobs, print the CRD, run the demo.

Each subcommand is one ``_add_<name>`` function (its arguments and help) plus one ``_cmd_<name>``
function (its body), listed in :data:`SUBCOMMANDS`; adding a subcommand touches nothing else.
Imports beyond pydantic and PyYAML happen inside the subcommand that needs them, so render,
validate and crd work in the trainer image, which has no kopf or aiohttp.

Bad input of any kind ends with one ``field.path: message`` line per problem on stderr and exit
status 2; it never shows a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from flashrl_api import (
    FlashRLJob,
    Problem,
    SpecError,
    load_documents,
    load_job_file,
    parse_job,
    spec_warnings,
)
from flashrl_api.manifest import MAX_MANIFEST_BYTES, capped, decode_manifest
from flashrl_operator.preflight import offline_limits

if TYPE_CHECKING:
    _Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

#: Exit status for input the user must fix (argparse uses the same for bad arguments).
EXIT_INVALID: Final = 2
STDIN: Final = "-"

Handler = Callable[[argparse.Namespace], int]


# --- shared helpers ------------------------------------------------------------------------------


def read_job(source: str, stdin: TextIO | None = None) -> FlashRLJob:
    """Load one FlashRLJob from a file, or from standard input when ``source`` is ``-``."""
    if source != STDIN:
        return load_job_file(source)
    stream = stdin if stdin is not None else sys.stdin
    buffer = getattr(stream, "buffer", None)
    try:
        if buffer is not None:
            text = decode_manifest(buffer.read(MAX_MANIFEST_BYTES + 1), "standard input")
        else:
            text = stream.read(MAX_MANIFEST_BYTES + 1)
    except UnicodeDecodeError:
        raise SpecError([Problem("", "standard input is not UTF-8 text")]) from None
    docs = load_documents(text, "standard input")
    if len(docs) != 1:
        raise SpecError(
            [Problem("", f"standard input must hold one FlashRLJob, found {len(docs)} documents")]
        )
    return parse_job(docs[0])


def protected_problems(job: FlashRLJob) -> list[Problem]:
    """User overrides of keys other spec fields set (``trainer.nnodes`` ...), at ``spec.overrides[i]``."""
    from flashrl_jobs.verl_args import protected_key_problems

    return [Problem(f"spec.overrides[{i}]", msg) for i, msg in protected_key_problems(job.spec.overrides)]


@dataclass(frozen=True)
class ConfigReport:
    """What checking a job's verl configuration offline found."""

    problems: list[Problem]
    #: Said when the overrides could only be syntax-checked (no hydra or verl here).
    note: str | None = None
    #: verl checks that could not run here (the model-dependent ones without the model's files).
    skipped: tuple[str, ...] = ()


def override_problems(job: FlashRLJob, *, start_up_checks: bool = True) -> ConfigReport:
    """Problems with the job's verl configuration: the overrides, then verl's own start-up checks.

    With hydra and verl's config files importable (the dev venv and the trainer image) the overrides
    are composed against the pinned verl config and verl 0.9.1's start-up checks run on the result
    (``flashrl_jobs.verl_config.check_config``, in a sandboxed child process:
    :func:`checked_in_sandbox`), each problem at its field path; otherwise only the
    keys the spec owns are refused, and the note says the rest went unchecked. ``start_up_checks=False``
    composes the overrides only (for a spec whose own rules already failed: verl would repeat them).
    """
    protected = protected_problems(job)
    try:
        from flashrl_jobs.verl_config import VerlConfigUnavailableError, check_user_overrides

        # The sandboxed child starts a fresh interpreter; without Hydra here, it does not run there either.
        importlib.import_module("hydra")
    except ImportError as exc:
        return ConfigReport(
            protected, _syntax_only_note(exc.name or str(exc)) if job.spec.overrides else None
        )
    try:
        if protected or not start_up_checks:
            # Composition only: an override that names code or reaches the reserved environment is
            # among `protected`, is never composed, and keeps verl's start-up checks from running.
            return ConfigReport(check_user_overrides(job) if job.spec.overrides else protected)
        problems, skipped = checked_in_sandbox(job)
    except (VerlConfigUnavailableError, ImportError) as exc:
        return ConfigReport(protected, _syntax_only_note(str(exc)) if job.spec.overrides else None)
    return ConfigReport(problems, None, tuple(skipped))


def checked_in_sandbox(job: FlashRLJob) -> tuple[list[Problem], list[str]]:
    """verl's checks of the job in a child process that holds nothing of this one's
    (:mod:`flashrl_jobs.verl_child`); the model's ``config.json`` is read here, from the user's own
    files, and handed over. A child that gives no answer is one problem at ``spec``, in fixed words."""
    from flashrl_api.staging import model_location
    from flashrl_jobs.verl_checks import cached_model_config_json, model_config_json
    from flashrl_jobs.verl_child import VerlChildError, check_config_isolated

    model_config = model_config_json(model_location(job.spec)) or cached_model_config_json(
        job.spec.model.source
    )
    try:
        return check_config_isolated(job, model_config=model_config)
    except VerlChildError as exc:
        return [Problem("spec", str(exc))], []


def _syntax_only_note(why: str) -> str:
    return (
        f"note: spec.overrides were checked for syntax only, not composed against the verl config ({why}; "
        "install flashrl-k8s[verl-config] and verl to check them fully)"
    )


def summary(job: FlashRLJob) -> str:
    """What a valid job will run, in one parenthesised phrase."""
    spec = job.spec
    tis = spec.correction.tis
    correction = "TIS off" if tis.level == "off" else f"{tis.level} TIS C={tis.cap}"
    res = spec.resources
    parts = [spec.rollout.quantization, correction, f"{res.nodes}x{res.gpus_per_node} {res.gpu_product}"]
    if spec.dry_run:
        parts.append("dry run")
    return f"({', '.join(parts)})"


def _source_name(source: str) -> str:
    return "standard input" if source == STDIN else source


def _report(problems: Sequence[Problem], err: TextIO) -> int:
    for problem in capped(problems):
        print(problem, file=err)
    return EXIT_INVALID


# --- subcommands ---------------------------------------------------------------------------------


def _add_validate(sub: _Subparsers) -> Handler:
    p = sub.add_parser(
        "validate",
        help="check a FlashRLJob or FlashRLExperiment manifest",
        description="Check a FlashRLJob manifest the way the operator and the API server will: field "
        "types and ranges, unknown fields, cross-field rules, and the verl overrides (composed against "
        "the pinned verl config when hydra and verl are installed). A FlashRLExperiment is checked as "
        "a whole (variants differ, only in fields that keep the comparison's meaning unless allowed) "
        "and each variant as the FlashRLJob it becomes. Prints what is valid and exits 0; otherwise "
        "prints one 'field.path: message' line per problem on stderr and exits 2.",
    )
    p.add_argument(
        "file", help="manifest holding one FlashRLJob or FlashRLExperiment, or '-' for standard input"
    )
    return _cmd_validate


def _read_text(source: str) -> str:
    if source == STDIN:
        try:
            return sys.stdin.read()
        except UnicodeDecodeError:
            raise SpecError([Problem("", "standard input is not UTF-8 text")]) from None
    try:
        return Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read {source}: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise SpecError([Problem("", f"{source} is not UTF-8 text")]) from None


def _cmd_validate(args: argparse.Namespace) -> int:
    text = _read_text(args.file)
    docs = load_documents(text, _source_name(args.file))
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
    report = override_problems(job, start_up_checks=not earlier)
    problems = earlier + report.problems
    if report.note:
        print(report.note, file=sys.stderr)
    if problems:
        return _report(problems, sys.stderr)
    print(f'{_source_name(args.file)}: valid FlashRLJob "{job.name}" {summary(job)}')
    for path, message in spec_warnings(job.spec):
        print(f"warning: spec.{path}: {message}", file=sys.stderr)
    print(offline_limits(job, report.skipped), file=sys.stderr)
    return 0


def _add_preflight(sub: _Subparsers) -> Handler:
    p = sub.add_parser(
        "preflight",
        help="check a cluster has what a FlashRLJob needs (your kubeconfig)",
        description="Check, with your kubeconfig ($KUBECONFIG or ~/.kube/config, its current context), "
        "what `flashrl validate` cannot see offline: the namespace, the claims (bound, access modes), the "
        "Secrets, nodes with the GPU product and enough allocatable GPUs, and KubeRay's CRDs at the pinned "
        "version. Prints one line per problem on stderr and exits 1, or one line and exits 0. Reads only.",
    )
    p.add_argument("-n", "--namespace", help="namespace the job will be applied to (default: its own)")
    p.add_argument("file", help="manifest holding one FlashRLJob, or '-' for standard input")
    return _cmd_preflight


def _cmd_preflight(args: argparse.Namespace) -> int:
    import asyncio

    from flashrl_api.pins import load_pins
    from flashrl_operator.preflight import cluster_problems, gather, with_namespace

    job = with_namespace(read_job(args.file), args.namespace)
    try:
        from flashrl_operator.kube import KubeClient
        from flashrl_operator.login import Credentials
    except ImportError as exc:
        print(f"flashrl preflight needs the operator extra (kubernetes_asyncio): {exc}", file=sys.stderr)
        return 1

    async def check() -> list[str]:
        # Like kubectl: $KUBECONFIG (or ~/.kube/config) and its current context, exec plugins included.
        kube = await KubeClient.connect(Credentials())
        try:
            facts = await gather(kube, job)
        finally:
            await kube.close()
        return cluster_problems(job, facts, load_pins().versions.kuberay)

    try:
        problems = asyncio.run(check())
    except Exception as exc:  # credentials, an unreachable or refusing API server: one line, exit 1
        print(f"preflight: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f'{_source_name(args.file)}: the cluster has what FlashRLJob "{job.name}" needs in {job.namespace}')
    return 0


def _validate_experiment(source: str, raw: Mapping[str, Any]) -> int:
    """Every variant merged over the template and checked as the FlashRLJob it becomes: its verl
    overrides and verl's start-up checks too, each problem at the variant's field when the variant
    set it, at the template's otherwise (once)."""
    from flashrl_api.experiment import experiment_problems, variant_field_path, variant_jobs, variants_of

    experiment, problems = experiment_problems(raw)
    if problems or experiment is None:
        return _report(problems, sys.stderr)
    template = raw.get("spec", {}).get("template") or {}
    variants = variants_of(experiment.spec)
    jobs = variant_jobs(experiment, template)
    found: list[Problem] = []
    notes: list[str] = []
    for i, (variant, job) in enumerate(zip(variants, jobs, strict=True)):
        report = override_problems(job)
        if report.note and report.note not in notes:
            notes.append(report.note)
        for problem in report.problems:
            path = variant_field_path(i, problem.path, variant.spec)
            suffix = "" if path.startswith("spec.variants") else f" (in variant {variant.name!r})"
            located = Problem(path, problem.message + suffix)
            if not any(p.path == located.path for p in found):
                found.append(located)
    for note in notes:
        print(note, file=sys.stderr)
    if found:
        return _report(found, sys.stderr)
    print(f'{_source_name(source)}: valid FlashRLExperiment "{experiment.name}", {len(jobs)} variants:')
    for job in jobs:
        print(f"  {job.name} {summary(job)}")
    warnings: list[str] = []
    for i, (variant, job) in enumerate(zip(variants, jobs, strict=True)):
        for path, message in spec_warnings(job.spec):
            line = f"warning: {variant_field_path(i, 'spec.' + path, variant.spec)}: {message}"
            if line not in warnings:
                warnings.append(line)
    for line in [*warnings, *dict.fromkeys(offline_limits(job) for job in jobs)]:
        print(line, file=sys.stderr)
    return 0


def _add_render(sub: _Subparsers) -> Handler:
    p = sub.add_parser(
        "render",
        help="print the Kubernetes objects a FlashRLJob becomes",
        description="Validate a FlashRLJob and print, as a YAML stream, the objects the operator "
        "creates for it (the KubeRay RayJob, its ConfigMap, ServiceAccount and RBAC), exactly as the "
        "operator would apply them. Nothing is sent to a cluster.",
    )
    p.add_argument("file", help="manifest holding one FlashRLJob, or '-' for standard input")
    return _cmd_render


def _cmd_render(args: argparse.Namespace) -> int:
    from flashrl_operator._yaml import dump_all
    from flashrl_operator.render import render

    job = read_job(args.file)
    # Keys the spec owns would desynchronise the pods from verl; never render them. (Composing the
    # overrides against verl is `flashrl validate`'s job: render stays fast and needs no hydra.)
    protected = protected_problems(job)
    if protected:
        return _report(protected, sys.stderr)
    sys.stdout.write(dump_all(render(job).manifests()))
    return 0


def _add_crd(sub: _Subparsers) -> Handler:
    p = sub.add_parser(
        "crd",
        help="print a CustomResourceDefinition (FlashRLJob by default)",
        description="Print a CustomResourceDefinition generated from the API models (schema, defaults, "
        "CEL rules, printer columns): FlashRLJob, or FlashRLExperiment with --kind. `make crd` writes both "
        "into the Helm chart.",
    )
    p.add_argument(
        "--kind",
        choices=("FlashRLJob", "FlashRLExperiment"),
        default="FlashRLJob",
        help="which CRD to print (default: FlashRLJob)",
    )
    return _cmd_crd


def _cmd_crd(args: argparse.Namespace) -> int:
    if args.kind == "FlashRLExperiment":
        from flashrl_operator.crd_experiment import experiment_crd_yaml

        sys.stdout.write(experiment_crd_yaml())
        return 0
    from flashrl_operator.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _add_demo(sub: _Subparsers) -> Handler:
    p = sub.add_parser(
        "demo",
        help="run the example job's whole lifecycle against an emulated API server and KubeRay",
        description="Start the real operator against an in-process emulated Kubernetes API server "
        "(kmock, on 127.0.0.1), apply the example FlashRLJob, play KubeRay's part (RayJob status "
        "transitions) and the launcher's (training progress), and print the timeline and the "
        "rendered RayJob. Then run an emulated two-variant FlashRLExperiment (blockwise FP8 vs BF16, "
        "synthetic metrics) and write its comparison report. Needs no cluster; exits non-zero if "
        "either does not complete.",
    )
    p.add_argument(
        "--file",
        default=None,
        help="FlashRLJob manifest to use (default: the example shipped with flashrl, "
        "examples/flashrljob.yaml in the repository)",
    )
    p.add_argument(
        "--deadline", type=float, default=45.0, help="seconds the whole lifecycle may take (default: 45)"
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
    return _cmd_demo


def _cmd_demo(args: argparse.Namespace) -> int:
    from flashrl_operator.render import render

    try:
        from flashrl_operator.sim.demo import EXAMPLE, run_demo
    except ImportError as exc:
        print(f"flashrl demo needs the sim extra (pip install 'flashrl-k8s[sim]'): {exc}", file=sys.stderr)
        return 1
    source = args.file if args.file is not None else str(EXAMPLE)
    job = read_job(source)
    report = override_problems(job)
    if report.note:
        print(report.note, file=sys.stderr)
    if report.problems:
        return _report(report.problems, sys.stderr)
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
        deadline_s=args.deadline,
        experiment_report=experiment_report,
        full=args.full,
    )


def _add_operator(sub: _Subparsers) -> Handler:
    p = sub.add_parser(
        "operator",
        help="run the operator (reconciles FlashRLJobs into KubeRay RayJobs)",
        description="Run the FlashRL operator in the foreground. Credentials: the pod's service "
        "account when in a cluster, else $KUBECONFIG (or ~/.kube/config) and its current context.",
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    p.add_argument("--log-format", choices=("plain", "json"), default="plain", help="log format")
    p.add_argument("--metrics-port", type=int, default=8080, help="port serving /metrics (default: 8080)")
    p.add_argument("--health-port", type=int, default=8081, help="port serving /healthz (default: 8081)")
    p.add_argument(
        "--default-trainer-image",
        metavar="REF",
        help="trainer image for jobs that name none (default: the pinned images.trainer of "
        "images/pins.yaml); the chart passes its defaultTrainerImage value",
    )
    p.add_argument(
        "--leader-election",
        action="store_true",
        help="reconcile only while holding the Lease flashrl-operator in $POD_NAMESPACE (run two or "
        "more replicas; the others watch and take over when the leader stops renewing it)",
    )
    p.add_argument(
        "--lease-duration",
        type=int,
        default=15,
        metavar="SECONDS",
        help="seconds without renewal after which another replica takes the Lease (default: 15, at least 3)",
    )
    p.add_argument("--verbose", action="store_true", help="debug logging")
    policy = p.add_argument_group(
        "admin policy", "refuse FlashRLJobs (reason PolicyViolation) that ask for more than this"
    )
    policy.add_argument(
        "--allowed-registry",
        action="append",
        default=[],
        metavar="REGISTRY[/PATH]",
        help="registry (or registry path) images may come from; repeatable (default: any)",
    )
    policy.add_argument(
        "--allowed-priority-class",
        action="append",
        default=[],
        metavar="NAME",
        help="PriorityClass a job may use; repeatable (default: any)",
    )
    policy.add_argument(
        "--allowed-rdma-resource",
        action="append",
        default=[],
        metavar="RESOURCE",
        help="extended resource spec.resources.rdma.resourceName may request; repeatable (default: any)",
    )
    policy.add_argument(
        "--forbid-keyless-exists-tolerations",
        action="store_true",
        help="refuse tolerations with operator Exists and no key (they tolerate every taint)",
    )
    network = p.add_argument_group("network", "the NetworkPolicy rendered for every job's Ray pods")
    network.add_argument("--no-network-policy", action="store_true", help="render and apply no NetworkPolicy")
    network.add_argument(
        "--network-policy-kuberay-namespace",
        default="kuberay-system",
        metavar="NS",
        help="namespace of the KubeRay operator, admitted to the dashboard port (default: kuberay-system)",
    )
    network.add_argument(
        "--network-policy-monitoring-namespace",
        default="monitoring",
        metavar="NS",
        help="namespace of Prometheus, admitted to the metrics ports; empty: none (default: monitoring)",
    )
    network.add_argument(
        "--network-policy-metrics-port",
        action="append",
        type=int,
        default=[],
        metavar="PORT",
        help="metrics port of the Ray pods; repeatable (default: 8080)",
    )
    network.add_argument(
        "--network-policy-restrict-egress",
        action="store_true",
        help="allow egress only to the job's own pods, cluster DNS and --network-policy-egress-cidr",
    )
    network.add_argument(
        "--network-policy-egress-cidr",
        action="append",
        default=[],
        metavar="CIDR",
        help="with --network-policy-restrict-egress: a CIDR the Ray pods may reach; repeatable",
    )
    return _cmd_operator


def _cmd_operator(args: argparse.Namespace) -> int:
    try:
        from flashrl_operator.handlers import OperatorConfig
        from flashrl_operator.runner import run_foreground
    except ImportError as exc:
        print(
            f"flashrl operator needs the operator extra (kopf, aiohttp, prometheus-client): {exc}",
            file=sys.stderr,
        )
        return 1
    if args.lease_duration < 3:
        print("flashrl operator: --lease-duration must be at least 3 seconds", file=sys.stderr)
        return EXIT_INVALID
    from flashrl_operator.policy import AdminPolicy
    from flashrl_operator.render.network import RAY_METRICS_PORT, NetworkSettings

    config = OperatorConfig(
        namespaces=tuple(args.namespace),
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        default_trainer_image=args.default_trainer_image or None,
        leader_election=args.leader_election,
        lease_duration=args.lease_duration,
        policy=AdminPolicy(
            allowed_registries=tuple(args.allowed_registry),
            allowed_priority_classes=tuple(args.allowed_priority_class),
            allowed_rdma_resources=tuple(args.allowed_rdma_resource),
            forbid_keyless_exists_tolerations=args.forbid_keyless_exists_tolerations,
        ),
        network=NetworkSettings(
            enabled=not args.no_network_policy,
            kuberay_namespace=args.network_policy_kuberay_namespace,
            monitoring_namespace=args.network_policy_monitoring_namespace,
            metrics_ports=tuple(args.network_policy_metrics_port) or (RAY_METRICS_PORT,),
            egress_cidrs=tuple(args.network_policy_egress_cidr)
            if args.network_policy_restrict_egress
            else None,
        ),
    )
    return run_foreground(config, log_format=args.log_format, verbose=args.verbose)


def _add_report(sub: _Subparsers) -> Handler:
    p = sub.add_parser(
        "report",
        help="compare two or more runs side by side in an HTML report",
        description="Write DIR/report.html (self-contained: figures inlined) and one PNG per figure, "
        "comparing runs from verl's per-step metrics (its `file` logger's JSONL): validation score, "
        "response length, throughput, where the step time goes, the generation speed-up over the "
        "baseline, rollout/trainer mismatch, importance-sampling ESS and probability difference, and a "
        "summary table. Each figure states how many steps it averages; differences smaller than the "
        "step-to-step spread are reported as no clear difference. Missing metrics, runs of different "
        "lengths and truncated files are reported on the page, and the rest is still drawn.",
    )
    p.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a run: its label and its verl JSONL metrics file, or a directory of attempt-<k>.jsonl files "
        "(one per attempt, later attempts win for repeated steps); repeat for each run",
    )
    p.add_argument(
        "--experiment",
        metavar="NAME",
        help="a FlashRLExperiment on the cluster: each variant's job is a run. Uses the current kubeconfig "
        "context, as kubectl does, and reads the jobs' metrics history ConfigMaps, so it works after the "
        "Ray clusters are gone and needs no Prometheus",
    )
    p.add_argument(
        "--job",
        action="append",
        default=[],
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
    return _cmd_report


def _cmd_report(args: argparse.Namespace) -> int:
    try:
        from flashrl_operator.report import (
            MetricsInputError,
            RunMetrics,
            build_report,
            load_run,
            parse_metrics_argument,
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
        if args.experiment or args.job:
            from flashrl_operator.report.cluster import load_cluster_runs

            runs, cluster_title = load_cluster_runs(args.namespace, args.experiment, args.job)
            title = title or cluster_title
        sources = [parse_metrics_argument(value) for value in args.metrics]
        runs += [load_run(label, path) for label, path in sources]
        report = build_report(
            runs, title=title or "FlashRL comparison", banner=args.banner, baseline=args.baseline
        )
    except MetricsInputError as exc:
        print(f"flashrl report: {exc}", file=sys.stderr)
        return EXIT_INVALID
    written = write_report(report, args.output)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    drawn = sum(1 for plot in report.plots if plot.png is not None)
    print(f"{written[-1]}: {len(runs)} runs, {drawn} of {len(report.plots)} figures")
    return 0


#: Every subcommand, in ``--help`` order.
SUBCOMMANDS: Final[tuple[Callable[[_Subparsers], Handler], ...]] = (
    _add_validate,
    _add_preflight,
    _add_render,
    _add_crd,
    _add_report,
    _add_demo,
    _add_operator,
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
    for add in SUBCOMMANDS:
        handler = add(sub)
        # The parser add() just registered is the last one; attach its body to it.
        list(sub.choices.values())[-1].set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flashrl`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except SpecError as exc:
        return _report(exc.problems, sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["EXIT_INVALID", "SUBCOMMANDS", "build_parser", "main", "read_job", "summary"]
