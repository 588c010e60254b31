"""The comparison report as a browser shows it: Debian's Chromium, headless, over DevTools.

Fixture metrics come from the synthetic generator (labelled synthetic on the page). The page must
show every figure with a decoded image, the summary row of every run, and the console, the
exception handler and the browser log must stay silent; a report of bad input must still render
and say, in the page, what is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cdp import inspect_report

from flashrl_operator.report import PLOT_IDS, REPORT_FILE, build_report, load_run, write_report
from flashrl_operator.report.synthetic import jsonl

pytestmark = pytest.mark.browser

BANNER = "Synthetic metrics (flashrl_operator/report/synthetic.py): shapes only, nothing was measured."


def _report(tmp_path: Path, runs: dict[str, str]) -> Path:
    loaded = []
    for label, text in runs.items():
        path = tmp_path / f"{label}.jsonl"
        path.write_text(text, encoding="utf-8")
        loaded.append(load_run(label, path))
    write_report(build_report(loaded, banner=BANNER), tmp_path / "report")
    return tmp_path / "report" / REPORT_FILE


async def test_every_figure_renders_without_console_errors(tmp_path: Path) -> None:
    page = _report(tmp_path, {p: jsonl(p, 60) for p in ("blockwise-fp8", "channel-fp8", "bf16")})
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
    assert all(f["img"] and f["img"]["complete"] and f["img"]["width"] > 0 for f in figures.values())
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
    end_to_end, generation = rows["blockwise-fp8"][4], rows["blockwise-fp8"][5]
    assert end_to_end.endswith("x") and generation.endswith("x") and end_to_end != generation
    assert "weight_sync makes the difference" in seen["goodputText"]
