"""The report keeps its own promise for validation scores (no difference claimed inside the step-to-step
spread, no single spike called the best) and draws each variant in the same colour in every report."""

from __future__ import annotations

import json
import re
from pathlib import Path

from flashrl_report import build_report
from flashrl_report.analysis import Stat, best_stretch, compared
from flashrl_report.data import RunMetrics, parse_lines
from flashrl_report.html import HEADERS
from flashrl_report.plots import FIXED_COLORS, PALETTE, color_of, colors_by_label
from flashrl_report.synthetic import SCORE_KEY, jsonl

ROOT = Path(__file__).resolve().parents[3]


def _run(label: str, text: str) -> RunMetrics:
    run = RunMetrics(label=label)
    parse_lines(run, text.splitlines(), label)
    return run


def _validations(label: str, scores: list[float]) -> RunMetrics:
    lines = [json.dumps({"step": 10 * i, "data": {SCORE_KEY: v}}) for i, v in enumerate(scores)]
    return _run(label, "\n".join(lines))


def test_a_single_spike_is_not_the_best_score() -> None:
    scores = [0.20, 0.21, 0.22, 0.90, 0.21, 0.23, 0.24, 0.25, 0.24, 0.26, 0.25, 0.27]
    best = best_stretch(list(range(len(scores))), scores)
    assert best is not None
    assert best.n == 3 and best.std is not None  # a quarter of the validations, with its spread
    assert best.mean < 0.5  # the 0.90 spike alone does not make a best
    assert best.mean == max(sum(scores[i : i + 3]) / 3 for i in range(len(scores) - 2))


def test_a_difference_inside_the_spread_is_no_difference() -> None:
    base = Stat(0.30, 0.05, 4, 1, 4)
    assert (
        compared(Stat(0.33, 0.04, 4, 1, 4), base, "bf16")
        == "no clear difference from bf16 (within the spread)"
    )
    assert compared(Stat(0.45, 0.04, 4, 1, 4), base, "bf16") == "higher than bf16"
    assert compared(Stat(0.10, 0.04, 4, 1, 4), base, "bf16") == "lower than bf16"
    # One validation has no spread: never a verdict, however far apart.
    assert (
        compared(Stat(0.9, None, 1, 5, 5), base, "bf16")
        == "no clear difference from bf16 (n=1: no spread to judge by)"
    )
    assert compared(None, base, "bf16") is None


def test_the_summary_states_n_spread_and_verdict_for_best_and_late() -> None:
    spike = _validations("blockwise-fp8", [0.2, 0.21, 0.2, 0.95, 0.2, 0.21, 0.21, 0.2])
    steady = _validations("bf16", [0.2, 0.22, 0.21, 0.2, 0.21, 0.22, 0.2, 0.21])
    report = build_report([spike, steady])
    fp8 = next(s for s in report.summaries if s.label == "blockwise-fp8")
    assert fp8.best_score is not None and fp8.best_score.n == 2
    assert fp8.best_verdict == "no clear difference from bf16 (within the spread)"
    assert fp8.late_verdict is not None and fp8.late_verdict.startswith("no clear difference from bf16")
    baseline = next(s for s in report.summaries if s.label == "bf16")
    assert baseline.best_verdict is None and baseline.late_verdict is None
    assert any("best quarter of validations" in h for h in HEADERS)
    page = report.html
    assert "higher than bf16" not in page and "no clear difference from bf16 (within the spread)" in page
    assert "n=2, steps" in page


def test_a_clear_difference_is_called_one() -> None:
    high = _validations("blockwise-fp8", [0.5, 0.52, 0.51, 0.5, 0.53, 0.52, 0.51, 0.52])
    low = _validations("bf16", [0.2, 0.22, 0.21, 0.2, 0.21, 0.22, 0.2, 0.21])
    fp8 = next(s for s in build_report([high, low]).summaries if s.label == "blockwise-fp8")
    assert fp8.best_verdict == "higher than bf16" and fp8.late_verdict == "higher than bf16"


def test_a_variant_keeps_its_colour_whatever_the_order_and_company() -> None:
    runs = {p: _run(p, jsonl(p, 12)) for p in ("blockwise-fp8", "channel-fp8", "bf16")}
    one = [runs["blockwise-fp8"], runs["channel-fp8"], runs["bf16"]]
    other = [runs["bf16"], runs["blockwise-fp8"]]
    for run in other:
        assert color_of(one, run) == color_of(other, run)
    assert colors_by_label(["bf16", "x", "y"]) == colors_by_label(["y", "bf16", "x"])
    for label, index in FIXED_COLORS.items():
        assert colors_by_label([label, "my-variant"])[label] == PALETTE[index]
        assert colors_by_label([f"fp8-vs-bf16-{label}"])[f"fp8-vs-bf16-{label}"] == PALETTE[index]


def test_colours_in_one_report_are_distinct() -> None:
    labels = [f"variant-{i}" for i in range(len(PALETTE))]
    assert len(set(colors_by_label(labels).values())) == len(PALETTE)


def test_the_synthetic_metrics_usage_passes_the_banner() -> None:
    usage = (ROOT / "scripts" / "synthetic_metrics.py").read_text(encoding="utf-8")
    report_command = re.search(r"flashrl report .*?(?:\n\n|\"\"\")", usage, re.S)
    assert report_command is not None and "--banner" in report_command.group(0)
