"""Regenerate docs/images/report.png: a report of synthetic metrics, as headless Chromium shows it.

    .venv/bin/python tests/browser/make_screenshot.py [OUT.png]

The metrics and validation dumps are the synthetic fixture (flashrl_report/synthetic.py), and the
page says so.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from cdp import inspect_report

from flashrl_report import REPORT_FILE, build_report, load_run, load_validation, write_report
from flashrl_report.synthetic import FixtureRun, write_fixture

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    """Write the screenshot; returns the exit status."""
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images" / "report.png"
    out = out.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the page lists its sources: show them as bare file names
        # Synthetic metrics and validation dumps (the score in the metrics is the dumps' mean, as in verl;
        # no built-in difference between the precisions' accuracies).
        precisions = ("blockwise-fp8", "channel-fp8", "bf16")
        fixture = write_fixture(Path("."), steps=150, runs=tuple(FixtureRun(p, p) for p in precisions))
        runs = [load_run(label, metrics) for label, (metrics, _) in fixture.items()]
        validation = [load_validation(label, dumps) for label, (_, dumps) in fixture.items()]
        report = build_report(
            runs,
            validation=validation,
            title="Qwen3-8B-Base DAPO: blockwise FP8 vs per-channel FP8 vs BF16 rollout",
            banner="SYNTHETIC metrics (flashrl_report/synthetic.py): the shapes of the origin "
            "experiment, not a measurement.",
        )
        write_report(report, Path(tmp) / "report")
        seen, result, png = asyncio.run(
            inspect_report((Path(tmp) / "report" / REPORT_FILE).as_uri(), screenshot=True)
        )
    if result.errors():
        print("\n".join(result.errors()), file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png)
    print(f"{out} ({len(seen['figures'])} figures on the page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
