"""The report's goodput answer: GPU-hours by phase per variant, end-to-end and generation-only speed-ups."""

from __future__ import annotations

from typing import Any

import pytest

from flashrl_api.goodput import AttemptSpan, GoodputPhase, LauncherClock, compare, job_ledger, step_ledger
from flashrl_api.history import HISTORY_KEY, add_step
from flashrl_report import build_report
from flashrl_report.analysis import best_stretch
from flashrl_report.cluster import JobObjects, runs_from_objects
from flashrl_report.data import RunMetrics, parse_lines
from flashrl_report.synthetic import SCORE_KEY, jsonl, records


def _run(label: str, precision: str, steps: int = 40) -> RunMetrics:
    run = RunMetrics(label=label)
    parse_lines(run, jsonl(precision, steps).splitlines(), f"{label}.jsonl")
    return run


def test_fp8_faster_in_generation_but_slower_in_weight_sync_is_less_faster_end_to_end() -> None:
    """The synthetic profiles: blockwise FP8 generates ~10 % faster and syncs weights 50 % slower."""
    report = build_report([_run("fp8", "blockwise-fp8"), _run("bf16", "bf16")], baseline="bf16")
    fp8, bf16 = report.goodput
    assert (fp8.label, bf16.label) == ("fp8", "bf16") and bf16.comparison is None
    comparison = fp8.comparison
    assert comparison is not None
    assert comparison.generation > 1.0  # faster where it generates
    assert comparison.end_to_end < comparison.generation  # ... by less per step, all phases counted
    assert comparison.decisive == GoodputPhase.WEIGHT_SYNC and comparison.decisive_delta > 0
    assert "weight_sync makes the difference" in report.html
    assert f"{comparison.end_to_end:.2f}x end to end" in report.html
    assert f"{comparison.generation:.2f}x in generation alone" in report.html
    # GPU-hours to the highest score both reached by the best-stretch rule: the lower of the two runs'
    # best stretches (a quarter of the validations in a row, never one spike), with the stretch shown.
    best = min(
        stretch.mean
        for r in (_run("a", "blockwise-fp8"), _run("b", "bf16"))
        if (stretch := best_stretch(*r.series(SCORE_KEY))) is not None
    )
    assert f"≥ {best:.3g} (best-stretch rule)" in report.html
    assert all(v.reached is not None and v.reached.n >= 2 and v.reached.mean >= best for v in report.goodput)
    assert "first reached over steps" in report.html and "n=1 pair of runs: no interval" in report.html
    assert fp8.hours_to_score is not None and 0 < fp8.hours_to_score <= fp8.held_hours
    assert 'id="plot-goodput-phases"' in report.html
    assert next(p for p in report.plots if p.id == "goodput-phases").png is not None


def test_the_decisive_phase_is_the_one_that_separates_the_two_speed_ups() -> None:
    base = step_ledger([{"timing_s/step": 100.0, "timing_s/gen": 60.0, "timing_s/update_weights": 5.0}])
    faster = step_ledger([{"timing_s/step": 80.0, "timing_s/gen": 40.0, "timing_s/update_weights": 5.0}])
    slower_sync = step_ledger(
        [{"timing_s/step": 95.0, "timing_s/gen": 40.0, "timing_s/update_weights": 20.0}]
    )
    plain = compare(faster, 1, base, 1)
    assert (
        plain is not None
        and plain.generation == pytest.approx(1.5)
        and plain.end_to_end == pytest.approx(1.25)
    )
    # No other phase changed: the unchanged rest of the step dilutes the gain, and the sentence says so.
    assert plain.decisive is None and "dilute" in plain.sentence("fp8", "bf16")
    synced = compare(slower_sync, 1, base, 1)
    assert synced is not None and synced.decisive == GoodputPhase.WEIGHT_SYNC
    assert synced.decisive_delta == pytest.approx(15.0)


def _history(precision: str, steps: int) -> dict[str, Any]:
    text = ""
    for record in records(precision, steps):
        text = add_step(text, record["step"], record["data"])
    return {"data": {HISTORY_KEY: text}}


def _status_goodput(startup: float, restart: bool) -> dict[str, Any]:
    """status.goodput of a 16-GPU job whose launcher saw 30 steps (a retry adds a lost attempt)."""
    spans = []
    start = 0.0
    for number in (1, 2) if restart else (1,):
        clock = LauncherClock(launched=start + 300.0)
        clock.gate(start + 300.0, start + 330.0)
        now = start + 330.0 + startup
        for values in (r["data"] for r in records("bf16", 30) if r["step"] >= 1):
            now += values["timing_s/step"] + values.get("timing_s/testing", 0.0)
            clock.step(values, now)
        failed = restart and number == 1
        spans.append(
            AttemptSpan(
                number, 16, start, start + 300.0, now, clock.phases(now), 30, now + 60, now + 120, failed, 5
            )
        )
        start = now + 200.0
    return job_ledger(spans, as_of=start).to_wire()


def _job(goodput: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "j"},
        "spec": {"resources": {"nodes": 2, "gpusPerNode": 8}},
        "status": {"phase": "Succeeded", "goodput": goodput},
    }


def test_from_the_cluster_the_whole_ledger_counts_start_up_and_restarts() -> None:
    """Same verl steps, but one job started slowly and failed once: end to end it is far slower."""
    objects = [
        JobObjects("retried", "x-retried", _job(_status_goodput(900.0, restart=True)), _history("bf16", 30)),
        JobObjects("clean", "x-clean", _job(_status_goodput(120.0, restart=False)), _history("bf16", 30)),
    ]
    runs = runs_from_objects("rl", objects)
    assert runs[0].gpus == 16 and runs[0].goodput is not None
    report = build_report(runs, baseline="clean")
    retried, clean = report.goodput
    assert retried.whole and clean.whole
    assert retried.held_hours > 2 * clean.held_hours * 0.9
    comparison = retried.comparison
    assert comparison is not None
    # 30 + 25 steps' generation (5 of the first attempt's were lost) for the same 30 steps.
    assert comparison.generation == pytest.approx(30 / 55, rel=0.01)
    assert comparison.decisive is not None and comparison.end_to_end < 0.5
    assert retried.ledger.gpu_seconds[GoodputPhase.LOST_STEPS] > 0
    assert "From verl's step timings only" not in report.html


def test_a_score_reached_only_by_single_validations_is_not_shown() -> None:
    # 12 steps: validations at steps 0, 5, 10 and 12, so every stretch is one validation.
    from flashrl_report.goodput import common_score, goodput_section, goodput_summaries

    runs = [_run("fp8", "blockwise-fp8", 12), _run("bf16", "bf16", 12)]
    assert common_score(runs, SCORE_KEY) is None
    variants, target = goodput_summaries(runs, SCORE_KEY, runs[1])
    assert target is None and all(v.hours_to_score is None for v in variants)
    assert "one validation is a spike, not a score reached" in goodput_section(
        variants, target, SCORE_KEY, "bf16"
    )


def test_the_step_and_goodput_figures_name_and_colour_phases_alike() -> None:
    from flashrl_report.plots import PHASE_COLORS, time_breakdown_plot

    plot = time_breakdown_plot([_run("bf16", "bf16", 10)])
    assert plot.png is not None
    for phase in ("generation", "weight_sync", "log_prob", "actor_update", "checkpoint", "step_other"):
        assert phase in plot.caption
        assert GoodputPhase(phase) in PHASE_COLORS
