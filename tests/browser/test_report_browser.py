"""The comparison report as a browser shows it: Debian's Chromium, headless, over DevTools.

Fixture metrics come from the synthetic generator (labelled synthetic on the page). The page must
show every figure with a decoded image, the summary row of every run, and the console, the
exception handler and the browser log must stay silent; a report of bad input must still render
and say, in the page, what is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cdp import inspect_report

from flashrl_report import PLOT_IDS, REPORT_FILE, build_report, load_run, load_validation, write_report
from flashrl_report.plots import FIXED_COLORS, PALETTE
from flashrl_report.synthetic import FixtureRun, jsonl, write_fixture

pytestmark = pytest.mark.browser

BANNER = "Synthetic metrics (flashrl_report/synthetic.py): shapes only, nothing was measured."


def _report(tmp_path: Path, runs: dict[str, str], validation: dict[str, Path] | None = None) -> Path:
    loaded = []
    for label, text in runs.items():
        path = tmp_path / f"{label}.jsonl"
        path.write_text(text, encoding="utf-8")
        loaded.append(load_run(label, path))
    samples = [load_validation(label, path) for label, path in (validation or {}).items()]
    write_report(build_report(loaded, banner=BANNER, validation=samples), tmp_path / "report")
    return tmp_path / "report" / REPORT_FILE


def _dumps(tmp_path: Path, labels: tuple[str, ...], steps: int) -> dict[str, Path]:
    """Validation dumps for synthetic runs of these precisions (no built-in effect)."""
    written = write_fixture(tmp_path / "fixture", steps=steps, runs=tuple(FixtureRun(p, p) for p in labels))
    return {label: dumps for label, (_, dumps) in written.items()}


async def test_every_figure_renders_without_console_errors(tmp_path: Path) -> None:
    precisions = ("blockwise-fp8", "channel-fp8", "bf16")
    page = _report(tmp_path, {p: jsonl(p, 60) for p in precisions}, _dumps(tmp_path, precisions, 60))
    seen, result, _ = await inspect_report(page.as_uri())
    assert result.errors() == []
    assert seen["title"] == "FlashRL comparison"
    assert [f["id"] for f in seen["figures"]] == [f"plot-{i}" for i in PLOT_IDS]
    for figure in seen["figures"]:
        img = figure["img"]
        assert img is not None, figure["id"]
        assert img["complete"] and img["width"] > 300 and img["height"] > 200, figure
        assert img["shown"] > 300, figure  # laid out, not collapsed
    assert [row.split("\n")[0] for row in seen["rows"]] == ["blockwise-fp8", "channel-fp8", "bf16"]
    assert seen["external"] == [] and seen["scripts"] == 0
    assert seen["notes"] == []


async def test_bad_input_renders_and_says_what_is_missing(tmp_path: Path) -> None:
    page = _report(
        tmp_path,
        {
            "blockwise-fp8": jsonl("blockwise-fp8", 60),
            "channel-fp8": jsonl("channel-fp8", 60, stop_at=31, truncate=True),
            "bf16": jsonl("bf16", 40, mismatch=False),
        },
    )
    seen, result, _ = await inspect_report(page.as_uri())
    assert result.errors() == []
    figures = {f["id"]: f for f in seen["figures"]}
    assert set(figures) == {f"plot-{i}" for i in PLOT_IDS}
    # Every figure but the paired two (no validation dumps here: they say so) is drawn.
    paired = {"plot-paired-difference", "plot-per-problem"}
    assert all(
        f["img"] and f["img"]["complete"] and f["img"]["width"] > 0
        for f in figures.values()
        if f["id"] not in paired
    )
    assert all(figures[p]["unavailable"] for p in paired)
    assert (
        "Not drawn" in figures["plot-mismatch-kl"]["text"] and "bf16" in figures["plot-mismatch-kl"]["text"]
    )
    notes = "\n".join(seen["notes"])
    assert "bf16: logged no mismatch" in notes
    assert "channel-fp8: stops at step 30 while another run reaches step 60" in notes
    assert "is cut off" in notes


async def test_a_figure_without_data_is_a_message_not_a_broken_image(tmp_path: Path) -> None:
    # Runs from a verl without rollout log-probs or the debug metrics: no mismatch, ESS or probs diff.
    page = _report(tmp_path, {p: jsonl(p, 30, mismatch=False) for p in ("blockwise-fp8", "bf16")})
    seen, result, _ = await inspect_report(page.as_uri())
    assert result.errors() == []
    figures = {f["id"]: f for f in seen["figures"]}
    for missing in ("plot-mismatch-kl", "plot-is-ess", "plot-probs-diff"):
        assert figures[missing]["unavailable"] and figures[missing]["img"] is None
        assert "Not available: no run logged" in figures[missing]["text"]
    assert figures["plot-throughput"]["img"]["complete"]


def _rgb(hex_color: str) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


async def test_a_variant_keeps_its_colour_in_every_report(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _report(tmp_path / "a", {p: jsonl(p, 30) for p in ("blockwise-fp8", "channel-fp8", "bf16")})
    second = _report(tmp_path / "b", {p: jsonl(p, 30) for p in ("bf16", "blockwise-fp8")})
    seen_a, result_a, _ = await inspect_report(first.as_uri())
    seen_b, result_b, _ = await inspect_report(second.as_uri())
    assert result_a.errors() == [] and result_b.errors() == []
    colours_a = dict(zip([r.split("\n")[0] for r in seen_a["rows"]], seen_a["swatches"], strict=True))
    colours_b = dict(zip([r.split("\n")[0] for r in seen_b["rows"]], seen_b["swatches"], strict=True))
    # bf16 is first in one report and last in the other: its colour follows its label, not the order.
    assert colours_a["bf16"] == colours_b["bf16"] == _rgb(PALETTE[FIXED_COLORS["bf16"]])
    assert (
        colours_a["blockwise-fp8"]
        == colours_b["blockwise-fp8"]
        == _rgb(PALETTE[FIXED_COLORS["blockwise-fp8"]])
    )
    assert len(set(colours_a.values())) == 3


async def test_the_paired_verdict_and_the_per_problem_picture(tmp_path: Path) -> None:
    """Fixture runs with a known effect and a known null (scripts/report_fixtures.py's): the page calls
    the effect higher than bf16 and the null no clear difference, each with its interval, and draws
    which problems each variant gains or loses."""
    files = write_fixture(tmp_path / "fixture", steps=30)
    runs = {label: metrics.read_text(encoding="utf-8") for label, (metrics, _) in files.items()}
    page = _report(tmp_path, runs, {label: dumps for label, (_, dumps) in files.items()})
    seen, result, _ = await inspect_report(page.as_uri())
    assert result.errors() == []
    rows = {cells[0].split("\n")[0]: cells for cells in seen["paired"]}
    assert set(rows) == {"fp8-effect", "fp8-null"}
    assert rows["fp8-effect"][2] == "higher than bf16"
    assert rows["fp8-null"][2] == "no clear difference"
    for cells in rows.values():
        assert re.search(r"[+-]\d\.\d{3} \(95 % CI [+-]\d\.\d{3} to [+-]\d\.\d{3}\)", cells[1]), cells[1]
        assert "n=30 problems" in cells[1]
    assert "30 problems × 32 samples each (acc)" in seen["pairedText"]
    figures = {f["id"]: f for f in seen["figures"]}
    for plot in ("plot-per-problem", "plot-paired-difference"):
        img = figures[plot]["img"]
        assert img is not None and img["complete"] and img["width"] > 300 and img["shown"] > 300, plot
    assert "One bar per validation problem" in figures["plot-per-problem"]["text"]


async def test_validation_columns_show_n_spread_and_a_verdict(tmp_path: Path) -> None:
    page = _report(tmp_path, {p: jsonl(p, 60) for p in ("blockwise-fp8", "bf16")})
    seen, result, _ = await inspect_report(page.as_uri())
    assert result.errors() == []
    headers = seen["headers"]
    best = next(i for i, h in enumerate(headers) if h.startswith("best validation score"))
    late = next(i for i, h in enumerate(headers) if h.startswith("late validation score"))
    assert "best quarter of validations in a row" in headers[best]
    rows = {cells[0].split("\n")[0]: cells for cells in seen["cells"]}
    for column in (best, late):
        fp8, bf16 = rows["blockwise-fp8"][column], rows["bf16"][column]
        assert re.search(r"± [0-9.e-]+\s*n=\d+, steps \d+–\d+", fp8), fp8
        assert re.search(r"(higher than|lower than|no clear difference from) bf16", fp8), fp8
        assert bf16.rstrip().endswith("baseline"), bf16


async def test_the_goodput_section_compares_fp8_with_bf16_end_to_end(tmp_path: Path) -> None:
    """Two variants: FP8 generates faster but syncs weights slower; the page says both speed-ups apart
    and which phase makes the difference, and draws the phases of each variant as a stacked bar."""
    page = _report(tmp_path, {p: jsonl(p, 40) for p in ("blockwise-fp8", "bf16")})
    seen, result, _ = await inspect_report(page.as_uri())
    assert result.errors() == []
    figure = next(f for f in seen["figures"] if f["id"] == "plot-goodput-phases")
    assert figure["img"]["complete"] and figure["img"]["width"] > 300 and figure["img"]["shown"] > 300
    rows = {cells[0]: cells for cells in seen["goodput"]}
    assert set(rows) == {"blockwise-fp8", "bf16 (baseline)"}
    end_to_end, generation = rows["blockwise-fp8"][5], rows["blockwise-fp8"][6]
    # Each speed-up says what it rests on: one pair of runs, so no interval of its own.
    assert end_to_end.endswith("\nn=1 pair of runs: no interval") and generation.endswith("no interval")
    assert end_to_end.split("\n")[0].endswith("x") and generation.split("\n")[0].endswith("x")
    assert end_to_end.split("\n")[0] != generation.split("\n")[0]
    assert "weight_sync makes the difference" in seen["goodputText"]
