"""The demo's last act: an emulated two-variant experiment (blockwise FP8 vs BF16) and its report.

The operator is the real one; the API server is the emulator, KubeRay and the launcher are played,
and the per-step metrics the launcher reports are SYNTHETIC
(:mod:`flashrl_report.synthetic`), as the output and the report's banner say. When a variant
finishes, the emulated KubeRay runs its RayJob's deletion rules as KubeRay does: the GPU workers at
once, the head after the TTL (played at once); the report is then read the way a user's
``flashrl report --experiment`` reads it: from the jobs' history ConfigMaps, over the API.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Final, TextIO

from flashrl_api.history import HISTORY_KEY, history_name, parse_history
from flashrl_api.validation_summary import VALIDATION_KEY, parse_summaries
from flashrl_jobs.validation_watch import ValidationWatch
from flashrl_operator.client.report_runs import load_cluster_runs
from flashrl_operator.sim.apiserver import (
    CONFIG_MAPS_RESOURCE,
    EVENTS_RESOURCE,
    EXPERIMENTS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    EmulatedApiServer,
)
from flashrl_operator.sim.harness import EmulatedCluster
from flashrl_operator.sim.logs import HeldLogs, held_logs
from flashrl_operator.sim.progress import DEFAULT_STALL_S, Progress
from flashrl_operator.sim.staging import BATCH_JOBS_RESOURCE
from flashrl_operator.sim.standins import SUCCEEDED, TRAINING
from flashrl_report import build_report, write_report
from flashrl_report.synthetic import records, validation_rows, validation_steps

NAMESPACE: Final = "rl"
NAME: Final = "fp8-vs-bf16"
#: Steps each emulated variant reports (the real runs have 150).
STEPS: Final = 30
VARIANTS: Final = (("blockwise-fp8", "blockwise-fp8"), ("bf16", "bf16"))
BANNER: Final = (
    "Emulated run: the API server and KubeRay were emulated and every metric is SYNTHETIC "
    "(flashrl_report/synthetic.py); nothing was trained or measured."
)


def manifest(steps: int = STEPS) -> dict[str, Any]:
    """The demo's experiment: the origin recipe, two precisions, a short run."""
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLExperiment",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "template": {"training": {"totalSteps": steps}},
            "variants": [{"name": name, "spec": {"rollout": {"quantization": q}}} for name, q in VARIANTS],
        },
    }


