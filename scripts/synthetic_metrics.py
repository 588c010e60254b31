#!/usr/bin/env python3
"""Write SYNTHETIC verl metrics files (JSONL) for the comparison report: tests, demo, docs screenshot.

    .venv/bin/python scripts/synthetic_metrics.py OUT_DIR [--steps 150] [--seed 0]
        [--precisions blockwise-fp8,channel-fp8,bf16] [--no-mismatch bf16] [--stop-at channel-fp8=60]
        [--truncate channel-fp8]

writes OUT_DIR/<precision>.jsonl, one per precision, in verl 0.9.1's file-logger format. None of the
numbers was measured: see flashrl_report/synthetic.py for the shapes they imitate. Then:

    .venv/bin/flashrl report --metrics bf16=OUT_DIR/bf16.jsonl --metrics fp8=OUT_DIR/blockwise-fp8.jsonl \
        --banner "Synthetic metrics (scripts/synthetic_metrics.py): shapes only, nothing was measured." \
        --output OUT_DIR/report

(--banner keeps a report of these numbers from being read as a measurement.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashrl_report.synthetic import PROFILES, jsonl


def main(argv: list[str] | None = None) -> int:
    """Write the files; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="directory to write <precision>.jsonl files into")
    parser.add_argument("--steps", type=int, default=150, help="training steps per run (default: 150)")
    parser.add_argument("--seed", type=int, default=0, help="seed shared by the runs (default: 0)")
    parser.add_argument("--precisions", default=",".join(PROFILES), help="comma-separated precisions")
    parser.add_argument(
        "--no-mismatch",
        action="append",
        default=[],
        metavar="PRECISION",
        help="leave out the rollout_corr/* and probs-diff metrics of this run",
    )
    parser.add_argument(
        "--stop-at",
        action="append",
        default=[],
        metavar="PRECISION=STEP",
        help="end this run after STEP (a run that failed halfway)",
    )
    parser.add_argument(
        "--truncate",
        action="append",
        default=[],
        metavar="PRECISION",
        help="cut this run's last line in half (killed while writing)",
    )
    args = parser.parse_args(argv)
    stops = {p: int(s) for p, _, s in (item.partition("=") for item in args.stop_at)}
    args.out.mkdir(parents=True, exist_ok=True)
    for precision in args.precisions.split(","):
        if precision not in PROFILES:
            parser.error(f"unknown precision {precision!r} (one of {', '.join(PROFILES)})")
        text = jsonl(
            precision,
            args.steps,
            seed=args.seed,
            mismatch=precision not in args.no_mismatch,
            stop_at=stops.get(precision),
            truncate=precision in args.truncate,
        )
        path = args.out / f"{precision}.jsonl"
        path.write_text(text, encoding="utf-8")
        print(f"{path} (synthetic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
