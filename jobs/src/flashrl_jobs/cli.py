"""``flashrl-launch``: the driver of a FlashRLJob inside the Ray head pod.

Order matters and is the point of this program:

1. **Config first.** Read the mounted FlashRLJob, check that the operator's ``verl-overrides.json``
   equals what this image computes (same launcher version on both sides), and compose verl's Hydra
   config against the installed verl. A bad override fails in seconds, naming the key, before any
   Ray call.
2. **Ray gate.** Connect to the explicit ``RAY_ADDRESS`` (never auto-discovery) and wait, with a
   deadline and progress lines, until the cluster has ``nodes x gpusPerNode`` available GPUs.
3. **verl.** ``python -m verl.trainer.main_ppo <overrides>`` as a child process with ``RAY_ADDRESS``
   in its environment, signals forwarded, exit code propagated, steps reported to the FlashRLJob.
   verl's file logger writes every step's metrics to the checkpoint volume, one JSONL file per
   attempt; the launcher reads it for ``status.progress``/``status.metrics`` and serves it to
   Prometheus on ``/metrics`` (docs/observability.md).

Exit codes are in :mod:`flashrl_jobs.contract` and docs/launcher.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from flashrl_api import FlashRLJob, SpecError, load_job_file
from flashrl_api.goodput import LauncherClock
from flashrl_api.pools import held_gpus
from flashrl_api.status import Reason
from flashrl_api.times import compact, rfc3339
from flashrl_jobs import contract
from flashrl_jobs.deadline import ESI_ENV, job_deadline
from flashrl_jobs.ledger import WRITE_FAILURE_TEXTS, Ledger, free_bytes, probe_writable
from flashrl_jobs.progress import from_environment
from flashrl_jobs.ray_gate import connection_abandoned, gate, parse_address, pool_needs
from flashrl_jobs.run_metrics import FILE_LOGGER_ENV, JsonlTail, RunState
from flashrl_jobs.run_observer import RunObserver, step_report
from flashrl_jobs.termination import LaunchError, write_termination_message
from flashrl_jobs.validation_watch import ValidationWatch
from flashrl_jobs.verl_args import (
    ENTRY_MODULE,
    FILE_LOGGER,
    checkpoint_dir,
    merge_overrides,
    validation_dir,
    verl_overrides,
)

if TYPE_CHECKING:
    from flashrl_jobs.exporter import MetricsServer
    from flashrl_jobs.process import ChildResult

PROG = "flashrl-launch"


def log(message: str) -> None:
    """Launcher progress on stderr (Ray's job log and ``kubectl logs`` both show it)."""
    # One write per line: with unbuffered stderr, print() writes the text and the newline
    # separately, and Ray's own log lines from other threads could land in between.
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.stderr.flush()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(contract.exit_code(Reason.LAUNCHER_USAGE), f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line; ``--help`` on each command says what it does."""
    parser = _Parser(
        prog=PROG,
        description="Run a FlashRLJob: stage its model and data before the Ray cluster starts (stage); "
        "inside the cluster compose verl's config, wait until every GPU has joined Ray, then run verl "
        "(train) or stop there (check).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--spec",
            default=os.environ.get(contract.SPEC_ENV) or contract.DEFAULT_SPEC_PATH,
            help="FlashRLJob YAML (a manifest or the spec the operator mounts). A sibling "
            f"{contract.OVERRIDES_FILE} must match the overrides computed here. Default: "
            f"${contract.SPEC_ENV} or {contract.DEFAULT_SPEC_PATH}",
        )
        sub.add_argument(
            "--ray-address",
            default=os.environ.get("RAY_ADDRESS") or None,
            help="GCS address of the Ray head, host:port. Default: $RAY_ADDRESS (set by Ray's job "
            "supervisor). Required: the launcher never discovers a cluster on its own.",
        )
        sub.add_argument(
            "--timeout",
            type=_positive,
            default=None,
            help="Seconds to wait for every GPU to join Ray. Default: the spec's "
            "lifecycle.gpuWaitTimeoutSeconds",
        )
        sub.add_argument(
            "--head-timeout",
            type=_positive,
            default=15.0,
            help="Seconds to wait for the Ray head to answer before giving up (default: 15)",
        )
        # Test hook: a stand-in for verl's entry module. Not part of the interface.
        sub.add_argument("--entry-module", default=ENTRY_MODULE, help=argparse.SUPPRESS)

    train_parser = commands.add_parser(
        "train",
        help="Compose the config, wait for the GPUs, run verl and report progress",
        description="Compose verl's config against the installed verl, wait until the Ray cluster "
        "has nodes x gpusPerNode available GPUs, then run verl.trainer.main_ppo with the job's "
        "overrides, forwarding SIGTERM/SIGINT and exiting with verl's exit code. Training steps "
        "are reported to the FlashRLJob's status.progress and status.metrics when running in a "
        "cluster, and verl's metrics are served to Prometheus on /metrics. With spec.dryRun it "
        "stops after the GPU gate, like check.",
    )
    common(train_parser)
    train_parser.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        help=f"Port of the Prometheus /metrics endpoint (0: any free port). Default: "
        f"${contract.METRICS_PORT_ENV} or {contract.DEFAULT_METRICS_PORT}",
    )
    common(
        commands.add_parser(
            "check",
            help="Everything train does up to and including the GPU gate, then exit 0",
            description="Compose verl's config and wait until every GPU has joined Ray, then exit 0 "
            "without training: a smoke test of the config, the image and the node pool.",
        )
    )
    stage = commands.add_parser(
        "stage",
        help="Download the job's Hugging Face model and data into its claims and verify them (no Ray)",
        description="Run in a CPU-only Job before the Ray cluster: download every hf:// source of the spec "
        "with huggingface_hub into its volume (HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE are honoured), "
        "check it against the checksums the Hub reports and, for data, against the columns verl reads, "
        "then write a marker so the next run downloads nothing. Fails with <cause>: <detail> "
        f"and exit code {contract.exit_code(Reason.STAGING_FAILED)}.",
    )
    stage.add_argument(
        "--spec",
        default=os.environ.get(contract.SPEC_ENV) or contract.DEFAULT_SPEC_PATH,
        help=f"FlashRLJob YAML. Default: ${contract.SPEC_ENV} or {contract.DEFAULT_SPEC_PATH}",
    )
    return parser


def _port(text: str) -> int:
    if not text.strip().isdecimal() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return int(text)


def metrics_port(flag: int | None, env: Mapping[str, str]) -> int:
    """``--metrics-port``, else ``$FLASHRL_METRICS_PORT``, else the default (a bad variable: usage error)."""
    if flag is not None:
        return flag
    raw = env.get(contract.METRICS_PORT_ENV, "").strip()
    if not raw:
        return contract.DEFAULT_METRICS_PORT
    try:
        return _port(raw)
    except argparse.ArgumentTypeError as exc:
        raise LaunchError(Reason.LAUNCHER_USAGE, f"${contract.METRICS_PORT_ENV}: {exc}") from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def load_job(spec_path: str) -> FlashRLJob:
    """The FlashRLJob and, when present, the operator's override list checked against it."""
    path = Path(spec_path)
    try:
        job = load_job_file(path)
    except SpecError as exc:
        raise LaunchError(
            Reason.INVALID_CONFIG,
            f"invalid FlashRLJob in {path}:\n" + "\n".join(map(str, exc.problems)),
        ) from None
    overrides_file = path.parent / contract.OVERRIDES_FILE
    if overrides_file.exists():
        check_overrides_file(job, overrides_file)
    return job


def check_overrides_file(job: FlashRLJob, overrides_file: Path) -> None:
    """The operator rendered ``verl-overrides.json`` from the same spec; a difference is version skew."""
    try:
        rendered = json.loads(overrides_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LaunchError(Reason.INVALID_CONFIG, f"cannot read {overrides_file}: {exc}") from None
    if not isinstance(rendered, list) or not all(isinstance(o, str) for o in rendered):
        raise LaunchError(Reason.INVALID_CONFIG, f"{overrides_file} must be a JSON list of strings")
    computed = verl_overrides(job)
    if rendered != computed:
        only_operator = [o for o in rendered if o not in computed]
        only_here = [o for o in computed if o not in rendered]
        detail = "; ".join(
            part
            for part in (
                f"only in the operator's list: {', '.join(only_operator[:5])}" if only_operator else "",
                f"only in this image's list: {', '.join(only_here[:5])}" if only_here else "",
                "same overrides in a different order" if not only_operator and not only_here else "",
            )
            if part
        )
        raise LaunchError(
            Reason.INVALID_CONFIG,
            f"{overrides_file} differs from the overrides this launcher computes for the same spec "
            f"(the operator and the trainer image run different flashrl versions): {detail}",
        )


def compose_first(job: FlashRLJob) -> None:
    """Compose verl's config for the job and run verl's own start-up checks on it; any problem stops
    the launch here, before verl asks Ray for a single GPU. Checks that cannot run are logged."""
    from flashrl_jobs.verl_config import VerlConfigUnavailableError, check_config

    log("Composing verl's config and running verl's start-up checks")
    try:
        result = check_config(job)
    except VerlConfigUnavailableError as exc:
        raise LaunchError(Reason.INVALID_CONFIG, f"cannot compose verl's config: {exc}") from None
    if result.problems:
        raise LaunchError(
            Reason.INVALID_CONFIG,
            "verl rejects the job's configuration:\n" + "\n".join(str(p) for p in result.problems),
        )
    for note in result.skipped:
        log(f"Not checked here: {note}")


def run(argv: Sequence[str] | None = None) -> int:
    """The launcher; returns the process exit code (raises only for bugs)."""
    args = build_parser().parse_args(argv)
    if args.command == "stage":
        return run_stage(args.spec)
    if not args.ray_address:
        raise LaunchError(
            Reason.LAUNCHER_USAGE,
            "no Ray address: set RAY_ADDRESS or pass --ray-address host:port (the launcher never "
            "discovers a cluster on its own)",
        )
    parse_address(args.ray_address)
    # The goodput clock starts with the launcher: config composition and the gate are its first phases.
    clock = LauncherClock(launched=time.time())
    port = metrics_port(args.metrics_port, os.environ) if args.command == "train" else 0
    job = load_job(args.spec)
    compose_first(job)
    spec = job.spec
    needs = pool_needs(spec)
    required = sum(need.gpus for need in needs)
    timeout = args.timeout if args.timeout is not None else float(spec.lifecycle.gpu_wait_timeout_seconds)
    gate_start = time.time()
    gate(args.ray_address, needs, timeout, log, head_timeout=args.head_timeout)
    clock.gate(gate_start, time.time())
    if args.command == "check" or spec.dry_run:
        log(f"Check passed: verl's config composes and {required} GPU(s) are available; not training")
        return contract.EXIT_OK
    clock.kept_groups = spec.training.prompt_batch_size
    return train(job, args.ray_address, args.entry_module, port, clock)


def run_stage(spec_path: str) -> int:
    """``flashrl-launch stage``: stage the job's sources; a failure is a LaunchError with its cause."""
    from flashrl_jobs.stage import StagingError, stage

    job = load_job(spec_path)
    reporter = from_environment(job.metadata.get("namespace"), job.name, log)
    try:
        stage(job.spec, log, None if reporter is None else lambda p: reporter.report_staging(p.record()))
    except StagingError as exc:
        raise LaunchError(Reason.STAGING_FAILED, exc.reason) from None
    finally:
        if reporter is not None:
            reporter.close()
    return contract.EXIT_OK


def attempt_number(env: Mapping[str, str]) -> int | None:
    """``$FLASHRL_ATTEMPT`` (from 1), which the operator sets per attempt; ``None`` outside an operator."""
    raw = env.get(contract.ATTEMPT_ENV, "").strip()
    if not raw:
        return None
    if raw.isdecimal() and int(raw) >= 1:
        return int(raw)
    log(f"Ignoring ${contract.ATTEMPT_ENV}={raw[:32]!r}: not a positive integer")
    return None


def check_checkpoint_dir(directory: Path) -> None:
    """Fail now, with a reason no retry can fix, when verl could not save a checkpoint there."""
    problem = probe_writable(directory)
    if problem is not None:
        raise LaunchError(
            Reason.CHECKPOINT_UNWRITABLE,
            f"checkpoint directory {directory} is not writable: {problem}; check that "
            "spec.storage.checkpoints is a writable claim with free space",
        )
    free = free_bytes(directory)
    if free is not None:
        log(f"Checkpoints go to {directory} ({free / 2**30:.1f} GiB free)")


def metrics_file(checkpoints: Path, attempt: int) -> Path:
    """``<checkpoint dir>/metrics/attempt-<k>.jsonl``, its directory created; a file already there (a
    launcher restarted within one attempt) is moved aside, because verl opens its file with ``"wb"``."""
    path = checkpoints / contract.METRICS_DIR / f"attempt-{attempt}.jsonl"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            aside = path.with_name(f"{path.stem}.{compact(datetime.now(UTC))}.jsonl")
            path.rename(aside)
            log(f"Kept the previous metrics file of attempt {attempt} as {aside}")
    except OSError as exc:
        log(f"Cannot prepare {path.parent} ({exc}); verl's file logger may fail to open its file")
    return path


def file_logger_override(path: Path) -> str:
    """The Hydra override that puts ``VERL_FILE_LOGGER_PATH`` into every Ray worker of verl's job.

    verl logs from its ``TaskRunner`` actor (``verl/trainer/main_ppo.py`` ``run_ppo``:
    ``task_runner_class.remote()`` after ``ray.init(runtime_env=<verl defaults merged with
    ray_kwargs.ray_init.runtime_env>)``); an actor gets the raylet's environment plus the job's
    ``runtime_env.env_vars``, never the driver's, and may run on any node. The file is on the checkpoint
    volume, which the head and every worker mount at the same path.
    """
    return f"++ray_kwargs.ray_init.runtime_env.env_vars.{FILE_LOGGER_ENV}='{path}'"


def start_exporter(state: RunState, job: FlashRLJob, port: int) -> MetricsServer | None:
    """Serve ``/metrics``; a missing library or a taken port is logged and training goes on."""
    try:
        from flashrl_jobs.exporter import serve
    except ImportError as exc:
        log(f"prometheus-client is not installed ({exc}): no /metrics, status reporting goes on")
        return None
    try:
        gpus = held_gpus(job.spec)
        separate = job.spec.rollout.pool is not None
        server = serve(state, job.namespace, job.name, port, gpus=gpus, separate_pools=separate)
    except OSError as exc:
        log(f"Cannot serve /metrics on port {port} ({exc}); training goes on without it")
        return None
    log(f"Serving verl's metrics for Prometheus on :{server.port}/metrics")
    return server


def train(
    job: FlashRLJob, address: str, entry_module: str, port: int, clock: LauncherClock | None = None
) -> int:
    """Run verl, report its steps, metrics, checkpoints and goodput phases; returns verl's exit code (or
    the launcher's). ``clock`` has seen the launcher's start and gate (a fresh one starts now)."""
    from flashrl_jobs.process import run_child

    checkpoints = Path(checkpoint_dir(job))
    check_checkpoint_dir(checkpoints)
    attempt = attempt_number(os.environ)
    overrides = verl_overrides(job)
    env = dict(os.environ)
    env["RAY_ADDRESS"] = address
    deadline = job_deadline(job, os.environ, datetime.now(UTC))
    if deadline is not None:
        # The driver's environment does not reach the trainer actor: runtime_env does (deadline.py).
        overrides = [*overrides, deadline.override()]
        env[ESI_ENV] = deadline.timestamp
        log(
            f"Deadline {rfc3339(deadline.expires)} (from {deadline.start_source}): "
            f"{ESI_ENV}={deadline.timestamp} for verl"
        )
    # One validation-dump directory per attempt: verl rewrites <step>.jsonl, and a retry repeats steps.
    overrides = merge_overrides(
        overrides, [f"trainer.validation_data_dir={validation_dir(job, attempt or 1)}"]
    )
    metrics_path = metrics_file(checkpoints, attempt or 1)
    overrides = [*overrides, file_logger_override(metrics_path)]
    env[FILE_LOGGER_ENV] = str(metrics_path)
    if not any(o.startswith("trainer.logger=") and FILE_LOGGER in o for o in overrides):
        log("trainer.logger has no 'file' (an override replaced it): metrics come from verl's console only")
    else:
        log(f"verl's metrics go to {metrics_path}")
    argv = [sys.executable or "python3", "-m", entry_module, *overrides]
    gpus = held_gpus(job.spec)
    if clock is None:
        clock = LauncherClock(launched=time.time(), kept_groups=job.spec.training.prompt_batch_size)
    state = RunState(total_steps=job.spec.training.total_steps, clock=clock)
    reporter = from_environment(job.metadata.get("namespace"), job.name, log)
    if reporter is not None:
        reporter.attempt = attempt
    ledger = Ledger(checkpoints, log)
    if (resume := ledger.poll()) is not None:
        mode = job.spec.checkpoint.resume_mode
        log(f"Checkpoint of step {resume.step} found: {resume.path} (resumeMode {mode})")
        state.set_checkpoint(resume.step)
        if reporter is not None and mode == "auto":
            # verl resumes from its tracker, which may be newer than the status says: the last attempt
            # can die between verl's save and its launcher's report. The status names what verl
            # resumes from before the first step, so a failure of this attempt costs only its own steps.
            reporter.report_checkpoint(resume.to_status(attempt))

    def new_checkpoint() -> dict[str, Any] | None:
        found = ledger.poll()
        if found is None:
            return None
        log(f"Checkpoint of step {found.step} saved: {found.path}")
        state.set_checkpoint(found.step)
        return found.to_status(attempt)

    def poll_ledger() -> None:
        record = new_checkpoint()
        if record is not None and reporter is not None:
            reporter.report_checkpoint(record)

    validations = ValidationWatch(Path(validation_dir(job, attempt or 1)), attempt or 1, log)

    def poll_validations(upto: int | None) -> None:
        entries = validations.poll(upto)
        if entries is not None and reporter is not None:
            reporter.report_validation(entries)

    def on_step(step: int) -> None:
        # verl saves before it logs the step: the step and its checkpoint go in one PATCH.
        record = new_checkpoint()
        if reporter is not None:
            phases = state.phases_wire(time.time(), attempt, gpus)
            reporter.report_step(replace(step_report(state), phases=phases), record)
        # verl dumps a validation before it logs its step: the dumps up to this step are complete.
        poll_validations(step)

    observer = RunObserver(state, JsonlTail(metrics_path, log), on_step)
    server = start_exporter(state, job, port)
    log(
        f"Starting verl{f' (attempt {attempt})' if attempt else ''}: "
        f"{' '.join(argv[:3])} with {len(argv) - 3} overrides"
    )
    observer.start()
    try:
        result = run_child(argv, env, observer.console)
        observer.stop()
        poll_ledger()
        poll_validations(None)
    finally:
        if reporter is not None:
            # The launcher's last word: its phases up to verl's exit (the operator takes it from there).
            if (last := state.phases_wire(time.time(), attempt, gpus)) is not None:
                reporter.report_phases(last)
            reporter.close()
        if server is not None:
            server.close()
    if observer.tail.skipped:
        log(f"Skipped {observer.tail.skipped} malformed line(s) of {metrics_path}")
    return _outcome(job, result, state, ledger)


def _ended(reason: str, exit_code: int, logged: str | None = None) -> int:
    """End the launcher with ``exit_code``: ``reason`` as the termination message, and in the log
    (``logged`` instead where the log gets less of it)."""
    write_termination_message(reason)
    log(reason if logged is None else logged)
    return exit_code


def _outcome(job: FlashRLJob, result: ChildResult, state: RunState, ledger: Ledger) -> int:
    """The launcher's exit code and last line for how verl ended."""
    saved = ledger.latest.step if ledger.latest is not None else 0
    step = state.step
    reached = max(step, saved)
    if result.exit_code != 0:
        how = f"after forwarding signal {result.forwarded[0]}" if result.forwarded else "on its own"
        unwritable = next((t for t in WRITE_FAILURE_TEXTS if any(t in line for line in result.tail)), None)
        if unwritable is not None and (problem := probe_writable(ledger.directory)) is not None:
            reason = (
                f"checkpoint directory {ledger.directory} is not writable: {problem}; verl exited with code "
                f"{result.exit_code} at step {step} ({unwritable!r} in its output)"
            )
            return _ended(reason, contract.exit_code(Reason.CHECKPOINT_UNWRITABLE))
        reason = f"verl exited with code {result.exit_code} {how} at step {step}"
        if result.tail:
            reason += "; last output:\n" + "\n".join(result.tail)
        return _ended(reason, result.exit_code, logged=reason.splitlines()[0])
    total = state.total_steps
    if reached < total and (step > 0 or saved > 0 or "console" in job.spec.training.loggers):
        # verl issue #5725: a resume can run zero steps and exit 0. Not a success.
        reason = (
            f"verl stopped early: it exited 0 at step {reached} of {total} "
            f"(last step line {step}, newest checkpoint {saved or 'none'})"
        )
        return _ended(reason, contract.exit_code(Reason.STOPPED_EARLY))
    log(f"verl finished at step {reached}")
    return contract.EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: every failure is one clear message, an exit code and a termination log."""
    try:
        return run(argv)
    except LaunchError as exc:
        log(exc.reason)
        write_termination_message(exc.reason)
        if connection_abandoned():
            # A half-made Ray connection still holds a thread that Ray's exit hooks would wait on.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exc.exit_code)
        return exc.exit_code
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
