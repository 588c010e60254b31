"""The paired per-problem verdict, on fixture runs with a known effect and a known null.

The fixtures come from the repository's script (scripts/report_fixtures.py, run as a user runs it):
fp8-effect's accuracy is raised on every problem, fp8-null's is the baseline's with other sampling
noise. The report must call the first "higher than bf16" with an interval excluding 0, the second
"no clear difference", and show the per-problem picture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashrl_api.validation_summary import (
    VALIDATION_KEY,
    StepSummary,
    add_summary,
    problem_id,
    summarize_dump,
)
from flashrl_report import build_report, load_run, load_validation
from flashrl_report.cluster import JobObjects, validation_from_objects
from flashrl_report.data import MetricsInputError
from flashrl_report.intervals import Interval, paired_difference
from flashrl_report.paired import PLOT_PROBLEMS, compare, split_label
from flashrl_report.synthetic import FIXTURE_RUNS, validation_rows, write_fixture
from flashrl_report.validation import ValidationSamples, parse_dump, samples_from_summaries

ROOT = Path(__file__).resolve().parents[3]
#: The id of the prompt "p" (flashrl_api.validation_summary.problem_id).
P = problem_id("p")


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fixture")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "report_fixtures.py"), str(out), "--steps", "30"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--validation 'fp8-effect=" in done.stdout
    return out


def _report(out: Path, labels: list[str]):  # type: ignore[no-untyped-def]
    runs = [load_run(label, out / "metrics" / f"{label}.jsonl") for label in labels]
    samples = [load_validation(label, out / "validation" / label) for label in labels]
    return build_report(runs, validation=samples)


def test_the_known_effect_is_detected_and_the_null_is_no_clear_difference(fixture_dir: Path) -> None:
    report = _report(fixture_dir, ["bf16", "fp8-effect", "fp8-null"])
    by_variant = {c.variant: c for c in report.paired}
    effect, null = by_variant["fp8-effect"], by_variant["fp8-null"]
    assert effect.late is not None and null.late is not None
    assert effect.verdict == "higher than bf16"
    assert effect.late.low > 0 and effect.late.n == 30
    assert null.verdict == "no clear difference"
    assert null.late.low < 0 < null.late.high
    # The verdict reaches the summary, with its interval beside it.
    summary = {s.label: s for s in report.summaries}
    assert summary["fp8-effect"].late_verdict is not None
    assert summary["fp8-effect"].late_verdict.startswith("higher than bf16: +")
    assert "% CI" in summary["fp8-effect"].late_verdict
    # The page states the samples per problem, the verdicts with intervals, and the per-problem picture.
    page = report.html
    assert "30 problems × 32 samples each (acc)" in page
    assert "higher than bf16" in page and "no clear difference" in page
    assert '<details class="problems">' in page
    per_problem = next(p for p in report.plots if p.id == PLOT_PROBLEMS)
    assert per_problem.png is not None and "gains or loses" in per_problem.title
    # Every problem of the effect run is gained or even; the null gains some and loses some.
    gains, losses, _ = effect.gains_losses()
    assert gains > 20 and losses < 5
    n_gains, n_losses, _ = null.gains_losses()
    assert n_gains > 3 and n_losses > 3


def test_the_bootstrap_is_seeded_so_a_report_is_reproducible(fixture_dir: Path) -> None:
    def late() -> Interval | None:
        base = load_validation("bf16", fixture_dir / "validation" / "bf16")
        null = load_validation("fp8-null", fixture_dir / "validation" / "fp8-null")
        found = compare({0: null}, {0: base})
        return None if found is None else found.late

    first = late()
    assert first is not None and first == late()


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_held_out_seeds_get_the_right_verdicts(seed: int) -> None:
    # Other problems and other sampling noise than the fixture's: the rule, not one lucky draw.
    def samples(label: str, shift: float) -> ValidationSamples:
        out = ValidationSamples(label)
        for step in (25, 30):
            rows = validation_rows(step, 30, seed=seed, run=label, shift=shift)
            parse_dump(out, [json.dumps(r) for r in rows], step, label)
        return out

    base = samples("bf16", 0.0)
    effect = compare({0: samples("fp8", 0.9)}, {0: base})
    null = compare({0: samples("fp8-null", 0.0)}, {0: base})
    assert effect is not None and effect.verdict == "higher than bf16"
    assert null is not None and null.verdict == "no clear difference"
    worse = compare({0: samples("fp8-worse", -0.9)}, {0: base})
    assert worse is not None and worse.verdict == "lower than bf16"


def test_samples_per_problem_are_counted_from_copies_and_from_repeated_sampling() -> None:
    # 8 copies of each problem in the file, 4 responses each (val_kwargs.n=4): 32 samples per problem.
    samples = ValidationSamples("x")
    rows = validation_rows(10, 30, problems=5, copies=8, samples_per_row=4)
    parse_dump(samples, [json.dumps(r) for r in rows], 10, "10.jsonl")
    assert samples.samples_per_problem() == (32, 32, 32)
    assert samples.problem_count() == 5
    assert samples.describe() == "5 problems × 32 samples each (acc), 1 validations (steps 10–10)"


def test_correctness_is_acc_when_the_reward_reports_it_else_score() -> None:
    with_acc = ValidationSamples("a")
    parse_dump(with_acc, ['{"input": "p", "score": -1.0, "acc": true}'], 1, "1.jsonl")
    assert with_acc.measure == "acc" and with_acc.steps[1] == {P: [1.0]}
    assert with_acc.prompt(P) == "p"
    score_only = ValidationSamples("b")
    lines = ['{"input": "p", "score": 0.5}', '{"input": "p", "score": -1}', "not json", '{"score": 1}']
    parse_dump(score_only, lines, 1, "1.jsonl")
    # One rule (flashrl_api.validation_summary.correctness): without acc, correct means score > 0.
    assert score_only.measure == "score" and score_only.steps[1] == {P: [1.0, 0.0]}
    assert "2 line(s)" in score_only.notes[0]


def test_later_attempts_win_for_a_repeated_validation(tmp_path: Path) -> None:
    for attempt, score in ((1, 0.0), (2, 1.0)):
        directory = tmp_path / f"attempt-{attempt}"
        directory.mkdir()
        (directory / "5.jsonl").write_text(json.dumps({"input": "p", "acc": score}) + "\n")
    (tmp_path / "attempt-1" / "0.jsonl").write_text(json.dumps({"input": "p", "acc": 0.0}) + "\n")
    samples = load_validation("x", tmp_path)
    assert samples.steps == {0: {P: [0.0]}, 5: {P: [1.0]}}


def test_unreadable_validation_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MetricsInputError, match="not a directory"):
        load_validation("x", tmp_path / "missing")
    with pytest.raises(MetricsInputError, match=r"no <step>\.jsonl"):
        load_validation("x", tmp_path)
    files = write_fixture(tmp_path / "f", steps=10, runs=FIXTURE_RUNS[:1])
    run = load_run("bf16", files["bf16"][0])
    with pytest.raises(MetricsInputError, match="name no run"):
        build_report([run], validation=[load_validation("other", files["bf16"][1])])


def test_the_verdict_rule_reads_only_the_interval() -> None:
    assert Interval(0.05, 0.01, 0.09, 30).verdict("higher", "lower") == "higher"
    assert Interval(-0.05, -0.09, -0.01, 30).verdict("higher", "lower") == "lower"
    assert Interval(0.2, -0.01, 0.41, 30).verdict("higher", "lower") == "no clear difference"
    assert paired_difference({"p": [1.0]}, {"q": [0.0]}) is None  # no shared problem
    assert split_label("bf16#2") == ("bf16", 2) and split_label("bf16") == ("bf16", 0)


def test_replicas_are_pooled_seed_by_seed_and_their_spread_shown(tmp_path: Path) -> None:
    files = write_fixture(tmp_path, steps=20, replicas=3)
    samples = [load_validation(label, dumps) for label, (_, dumps) in files.items()]
    runs = [load_run(label, metrics) for label, (metrics, _) in files.items()]
    report = build_report(runs, validation=samples)
    assert "relative to bf16" in report.baseline_note
    by_variant = {c.variant: c for c in report.paired}
    effect, null = by_variant["fp8-effect"], by_variant["fp8-null"]
    assert effect.replicas == [0, 1, 2] and effect.verdict == "higher than bf16"
    assert null.verdict == "no clear difference"
    assert [k for k, _ in effect.per_seed] == [0, 1, 2] and effect.seed_spread() is not None
    # Pooled: three seeds' samples per problem (1 late validation × 32 copies × 3 replicas).
    assert "96 samples (fp8-effect)" in effect.samples
    assert "seed 0: +" in report.html and "; sd " in report.html
    # Each replica's speed-up is against the baseline's replica with the same seed.
    summary = {s.label: s for s in report.summaries}
    assert summary["fp8-effect#2"].speedup is not None and summary["bf16#2"].speedup is None
    # The ledger speed-ups likewise, replica by replica, then their mean, spread and n.
    goodput = {v.label: v for v in report.goodput}
    assert goodput["fp8-effect#1"].comparison is not None and goodput["bf16#1"].comparison is None
    assert "fp8-effect over its 3 replica pairs: end to end" in report.html


def _config_map_summaries(dumps: Path, retried: bool = False) -> str:
    """What the launcher writes to a job's ConfigMap for these dumps (attempt 1; with ``retried``, a
    second attempt that repeated the last two validations with every sample wrong)."""
    text = ""
    files = sorted((int(f.stem), f) for f in dumps.glob("*.jsonl"))
    for step, file in files:
        text = add_summary(text, step, 1, summarize_dump(file.read_text().splitlines()))
    if retried:
        for step, file in files[-2:]:
            rows = [{**json.loads(line), "acc": False} for line in file.read_text().splitlines()]
            text = add_summary(text, step, 2, summarize_dump([json.dumps(r) for r in rows]))
    return text


def test_the_verdict_from_the_configmap_summaries_is_the_one_from_the_dumps(fixture_dir: Path) -> None:
    labels = ["bf16", "fp8-effect", "fp8-null"]
    from_files = _report(fixture_dir, labels)
    objects = [
        JobObjects(
            label,
            f"x-{label}",
            None,
            {"data": {VALIDATION_KEY: _config_map_summaries(fixture_dir / "validation" / label)}},
        )
        for label in labels
    ]
    summaries = validation_from_objects("rl", objects)
    assert [s.label for s in summaries] == labels
    assert summaries[0].sources == [f"ConfigMap rl/x-bf16-metrics {VALIDATION_KEY}"]
    runs = [load_run(label, fixture_dir / "metrics" / f"{label}.jsonl") for label in labels]
    from_cluster = build_report(runs, validation=summaries)
    assert [(c.variant, c.verdict, c.late, c.per_step) for c in from_cluster.paired] == [
        (c.variant, c.verdict, c.late, c.per_step) for c in from_files.paired
    ]
    assert from_cluster.paired[0].verdict == "higher than bf16"
    # Without the prompts (the ConfigMap holds ids only) the table names problems by id.
    assert summaries[0].describe() == from_files_samples(fixture_dir, "bf16").describe()


def from_files_samples(out: Path, label: str) -> ValidationSamples:
    return load_validation(label, out / "validation" / label)


def test_a_retried_validation_in_the_configmap_is_the_later_attempts(fixture_dir: Path) -> None:
    text = _config_map_summaries(fixture_dir / "validation" / "bf16", retried=True)
    samples = samples_from_summaries("bf16", text, "cm")
    last = sorted(samples.steps)[-2:]
    assert all(sum(v) == 0 for step in last for v in samples.steps[step].values())
    earlier = sorted(samples.steps)[-3]
    assert any(sum(v) > 0 for v in samples.steps[earlier].values())


def test_dropped_and_refused_validations_are_named_on_the_page() -> None:
    big = StepSummary({f"{i:012x}": (32, 16) for i in range(300)}, "acc")
    text = ""
    for step in range(0, 100, 5):
        text = add_summary(text, step, 1, big, max_bytes=48 * 1024)
    samples = samples_from_summaries("bf16", text, "ConfigMap rl/x-metrics")
    assert min(samples.steps) > 0
    assert any("were dropped to keep the ConfigMap under its bound" in n for n in samples.notes)


def test_validation_reads_only_regular_files_inside_the_directory(tmp_path: Path) -> None:
    """A link named like a dump (to a file elsewhere, or to an attempt directory elsewhere) is not
    read: the other file's prompt never reaches the run; the report says what was skipped."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(json.dumps({"input": "someone's prompt", "acc": 1.0}) + "\n")
    (outside / "9.jsonl").write_text(json.dumps({"input": "someone's prompt", "acc": 1.0}) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "5.jsonl").write_text(json.dumps({"input": "p", "acc": 1.0}) + "\n")
    (run / "999.jsonl").symlink_to(outside / "secret.jsonl")
    samples = load_validation("x", run)
    assert samples.steps == {5: {P: [1.0]}}
    assert "someone's prompt" not in json.dumps(samples.prompts)
    assert [n for n in samples.notes if "999.jsonl" in n and "symbolic link" in n]
    # An attempt directory that is a link is not followed either.
    attempts = tmp_path / "attempts"
    (attempts / "attempt-1").mkdir(parents=True)
    (attempts / "attempt-1" / "5.jsonl").write_text(json.dumps({"input": "p", "acc": 0.0}) + "\n")
    (attempts / "attempt-2").symlink_to(outside, target_is_directory=True)
    samples = load_validation("x", attempts)
    assert samples.steps == {5: {P: [0.0]}}
    assert [n for n in samples.notes if "attempt-2" in n and "symbolic link" in n]
    # Nothing but links: refused, saying why.
    only_links = tmp_path / "links"
    only_links.mkdir()
    (only_links / "1.jsonl").symlink_to(outside / "secret.jsonl")
    with pytest.raises(MetricsInputError, match="symbolic link"):
        load_validation("x", only_links)


def test_a_dump_beyond_the_size_bound_is_skipped_with_a_note(tmp_path: Path) -> None:
    from flashrl_report.validation import read_dump

    (tmp_path / "1.jsonl").write_text(json.dumps({"input": "p", "acc": 1.0}) + "\n")
    big = tmp_path / "2.jsonl"
    big.write_text((json.dumps({"input": "q", "acc": 1.0}) + "\n") * 100)
    notes: list[str] = []
    assert read_dump("x", big, notes, limit=1000) is None
    assert notes and "more than the 1000" in notes[0] and "skipped" in notes[0]
    lines = read_dump("x", tmp_path / "1.jsonl", notes, limit=1000)
    assert lines is not None and len(lines) == 1
    fifo = tmp_path / "3.jsonl"
    os.mkfifo(fifo)
    assert read_dump("x", fifo, notes) is None  # never blocks on a pipe
    assert "not a regular file" in notes[-1]
    samples = load_validation("x", tmp_path)  # the pipe is not a regular file: not even listed
    assert set(samples.steps) == {1, 2}