async def run_experiment(
    out: TextIO,
    report_dir: Path,
    stall_s: float = DEFAULT_STALL_S,
    steps: int = STEPS,
    held: HeldLogs | None = None,
) -> Path:
    """Run the experiment on a fresh emulated cluster; return the written report's path. Each wait
    gives up when nothing moved for ``stall_s`` seconds (:class:`~flashrl_operator.sim.progress.Progress`)."""
    server = EmulatedApiServer()
    # kmock scans its request history on every request: keep it short, the demo needs no record.
    server.keep_requests = 64
    async with EmulatedCluster(server) as cluster:
        api, kuberay = cluster.api, cluster.kuberay
        operator = await cluster.start_operator(retry_delay=0.5, request_timeout=10.0, resync_interval=1.0)
        progress = Progress(server, held, stall_s, alive=lambda: operator.alive)

        async def _until(what: str, probe: Any) -> Any:
            return await progress.until(probe, what)

        def say(text: str) -> None:
            print(f"  {text}", file=out)

        async def experiment() -> dict[str, Any]:
            obj = await api.get(EXPERIMENTS_RESOURCE, NAMESPACE, NAME)
            return dict((obj or {}).get("status") or {})

        print(
            f"\nA FlashRLExperiment, {NAMESPACE}/{NAME}: the same run with blockwise-FP8 and BF16 rollout",
            file=out,
        )
        await api.create(EXPERIMENTS_RESOURCE, manifest(steps))
        jobs = [f"{NAME}-{name}" for name, _ in VARIANTS]
        for job in jobs:
            await _until(f"FlashRLJob {job}", lambda job=job: api.get(JOBS_RESOURCE, NAMESPACE, job))
            # The variants' sources are the recipe's Hugging Face defaults: each is staged first.
            stage = f"{job}-stage"
            await _until(f"staging Job {stage}", lambda s=stage: api.get(BATCH_JOBS_RESOURCE, NAMESPACE, s))
            await cluster.staging.succeed(NAMESPACE, stage)
            await _until(f"RayJob {job}", lambda job=job: api.get(RAY_JOBS_RESOURCE, NAMESPACE, job))
        say(
            f"operator: created FlashRLJobs {', '.join(jobs)} (owned by the experiment); Job controller "
            "(emulated): their staging Jobs completed; operator: then their RayJobs"
        )
        for job in jobs:
            await kuberay.set_status(NAMESPACE, job, TRAINING)
        say(
            f"KubeRay (emulated): both Ray clusters up, verl running; launcher (emulated): {steps} steps each"
        )
        streams = {job: records(q, steps) for job, (_, q) in zip(jobs, VARIANTS, strict=True)}
        # verl's validation dumps on the claim (synthetic); the launcher's own summariser reports them.
        dumps = _validation_dumps(report_dir / "claim", steps)
        watches = {
            job: ValidationWatch(dumps[name] / "attempt-1", 1, say)
            for job, (name, _) in zip(jobs, VARIANTS, strict=True)
        }
        for record_pair in zip(*streams.values(), strict=True):
            for job, record in zip(jobs, record_pair, strict=True):
                if record["step"] > 0:
                    await kuberay.report_named_metrics(NAMESPACE, job, record["step"], steps, record["data"])
                    entries = watches[job].poll(record["step"])
                    if entries:
                        await kuberay.report_validations(NAMESPACE, job, entries)
            # Let the operator record each step before the next (the launcher reports once per step).
            await asyncio.gather(
                *(
                    _until(
                        f"{job}'s history to reach step {record['step']}",
                        lambda job=job, step=record["step"]: _history_has(api, job, step),
                    )
                    for job, record in zip(jobs, record_pair, strict=True)
                    if record["step"] > 0
                )
            )
        status = await experiment()
        say(
            "experiment status: "
            + ", ".join(
                f"{v['name']} {v['phase']} {v.get('step')}/{v.get('totalSteps')}"
                for v in status.get("variants", [])
            )
        )
        for job in jobs:
            await kuberay.set_status(NAMESPACE, job, SUCCEEDED)
        status = await _until(
            "the experiment to succeed",
            lambda: _when(experiment(), lambda s: s.get("phase") == "Succeeded"),
        )
        say(f"experiment: {status['phase']}, {status['finished']} variants finished")
        say(
            "KubeRay (emulated): each run's GPU workers deleted when it ended (the RayJob's deletionRules: "
            "DeleteWorkers, ttlSeconds 0); the CPU heads keep the logs for the TTL"
        )
        ttls = []
        for job in jobs:
            spec = ((await api.get(RAY_JOBS_RESOURCE, NAMESPACE, job)) or {}).get("spec") or {}
            rules = (spec.get("deletionStrategy") or {}).get("deletionRules") or []
            ttl = max((int((r.get("condition") or {}).get("ttlSeconds") or 0) for r in rules), default=0)
            ttls.append(ttl)
            await kuberay.teardown(NAMESPACE, job, float(ttl))
        later = max(ttls, default=0)
        say(f"KubeRay (emulated): {later} s later (played at once): Ray clusters deleted (DeleteCluster)")
        events = await api.list(EVENTS_RESOURCE, NAMESPACE)
        posted = [
            f"{e.get('reason')}: {e.get('message')}"
            for e in events
            if (e.get("involvedObject") or {}).get("kind") == "FlashRLExperiment"
        ]
        say("experiment Events: " + ("; ".join(posted) if posted else "none"))
        await asyncio.gather(
            *(
                _until(
                    f"{job}'s per-problem validation summaries",
                    lambda job=job: _validations_have(api, job, validation_steps(steps)[-1]),
                )
                for job in jobs
            )
        )
        runs, samples, title = await asyncio.to_thread(load_cluster_runs, NAMESPACE, NAME, [], cluster.url)
        report = build_report(runs, title=title, banner=BANNER, validation=samples)
        written = write_report(report, report_dir)
        say(
            f"flashrl report --experiment {NAME}: read {len(runs)} histories over the API and "
            f"{len(samples)} runs' per-problem validation summaries (no copy off the claim) -> {written[-1]}"
        )
        say("its verdict, one line per variant (SYNTHETIC metrics: the shapes, not a measurement):")
        for line in report.verdicts:
            say(f"  {line}")
        return written[-1]


def run_experiment_demo(
    out: TextIO, err: TextIO, report_dir: Path, steps: int = STEPS, stall_s: float = DEFAULT_STALL_S
) -> int:
    """Run the experiment act; 0 when it completed and the report was written, 1 otherwise."""
    started = time.monotonic()
    with held_logs() as held:
        try:
            page = asyncio.run(run_experiment(out, report_dir, stall_s, steps, held))
        except TimeoutError as exc:
            print(f"\nFAILED: the experiment did not complete: {exc}", file=err)
            print("The operator's log:\n" + "\n".join(held.lines[-60:]), file=err)
            return 1
    print(
        f"\nOK: the experiment ran both variants and its report is at {page} "
        f"({time.monotonic() - started:.1f}s; open it in a browser).",
        file=out,
    )
    return 0


def _validation_dumps(out: Path, steps: int) -> dict[str, Path]:
    """SYNTHETIC validation dumps for each variant, as verl writes them to the claim
    (``<checkpoint dir>/validation/attempt-1/<step>.jsonl``): the same problems for both, no
    built-in difference between the precisions."""
    written: dict[str, Path] = {}
    for name, _ in VARIANTS:
        directory = out / name / "attempt-1"
        directory.mkdir(parents=True, exist_ok=True)
        for step in validation_steps(steps):
            rows = validation_rows(step, steps, run=name)
            (directory / f"{step}.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
            )
        written[name] = out / name
    return written


async def _history_has(api: Any, job: str, step: int) -> bool | None:
    cm = await api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, history_name(job))
    if cm is None:
        return None
    return True if step in parse_history(str((cm.get("data") or {}).get(HISTORY_KEY) or "")) else None


async def _validations_have(api: Any, job: str, step: int) -> bool | None:
    cm = await api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, history_name(job))
    text = str(((cm or {}).get("data") or {}).get(VALIDATION_KEY) or "")
    return True if step in parse_summaries(text).steps else None


async def _when(pending: Any, check: Any) -> Any:
    value = await pending
    return value if check(value) else None


__all__ = ["NAME", "NAMESPACE", "STEPS", "manifest", "run_experiment", "run_experiment_demo"]
