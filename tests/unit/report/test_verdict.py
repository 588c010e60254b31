"""The report's opening never contradicts the status: one verdict line per variant (speed-up and
accuracy, each with its interval), and runs without training metrics show the status's own step and a
banner saying why."""

from __future__ import annotations

from typing import Any

from manifests import job_object as _job

from flashrl_api.history import HISTORY_KEY, add_step
from flashrl_report import build_report
from flashrl_report.cluster import JobObjects, runs_from_objects
from flashrl_report.synthetic import records


def _history(precision: str, steps: int) -> dict[str, Any]:
    text = ""
    for record in records(precision, steps):
        text = add_step(text, record["step"], record["data"])
    return {"data": {HISTORY_KEY: text}}


def test_played_runs_show_the_status_step_and_say_no_training_metrics() -> None:
    objects = [
        JobObjects(v, f"origin-{v}", _job("Succeeded", progress={"step": 150, "totalSteps": 150}), None)
        for v in ("blockwise-fp8", "channel-fp8", "bf16")
    ]
    runs = runs_from_objects("rl", objects)
    assert [r.status_step for r in runs] == [(150, 150)] * 3
    report = build_report(runs)
    assert report.no_metrics is not None
    assert report.no_metrics.startswith("No training metrics for 3 of 3 runs: ")
    assert "blockwise-fp8 at step 150/150" in report.no_metrics and "played run" in report.no_metrics
    assert report.verdicts == [
        f"{v}: no training metrics (status at step 150/150): no speed-up or accuracy verdict"
        for v in ("blockwise-fp8", "channel-fp8", "bf16")
    ]
    # The banner says it once: no note per metric group each run did not log.
    assert not [note for note in report.notes if "logged no" in note], report.notes
    page = report.html
    assert 'id="no-metrics"' in page and 'id="verdict"' in page
    # The summary's steps column shows the status's step, never a bare 0 that kubectl contradicts.
    assert page.count("<td>150/150<span") == 3
    assert '<td>0<span class="sub">last step 0' not in page
    assert page.index('id="verdict"') < page.index('id="summary"')


def test_a_run_whose_metrics_are_not_in_yet_says_so() -> None:
    objects = [
        JobObjects("blockwise-fp8", "x-a", _job("Running", progress={"step": 3, "totalSteps": 150}), None),
        JobObjects("bf16", "x-b", _job("Succeeded"), _history("bf16", 30)),
    ]
    report = build_report(runs_from_objects("rl", objects))
    assert report.no_metrics == (
        "No training metrics for 1 of 2 runs: blockwise-fp8 (status at step 3/150): metrics not yet "
        "reported (the launcher reports them from verl's first step)."
    )
    assert report.verdicts[0] == (
        "blockwise-fp8: no training metrics (status at step 3/150): no speed-up or accuracy verdict"
    )
    assert report.verdicts[1] == "bf16: the baseline"


def test_each_variant_opens_with_its_speedup_and_accuracy_verdicts_and_their_intervals() -> None:
    objects = [
        JobObjects("blockwise-fp8", "x-fp8", _job("Succeeded"), _history("blockwise-fp8", 30)),
        JobObjects("bf16", "x-bf16", _job("Succeeded"), _history("bf16", 30)),
    ]
    report = build_report(runs_from_objects("rl", objects))
    assert report.no_metrics is None and 'id="no-metrics"' not in report.html
    fp8, bf16 = report.verdicts
    assert bf16 == "bf16: the baseline"
    speedup = report.summaries[0].speedup
    assert speedup is not None and speedup.interval is not None
    assert fp8.startswith(f"blockwise-fp8 vs bf16: generation {speedup.verdict}, ")
    assert speedup.interval.text(unit="×") in fp8  # the estimate with its 95 % interval
    assert "; accuracy " in fp8
    # Without validation samples the accuracy verdict is the late validation score's, by the same rule.
    assert fp8.split("; accuracy ")[1] == report.summaries[0].late_verdict
    assert f"<li>{fp8}</li>" in report.html


def test_without_a_baseline_each_run_says_that_is_why_it_has_no_verdict() -> None:
    """Two seeds of one variant (no run labelled bf16, no --baseline): each has a validation score, so
    the line must not claim there is none."""
    objects = [
        JobObjects(label, f"x-{label}", _job("Succeeded"), _history("blockwise-fp8", 30))
        for label in ("seed-1", "seed-2")
    ]
    report = build_report(runs_from_objects("rl", objects))
    assert report.verdicts == [
        f"{label}: no speed-up or accuracy verdict without a baseline (--baseline names one)"
        for label in ("seed-1", "seed-2")
    ]
    named = build_report(runs_from_objects("rl", objects), baseline="seed-1")
    assert named.verdicts[0] == "seed-1: the baseline"
    assert named.verdicts[1].startswith("seed-2 vs seed-1: generation ")
