"""The comparison report from verl JSONL files (offline): numbers, honesty rules and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flashrl_api import verl_metrics as vm
from flashrl_operator.cli import main
from flashrl_report import PLOT_IDS, REPORT_FILE, build_report, load_run, write_report
from flashrl_report.analysis import Stat, differs, quarters, speedup, stat, wall_hours
from flashrl_report.data import MetricsInputError, RunMetrics, parse_lines
from flashrl_report.paired import PLOT_DIFFERENCE, PLOT_PROBLEMS
from flashrl_report.synthetic import FIXTURE_RUNS, SCORE_KEY, jsonl, write_fixture

PAIRED_PLOTS = (PLOT_DIFFERENCE, PLOT_PROBLEMS)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _run(label: str, text: str) -> RunMetrics:
    run = RunMetrics(label=label)
    parse_lines(run, text.splitlines(), label)
    return run


def test_reads_verl_file_logger_lines_and_skips_what_is_not_a_number() -> None:
    text = "\n".join(
        [
            json.dumps({"step": 0, "data": {SCORE_KEY: 0.1}}),
            json.dumps(
                {"step": 1, "data": {vm.THROUGHPUT: 500, "note": "text", vm.MISMATCH_KL: float("nan")}}
            ),
            "",
            json.dumps({"step": 2, "data": {vm.THROUGHPUT: 510.5, "flag": True}}),
        ]
    )
    run = _run("a", text)
    assert sorted(run.steps) == [0, 1, 2]
    assert run.series(vm.THROUGHPUT) == ([1, 2], [500.0, 510.5])
    assert vm.MISMATCH_KL not in run.steps[1]
    assert run.training_steps() == [1, 2]
    assert any("NaN or infinite" in note for note in run.notes)


def test_a_cut_off_last_line_and_a_broken_middle_line_are_noted_and_the_rest_kept() -> None:
    good = [json.dumps({"step": s, "data": {vm.THROUGHPUT: 100 + s}}) for s in range(1, 5)]
    lines = [good[0], "{not json", good[1], good[2], good[3][:20]]
    run = _run("cut", "\n".join(lines))
    assert run.training_steps() == [1, 2, 3]
    assert any("line 2 is not JSON" in n for n in run.notes)
    assert any("last line (5) is cut off" in n for n in run.notes)


def test_records_that_are_not_verl_records_are_skipped() -> None:
    run = _run("odd", '[1, 2]\n{"step": "3", "data": {}}\n{"step": -1, "data": {}}\n{"step": 4}\n')
    assert run.steps == {}
    assert sum("not a verl record" in n for n in run.notes) == 4


def test_a_directory_of_attempts_is_one_run_with_later_attempts_winning(tmp_path: Path) -> None:
    d = tmp_path / "metrics"
    d.mkdir()
    first = [{"step": s, "data": {vm.THROUGHPUT: 1.0}} for s in range(0, 6)]
    second = [{"step": s, "data": {vm.THROUGHPUT: 2.0}} for s in range(4, 9)]
    (d / "attempt-1.jsonl").write_text("\n".join(json.dumps(r) for r in first))
    (d / "attempt-10.jsonl").write_text("")  # numeric order, not text order: 10 comes after 2
    (d / "attempt-2.jsonl").write_text("\n".join(json.dumps(r) for r in second))
    run = load_run("resumed", d)
    assert [Path(s).name for s in run.sources] == ["attempt-1.jsonl", "attempt-2.jsonl", "attempt-10.jsonl"]
    xs, ys = run.series(vm.THROUGHPUT, training_only=True)
    assert xs == list(range(1, 9))
    assert ys == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0]


def test_missing_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MetricsInputError, match="no such file"):
        load_run("x", tmp_path / "absent.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MetricsInputError, match="no attempt"):
        load_run("x", tmp_path / "empty")


def test_stat_quarters_and_the_spread_rule() -> None:
    s = stat([1, 2, 3], [1.0, 2.0, 3.0])
    assert s == Stat(2.0, 1.0, 3, 1, 3)
    assert quarters([1, 2, 3], [1.0, 2.0, 3.0]) is None  # too short to split
    split = quarters(list(range(1, 9)), [1.0, 1.0, 5, 5, 5, 5, 9.0, 9.0])
    assert split is not None
    assert (split[0].mean, split[1].mean, split[0].n) == (1.0, 9.0, 2)
    # A difference smaller than the step-to-step spread is not a difference.
    assert not differs(Stat(1.0, 0.5, 10, 1, 10), Stat(1.3, 0.2, 10, 1, 10))
    assert differs(Stat(1.0, 0.1, 10, 1, 10), Stat(1.3, 0.2, 10, 1, 10))


def test_wall_time_is_the_running_sum_of_step_and_validation_time() -> None:
    records = [
        {"step": 0, "data": {SCORE_KEY: 0.1}},
        {"step": 1, "data": {vm.TIMING_STEP: 1800.0}},
        {"step": 2, "data": {vm.TIMING_STEP: 1800.0, vm.TIMING_TESTING: 3600.0}},
        {"step": 3, "data": {vm.THROUGHPUT: 1.0}},  # no timing: wall time stops here
        {"step": 4, "data": {vm.TIMING_STEP: 1800.0}},
    ]
    run = _run("w", "\n".join(json.dumps(r) for r in records))
    assert wall_hours(run) == {0: 0.0, 1: 0.5, 2: 2.0}


def test_fp8_speedup_is_found_early_and_not_claimed_where_it_fades() -> None:
    fp8 = _run("fp8", jsonl("blockwise-fp8", 120))
    bf16 = _run("bf16", jsonl("bf16", 120))
    s = speedup(fp8, bf16)
    assert s is not None
    assert s.metric == vm.GEN_MS_PER_TOKEN
    assert s.overall.n == 120
    verdicts = [w.verdict for w in s.windows]
    assert verdicts[0] == "faster"
    assert verdicts[-1] == "no clear difference"
    assert "faster in steps 1–30" in s.change()
    assert "no clear difference from step" in s.change()


def test_two_runs_of_the_same_precision_show_no_clear_difference() -> None:
    # Same engine, different runs: the per-step ratios scatter around 1 by more than their mean moves.
    a = _run("bf16-a", jsonl("bf16", 80, seed=3))
    b = _run("bf16-b", jsonl("bf16", 80, seed=4))
    s = speedup(a, b)
    assert s is not None
    assert s.overall.n == 80
    assert abs(s.overall.mean - 1) <= s.overall.spread
    assert [w.verdict for w in s.windows] == ["no clear difference"] * 4
    assert s.change() == "no clear difference in every quarter of the run"


def test_summary_table_numbers_for_the_origin_experiment() -> None:
    runs = [_run(p, jsonl(p, 100)) for p in ("blockwise-fp8", "channel-fp8", "bf16")]
    report = build_report(runs)
    by_label = {s.label: s for s in report.summaries}
    fp8 = by_label["blockwise-fp8"]
    assert fp8.training_steps == 100
    assert fp8.best_score is not None and fp8.final_score is not None
    assert fp8.final_score[1] == 100
    assert fp8.throughput is not None and fp8.throughput.n == 100
    assert fp8.late_throughput is not None and fp8.late_throughput.n == 25
    assert fp8.speedup is not None and fp8.speedup.overall.mean > 1
    assert by_label["bf16"].speedup is None  # the baseline
    assert fp8.weight_sync_share is not None and 0 < fp8.weight_sync_share[0] < 0.2
    drift = fp8.mismatch_drift()
    assert drift is not None and drift[0].endswith("rises")
    flat = by_label["bf16"].mismatch_drift()
    assert flat is not None and flat[0].endswith("no clear drift")
    assert "speed-ups are relative to bf16" in report.baseline_note
    # Without validation dumps the paired figures say why they are empty; every other one is drawn.
    assert all(p.png is not None for p in report.plots if p.id not in PAIRED_PLOTS)
    assert all(
        "no variant shares validation samples" in p.unavailable for p in report.plots if p.id in PAIRED_PLOTS
    )
    assert report.notes == []


def test_bad_input_is_reported_and_the_rest_still_rendered(tmp_path: Path) -> None:
    fp8 = _write(tmp_path, "fp8.jsonl", jsonl("blockwise-fp8", 60))
    bf16 = _write(tmp_path, "bf16.jsonl", jsonl("bf16", 60, mismatch=False))  # no rollout log-probs
    failed = _write(tmp_path, "channel.jsonl", jsonl("channel-fp8", 60, stop_at=23, truncate=True))
    runs = [load_run("fp8", fp8), load_run("channel", failed), load_run("bf16", bf16)]
    report = build_report(runs)
    notes = "\n".join(report.notes)
    assert "bf16: logged no mismatch and importance-sampling metrics (rollout_corr/*)" in notes
    assert "channel: stops at step 22 while another run reaches step 60" in notes  # step 23 was cut off
    assert "is cut off" in notes
    plots = {p.id: p for p in report.plots}
    assert plots["mismatch-kl"].png is not None
    assert plots["mismatch-kl"].absent == ["bf16"]
    assert (
        "Not drawn (rollout_corr/kl (or rollout_corr/k3_kl) not logged): bf16" in plots["mismatch-kl"].caption
    )
    assert plots["throughput"].absent == []
    channel = report.summaries[1]
    assert channel.training_steps == 22
    assert channel.speedup is not None and channel.speedup.overall.n == 22


def test_a_figure_no_run_can_fill_says_so_on_the_page(tmp_path: Path) -> None:
    text = "\n".join(json.dumps({"step": s, "data": {vm.THROUGHPUT: 100.0 + s}}) for s in range(1, 20))
    report = build_report([_run("a", text), _run("b", text)])
    plots = {p.id: p for p in report.plots}
    assert plots["throughput"].png is not None
    assert plots["mismatch-kl"].png is None
    assert plots["mismatch-kl"].unavailable == "no run logged rollout_corr/kl (or rollout_corr/k3_kl)"
    assert 'id="plot-mismatch-kl" class="plot unavailable"' in report.html
    assert "Not available: no run logged" in report.html
    assert "no run is labelled bf16" in report.baseline_note


def test_duplicate_labels_are_refused() -> None:
    run = _run("same", json.dumps({"step": 1, "data": {}}))
    with pytest.raises(MetricsInputError, match="unique"):
        build_report([run, run])


def test_cli_writes_a_self_contained_page_and_its_pngs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_fixture(tmp_path / "fixture", steps=20, runs=FIXTURE_RUNS[:2])
    args = [
        arg
        for label, (metrics, dumps) in files.items()
        for arg in ("--metrics", f"{label}={metrics}", "--validation", f"{label}={dumps}")
    ]
    out = tmp_path / "report"
    status = main(["report", *args, "--output", str(out)])
    assert status == 0
    assert (
        f"{out / REPORT_FILE}: 2 runs, {len(PLOT_IDS)} of {len(PLOT_IDS)} figures" in capsys.readouterr().out
    )
    assert sorted(p.name for p in out.iterdir()) == sorted([REPORT_FILE, *(f"{i}.png" for i in PLOT_IDS)])
    page = (out / REPORT_FILE).read_text()
    # Self-contained: every image inline, nothing fetched from anywhere.
    assert page.count('src="data:image/png;base64,') == len(PLOT_IDS)
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "<script" not in page
    for plot_id in PLOT_IDS:
        assert (out / f"{plot_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "nolabel"], "expected LABEL=PATH"),
        (["--metrics", "a=/nonexistent/a.jsonl"], "a=/nonexistent/a.jsonl: no such file or directory"),
        ([], "give --experiment NAME, --job NAME or --metrics LABEL=PATH"),
        (["--metrics", "a=/nonexistent/a.jsonl", "--validation", "a"], "expected LABEL=DIR"),
    ],
)
def test_cli_refuses_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["report", *args, "--output", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_report_of_a_write_report_round_trip(tmp_path: Path) -> None:
    runs = [_run("bf16", jsonl("bf16", 12)), _run("fp8", jsonl("blockwise-fp8", 12))]
    written = write_report(build_report(runs, title="T", banner="SYNTHETIC data"), tmp_path / "r")
    assert written[-1].name == REPORT_FILE
    page = written[-1].read_text()
    assert "<title>T</title>" in page and 'class="banner">SYNTHETIC data' in page
