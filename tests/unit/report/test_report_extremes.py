"""``flashrl report`` survives finite extreme values: one figure that cannot be drawn costs that figure
alone, with a note, from files and from a job's status and history alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flashrl_api import verl_metrics as vm
from flashrl_api.history import HISTORY_KEY, render_history
from flashrl_report import PLOT_IDS, build_report, load_run, write_report
from flashrl_report.cluster import JobObjects, runs_from_objects
from flashrl_report.paired import PLOT_DIFFERENCE, PLOT_PROBLEMS
from flashrl_report.synthetic import records

#: Figures that need validation samples: not drawn for metrics alone, whatever the values.
NEED_SAMPLES = {PLOT_DIFFERENCE, PLOT_PROBLEMS}


def _extreme(precision: str) -> list[dict[str, Any]]:
    """A synthetic run whose throughput jumps from -1e308 to 1e308 (finite, and too wide for an axis)."""
    out = list(records(precision, 30))
    out[5]["data"][vm.THROUGHPUT] = -1e308
    out[6]["data"][vm.THROUGHPUT] = 1e308
    return out


def _check(report_plots: dict[str, Any], notes: list[str]) -> None:
    throughput = report_plots["throughput"]
    assert throughput.png is None
    assert "could not be drawn" in throughput.unavailable
    assert any(n.startswith("figure throughput: not drawn") for n in notes)
    drawn = {i for i, p in report_plots.items() if p.png is not None}
    # Every other figure the data allows is drawn.
    assert drawn >= set(PLOT_IDS) - NEED_SAMPLES - {"throughput", "generation-speedup"}


def test_from_files_one_bad_figure_costs_that_figure(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in _extreme("blockwise-fp8")), encoding="utf-8")
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in records("bf16", 30)), encoding="utf-8")
    report = build_report([load_run("fp8", bad), load_run("bf16", good)])
    plots = {p.id: p for p in report.plots}
    _check(plots, report.notes)
    assert plots["generation-speedup"].png is not None
    written = write_report(report, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert 'id="plot-throughput" class="plot unavailable"' in page
    assert "figure throughput: not drawn" in page
    assert not (tmp_path / "out" / "throughput.png").exists()
    assert tmp_path / "out" / "entropy.png" in written


def test_from_a_jobs_history_and_status_one_bad_figure_costs_that_figure() -> None:
    history = {r["step"]: {k: float(v) for k, v in r["data"].items()} for r in _extreme("bf16")}
    goodput = {"byPhase": [{"phase": "generation", "seconds": 1e308, "gpuSeconds": -1e308}]}
    job = {
        "metadata": {"name": "x-bf16"},
        "spec": {"resources": {"nodes": 1, "gpusPerNode": 8}},
        "status": {
            "phase": "Succeeded",
            "goodput": goodput,
            "metrics": [{"name": vm.ENTROPY, "value": 1e308, "step": 3}],
        },
    }
    objects = [
        JobObjects("bf16", "x-bf16", job, {"data": {HISTORY_KEY: render_history(history, 10**9)}}),
        JobObjects("fp8", "x-fp8", dict(job, metadata={"name": "x-fp8"}), None),
    ]
    runs = runs_from_objects("rl", objects)
    # The status' value cannot be real: dropped (the history keeps plausible values only).
    assert runs[1].series(vm.ENTROPY) == ([], [])
    report = build_report(runs)
    plots = {p.id: p for p in report.plots}
    assert plots["throughput"].png is None
    assert any(n.startswith("figure throughput: not drawn") for n in report.notes)
    assert plots["entropy"].png is not None
    assert "<html" in report.html
