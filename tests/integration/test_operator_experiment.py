"""FlashRLExperiment with the real operator on the real API server: jobs created and owned,
status gathered, finished when all finish, parallelism honoured, deleted with the experiment, and
`flashrl report` reading the result through the user's kubeconfig after the Ray clusters are gone."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest
from operator_harness import LOCAL_SOURCES, NAMESPACE, WAIT_S, Cluster, StartOperator

from flashrl_api.exported_metrics import status_metric_names
from flashrl_api.history import HISTORY_KEY, parse_history
from flashrl_api.validation_summary import VALIDATION_KEY, parse_summaries
from flashrl_jobs.validation_watch import ValidationWatch
from flashrl_operator.cli import main
from flashrl_operator.sim import (
    CONFIG_MAPS_RESOURCE,
    EXPERIMENTS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUCCEEDED,
    TRAINING,
    eventually,
    failed,
)
from flashrl_report import PLOT_IDS
from flashrl_report.synthetic import FixtureRun, records, write_fixture

STEPS = 12


def experiment_manifest(name: str, parallelism: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # Sources on the claims, as the other operator tests use: nothing to stage (the demo stages).
        "template": {"training": {"totalSteps": STEPS}, **LOCAL_SOURCES},
        "variants": [
            {"name": "fp8", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
            {"name": "bf16", "spec": {"rollout": {"quantization": "bf16"}}},
        ],
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLExperiment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


async def experiment_status(cluster: Cluster, name: str) -> dict[str, Any]:
    obj = await cluster.api.get(EXPERIMENTS_RESOURCE, NAMESPACE, name)
    assert obj is not None
    return dict(obj.get("status") or {})


async def wait_experiment(cluster: Cluster, name: str, check: Any, what: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        status = await experiment_status(cluster, name)
        return status if check(status) else None

    return await eventually(probe, f"FlashRLExperiment {name}: {what}", WAIT_S, cluster.poll_s)


async def run_variant(
    cluster: Cluster,
    job: str,
    precision: str,
    *,
    fail_at: int | None = None,
    teardown: bool = True,
    dumps: Path | None = None,
) -> None:
    """Play KubeRay and the launcher for one variant: training, a report per step, the end (and, unless
    ``teardown`` is False, KubeRay's deletion rules deleting its GPU workers at once). With ``dumps``
    (verl's validation dumps of the run), the launcher's own summariser reports each validation."""
    await cluster.wait_for(RAY_JOBS_RESOURCE, job)
    await cluster.kuberay.set_status(NAMESPACE, job, TRAINING)
    await cluster.wait_phase(job, "Running")
    watch = ValidationWatch(dumps, 1, print) if dumps is not None else None
    for record in records(precision, STEPS):
        step = record["step"]
        if step == 0:
            continue
        if fail_at is not None and step > fail_at:
            break
        await cluster.kuberay.report_named_metrics(NAMESPACE, job, step, STEPS, record["data"])
        entries = watch.poll(step) if watch is not None else None
        if entries:
            await cluster.kuberay.report_validations(NAMESPACE, job, entries)
            await eventually(
                functools.partial(validation_step, cluster, job, entries[-1]["step"]),
                f"{job} validation summaries to reach step {entries[-1]['step']}",
                WAIT_S,
                cluster.poll_s,
            )
        # One status patch per step, as the launcher makes: wait until the operator recorded it.
        await eventually(
            functools.partial(history_step, cluster, job, step),
            f"{job} history to reach step {step}",
            WAIT_S,
            cluster.poll_s,
        )
    if fail_at is None:
        await cluster.kuberay.set_status(NAMESPACE, job, SUCCEEDED)
        await cluster.wait_phase(job, "Succeeded")
    else:
        await cluster.kuberay.set_status(
            NAMESPACE, job, failed("AppFailed", "verl exited with 1"), teardown=teardown
        )
        await cluster.wait_phase(job, "Failed")


async def history_step(cluster: Cluster, job: str, step: int) -> bool | None:
    cm = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, f"{job}-metrics")
    if cm is None:
        return None
    return True if step in parse_history(cm["data"][HISTORY_KEY]) else None


async def validation_step(cluster: Cluster, job: str, step: int) -> bool | None:
    cm = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, f"{job}-metrics")
    text = ((cm or {}).get("data") or {}).get(VALIDATION_KEY)
    return True if text and step in parse_summaries(text).steps else None


async def test_an_experiment_runs_its_variants_and_reports_them(
    cluster: Cluster,
    start_operator: StartOperator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await start_operator()
    created = await cluster.api.create(EXPERIMENTS_RESOURCE, experiment_manifest("cmp"))

    # One FlashRLJob per variant, owned by the experiment, identical but for the variant's field.
    fp8 = await cluster.wait_for(JOBS_RESOURCE, "cmp-fp8")
    bf16 = await cluster.wait_for(JOBS_RESOURCE, "cmp-bf16")
    for job in (fp8, bf16):
        (owner,) = job["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "FlashRLExperiment",
            "cmp",
            created["metadata"]["uid"],
        )
        assert owner["controller"] is True
    assert fp8["spec"]["rollout"]["quantization"] == "blockwise-fp8"
    assert bf16["spec"]["rollout"]["quantization"] == "bf16"
    assert fp8["spec"]["training"]["totalSteps"] == bf16["spec"]["training"]["totalSteps"] == STEPS
    status = await wait_experiment(cluster, "cmp", lambda s: s.get("finished") == "0/2", "0/2 finished")
    assert [v["name"] for v in status["variants"]] == ["fp8", "bf16"]

    # verl's validation dumps of each run (synthetic: one shape for both); the launcher summarises them.
    dumps = write_fixture(
        tmp_path / "claim", steps=STEPS, runs=(FixtureRun("fp8", "bf16"), FixtureRun("bf16", "bf16"))
    )

    # Both train; the experiment's status follows their phase, step and latest metrics.
    await run_variant(cluster, "cmp-fp8", "blockwise-fp8", dumps=dumps["fp8"][1])
    status = await wait_experiment(
        cluster, "cmp", lambda s: s["variants"][0].get("phase") == "Succeeded", "fp8 Succeeded"
    )
    assert status["phase"] == "Running" and status["finished"] == "1/2"
    fp8_status = status["variants"][0]
    assert fp8_status["step"] == STEPS and fp8_status["jobName"] == "cmp-fp8"
    # The last step validates too, so every reported metric is there, at that step: what the launcher
    # reports, the training score and entropy the report draws among them.
    last = next(r["data"] for r in records("blockwise-fp8", STEPS) if r["step"] == STEPS)
    names = {m["name"] for m in fp8_status["metrics"]}
    assert names == set(status_metric_names(last))
    assert {"critic/score/mean", "actor/entropy", "val-core/aime-2024/acc/mean@1"} <= names
    assert {m["step"] for m in fp8_status["metrics"]} == {STEPS}
    await run_variant(cluster, "cmp-bf16", "bf16", dumps=dumps["bf16"][1])
    status = await wait_experiment(cluster, "cmp", lambda s: s.get("phase") == "Succeeded", "Succeeded")
    assert status["finished"] == "2/2"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Succeeded"] == "True"

    # The GPU workers went when each run ended; KubeRay deletes the rest after the TTL (played: the
    # RayJobs deleted): the report does not need them.
    for job in ("cmp-fp8", "cmp-bf16"):
        await cluster.api.delete(RAY_JOBS_RESOURCE, NAMESPACE, job)
    monkeypatch.setenv("KUBECONFIG", str(cluster.real.kubeconfig))
    out = tmp_path / "report"
    # The CLI, as a user runs it (its own event loop, in its own thread here): no copy off the claim,
    # the per-problem summaries come from the jobs' ConfigMaps.
    argv = ["report", "--experiment", "cmp", "-n", NAMESPACE, "--output", str(out)]
    assert await asyncio.to_thread(main, argv) == 0
    page = (out / "report.html").read_text()
    assert f"FlashRL experiment {NAMESPACE}/cmp" in page
    assert f"ConfigMap {NAMESPACE}/cmp-fp8-metrics" in page
    assert f"ConfigMap {NAMESPACE}/cmp-bf16-metrics {VALIDATION_KEY}" in page
    # Every figure drawn: from the histories, the paired two from the summaries of the dumps.
    assert page.count('src="data:image/png;base64,') == len(PLOT_IDS)
    assert '<tr data-variant="fp8">' in page
    assert "fp8" in page and "bf16" in page

    # Deleting the experiment deletes its jobs (and what they own) through Kubernetes' garbage collector.
    await cluster.api.delete(EXPERIMENTS_RESOURCE, NAMESPACE, "cmp")
    await cluster.gone(JOBS_RESOURCE, "cmp-fp8")
    await cluster.gone(JOBS_RESOURCE, "cmp-bf16")
    await cluster.gone(CONFIG_MAPS_RESOURCE, "cmp-fp8-metrics")


async def test_parallelism_one_runs_variants_one_after_another_and_a_failure_frees_the_slot(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator()
    await cluster.api.create(EXPERIMENTS_RESOURCE, experiment_manifest("seq", parallelism=1))
    await cluster.wait_for(JOBS_RESOURCE, "seq-fp8")
    status = await wait_experiment(
        cluster,
        "seq",
        lambda s: [v.get("phase") for v in s.get("variants", [])][1:] == ["Waiting"],
        "bf16 waiting",
    )
    assert await cluster.api.get(JOBS_RESOURCE, NAMESPACE, "seq-bf16") is None
    assert (status["variants"][1]["reason"], status["variants"][1]["message"]) == (
        "WaitingForSlot",
        "waits for a slot (spec.parallelism 1): fp8 (seq-fp8) runs",
    )
    # The variant fails and its GPU workers outlive it: the next one is not created while they hold
    # the GPUs (it could not be scheduled, and its startup deadline would count the wait).
    await run_variant(cluster, "seq-fp8", "blockwise-fp8", fail_at=5, teardown=False)
    status = await wait_experiment(
        cluster,
        "seq",
        lambda s: [v.get("reason") for v in s.get("variants", [])][1:] == ["WaitingForGPUs"],
        "bf16 waiting for fp8's GPUs",
    )
    assert "waits for the GPUs of fp8 (seq-fp8)" in status["variants"][1]["message"]
    assert await cluster.api.get(JOBS_RESOURCE, NAMESPACE, "seq-bf16") is None
    # KubeRay's deletion rules delete the workers: the GPUs are released and the next one starts.
    await cluster.kuberay.teardown(NAMESPACE, "seq-fp8", 0.0)
    await cluster.wait_for(JOBS_RESOURCE, "seq-bf16")
    status = await wait_experiment(cluster, "seq", lambda s: s.get("finished") == "1/2", "1/2 finished")
    assert status["variants"][0]["phase"] == "Failed"
    assert status["reason"] == "VariantFailed"
    await run_variant(cluster, "seq-bf16", "bf16")
    status = await wait_experiment(cluster, "seq", lambda s: s.get("phase") == "Failed", "Failed")
    assert status["finished"] == "2/2"
    assert status["message"].startswith("fp8 failed")

    async def posted() -> list[tuple[str, str]] | None:
        seen = [(e["reason"], e["message"].split(":")[0]) for e in await cluster.events_for("seq")]
        return seen if ("VariantFinished", "bf16") in seen else None

    events = await eventually(posted, "the experiment's Events", WAIT_S, cluster.poll_s)
    for expected in (
        ("VariantStarted", "fp8"),
        ("VariantWaiting", "bf16"),
        ("VariantFailed", "fp8"),
        ("VariantStarted", "bf16"),
        ("VariantFinished", "bf16"),
    ):
        assert expected in events, events


def data_changing_experiment(name: str) -> dict[str, Any]:
    """An experiment whose second variant changes the training data (only rollout settings may vary)."""
    manifest = experiment_manifest(name)
    manifest["spec"]["variants"][1] = {"name": "bf16", "spec": {"data": {"train": "/data/other.parquet"}}}
    return manifest


async def test_the_server_refuses_an_experiment_whose_variant_changes_the_data(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """The CRD's CEL rule judges it at admission, with the field path: nothing is stored or created."""
    await start_operator()
    manifest = data_changing_experiment("bad")
    with pytest.raises(RuntimeError, match="HTTP 422") as refused:
        await cluster.api.create(EXPERIMENTS_RESOURCE, manifest)
    assert "spec.variants: a variant may change the rollout precision" in str(refused.value)
    assert await cluster.api.get(EXPERIMENTS_RESOURCE, NAMESPACE, "bad") is None
    assert await cluster.api.list(JOBS_RESOURCE, NAMESPACE) == []


async def test_replicas_become_seed_paired_jobs_and_long_names_are_refused_at_admission(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """spec.replicas: 2 makes <experiment>-<variant>-r<k> jobs, replica k of both variants with one seed;
    a name that fits without the -r<k> suffix but not with it is refused by the CRD's CEL rule."""
    too_long = experiment_manifest("e" * 56)  # 56 + "-bf16" fits 63; with "-r0" it does not
    too_long["spec"]["replicas"] = 2
    with pytest.raises(RuntimeError, match="HTTP 422") as refused:
        await cluster.api.create(EXPERIMENTS_RESOURCE, too_long)
    assert "(and -r" in str(refused.value)  # the rule that counts the -r<k> suffix (escaped JSON)
    await start_operator()
    manifest = experiment_manifest("rep")
    manifest["spec"]["replicas"] = 2
    await cluster.api.create(EXPERIMENTS_RESOURCE, manifest)
    seeds = {}
    for variant in ("fp8", "bf16"):
        for k in (0, 1):
            job = await cluster.wait_for(JOBS_RESOURCE, f"rep-{variant}-r{k}")
            assert job["metadata"]["labels"]["flashrl.dev/replica"] == str(k)
            seeds[(variant, k)] = job["spec"]["training"]["seed"]
    assert seeds[("fp8", 0)] == seeds[("bf16", 0)] != seeds[("fp8", 1)] == seeds[("bf16", 1)]
    status = await wait_experiment(cluster, "rep", lambda s: len(s.get("variants", [])) == 4, "4 jobs")
    assert [(v["name"], v.get("replica")) for v in status["variants"]] == [
        ("fp8", 0),
        ("fp8", 1),
        ("bf16", 0),
        ("bf16", 1),
    ]


@pytest.mark.kmock(
    reason="an experiment the CRD's CEL rule refuses at admission, as on a cluster whose CRD is older "
    "than the operator"
)
async def test_an_invalid_experiment_is_failed_with_field_paths_and_creates_nothing(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator()
    manifest = data_changing_experiment("bad")
    await cluster.api.create(EXPERIMENTS_RESOURCE, manifest)
    status = await wait_experiment(cluster, "bad", lambda s: s.get("phase") == "Failed", "Failed")
    assert status["reason"] == "InvalidSpec"
    assert "spec.variants[1].spec.data.train: changes the data" in status["message"]
    assert [j for j in await cluster.api.list(JOBS_RESOURCE, NAMESPACE)] == []


def test_the_demos_experiment_completes_and_writes_its_report(tmp_path: Path) -> None:
    import io

    from flashrl_operator.sim.experiment_demo import run_experiment_demo

    out, err = io.StringIO(), io.StringIO()
    assert run_experiment_demo(out, err, tmp_path / "report", steps=8) == 0, err.getvalue()
    text = out.getvalue()
    assert "experiment: Succeeded, 2/2 variants finished" in text
    assert "read 2 histories over the API" in text
    page = (tmp_path / "report" / "report.html").read_text()
    assert "SYNTHETIC" in page and page.count('src="data:image/png;base64,') == len(PLOT_IDS)
    # The launcher's per-problem summaries of the dumps, read from the ConfigMaps, give the paired
    # verdict (no built-in difference there).
    assert "2 runs' per-problem validation summaries (no copy off the claim)" in text
    assert '<tr data-variant="blockwise-fp8">' in page and "samples each (acc)" in page
    # The report and the demo open with one line per variant: speed-up and accuracy, with intervals.
    assert "    blockwise-fp8 vs bf16: generation " in text and "    bf16: the baseline" in text
    assert "(paired, per problem)" in text.split("blockwise-fp8 vs bf16: generation ")[1].splitlines()[0]
    assert page.index('id="verdict"') < page.index('id="summary"')


# --- issue 18: tenancy probes ---------------------------------------------------------------------


def _variants_manifest(name: str, variants: list[str]) -> dict[str, Any]:
    manifest = experiment_manifest(name)
    manifest["spec"]["variants"] = [
        {"name": v, "spec": {"rollout": {"quantization": "bf16" if "bf16" in v else "blockwise-fp8"}}}
        for v in variants
    ]
    return manifest


async def test_colliding_experiments_never_take_each_others_jobs(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """Experiment ``ab`` with variant ``x-bf16`` and ``ab-x`` with variant ``bf16`` both name a job
    ``ab-x-bf16``: the first keeps it, the second reports JobNameTaken naming the owner."""
    await start_operator(resync_interval=0.5)
    first = await cluster.api.create(EXPERIMENTS_RESOURCE, _variants_manifest("ab", ["x-bf16", "fp8"]))
    taken = await cluster.wait_for(JOBS_RESOURCE, "ab-x-bf16")
    await cluster.api.create(EXPERIMENTS_RESOURCE, _variants_manifest("ab-x", ["bf16", "fp8"]))
    status = await wait_experiment(
        cluster, "ab-x", lambda s: s.get("reason") == "JobNameTaken", "JobNameTaken"
    )
    assert "ab-x-bf16" in status["message"] and first["metadata"]["uid"] in status["message"]
    assert [v["phase"] for v in status["variants"] if v["name"] == "bf16"] == ["Waiting"]
    await cluster.wait_for(JOBS_RESOURCE, "ab-x-fp8")  # its other variant goes ahead
    # A few resyncs later the first experiment's job is as it made it (its own reconciler writes its
    # status), and still its own.
    await wait_experiment(cluster, "ab", lambda s: s.get("finished") == "0/2", "ab's variants exist")
    now = await cluster.api.get(JOBS_RESOURCE, NAMESPACE, "ab-x-bf16")
    assert now is not None
    for key in ("ownerReferences", "labels", "uid"):
        assert now["metadata"].get(key) == taken["metadata"].get(key), key
    assert now["spec"] == taken["spec"]
    first_status = await experiment_status(cluster, "ab")
    assert "JobDeleted" not in str(first_status)


async def test_a_users_job_with_a_variants_name_is_never_adopted(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """A FlashRLJob the experiment did not create (same name, label and spec) is left alone."""
    from operator_harness import job_manifest

    mine = job_manifest("own-fp8", {"training": {"totalSteps": STEPS}})
    mine["metadata"]["labels"] = {"flashrl.dev/experiment": "own"}
    await cluster.api.create(JOBS_RESOURCE, mine)
    before = await cluster.api.get(JOBS_RESOURCE, NAMESPACE, "own-fp8")
    await start_operator(resync_interval=0.5)
    await cluster.api.create(EXPERIMENTS_RESOURCE, _variants_manifest("own", ["fp8", "bf16"]))
    status = await wait_experiment(
        cluster, "own", lambda s: s.get("reason") == "JobNameTaken", "JobNameTaken"
    )
    assert "own-fp8" in status["message"] and "it has no controller" in status["message"]
    await cluster.wait_for(JOBS_RESOURCE, "own-bf16")
    after = await cluster.api.get(JOBS_RESOURCE, NAMESPACE, "own-fp8")
    assert after is not None and before is not None
    assert after["metadata"].get("ownerReferences") is None
    assert after["spec"] == before["spec"] and after["metadata"]["labels"] == before["metadata"]["labels"]


async def test_a_configmap_under_the_metrics_name_is_left_alone(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """Someone else's ``<job>-metrics`` ConfigMap is not overwritten, adopted or garbage-collected with
    the job: it stays byte-identical and the job gets a ChildConflict Event."""
    from operator_harness import job_manifest

    squatter = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "sq-metrics", "namespace": NAMESPACE, "labels": {"owner": "someone-else"}},
        "data": {HISTORY_KEY: "theirs"},
    }
    await cluster.api.create(CONFIG_MAPS_RESOURCE, squatter)
    before = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, "sq-metrics")
    await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("sq", {"training": {"totalSteps": STEPS}}))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "sq")
    await cluster.kuberay_says("sq", TRAINING, "Running")
    record = next(r for r in records("bf16", STEPS) if r["step"] == 1)
    await cluster.kuberay.report_named_metrics(NAMESPACE, "sq", 1, STEPS, record["data"])

    async def warned() -> bool | None:
        events = await cluster.events_for("sq")
        hits = [e for e in events if e["reason"] == "ChildConflict" and "sq-metrics" in e["message"]]
        return True if hits else None

    await eventually(warned, "a ChildConflict Event about sq-metrics", 20.0)
    assert await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, "sq-metrics") == before


async def test_a_metrics_configmap_recreated_by_someone_else_is_a_conflict_and_survives_the_job(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """Issue 33: ownership is proved at every write, not remembered from the first. The job's own
    ``<job>-metrics`` ConfigMap, deleted and re-created by another user (no owner), is reported as
    ChildConflict at the next step's write, is not merged into or marked as the job's, and survives
    the job's deletion (the garbage collector has nothing of the job's to follow)."""
    from operator_harness import job_manifest

    await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("re", {"training": {"totalSteps": STEPS}}))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "re")
    await cluster.kuberay_says("re", TRAINING, "Running")
    data = {r["step"]: r["data"] for r in records("bf16", STEPS)}
    await cluster.kuberay.report_named_metrics(NAMESPACE, "re", 1, STEPS, data[1])
    await eventually(functools.partial(history_step, cluster, "re", 1), "step 1 in re-metrics", WAIT_S)
    job = await cluster.job("re")

    await cluster.api.delete(CONFIG_MAPS_RESOURCE, NAMESPACE, "re-metrics")
    await cluster.gone(CONFIG_MAPS_RESOURCE, "re-metrics")
    theirs = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "re-metrics", "namespace": NAMESPACE, "labels": {"owner": "someone-else"}},
        "data": {"notes": "theirs"},
    }
    await cluster.api.create(CONFIG_MAPS_RESOURCE, theirs)
    before = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, "re-metrics")
    await cluster.kuberay.report_named_metrics(NAMESPACE, "re", 2, STEPS, data[2])

    async def warned() -> bool | None:
        events = await cluster.events_for("re")
        hits = [e for e in events if e["reason"] == "ChildConflict" and "re-metrics" in e["message"]]
        return True if hits else None

    await eventually(warned, "a ChildConflict Event about re-metrics", 20.0)
    after = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, "re-metrics")
    assert after == before  # not merged into, no ownerReference added
    assert not (after or {}).get("metadata", {}).get("ownerReferences")

    await cluster.api.delete(JOBS_RESOURCE, NAMESPACE, "re")
    await cluster.gone(JOBS_RESOURCE, "re")
    # The garbage collector has followed the job's own children (its RayJob is gone); the foreign
    # ConfigMap, which the operator never marked as the job's, stays as its owner left it.
    await cluster.emulated_gc()
    await cluster.gone(RAY_JOBS_RESOURCE, "re")
    assert await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, "re-metrics") == before
    assert job["metadata"]["uid"] not in str(before)
