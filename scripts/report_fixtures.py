#!/usr/bin/env python3
"""Write fixture runs for the comparison report: verl metrics and validation dumps with KNOWN effects.

    .venv/bin/python scripts/report_fixtures.py OUT_DIR [--steps 40] [--seed 0] [--replicas 1]
        [--effect 0.9]

writes, for three runs (SYNTHETIC, nothing was measured; flashrl_report/synthetic.py ``write_fixture``):

    OUT_DIR/metrics/<label>.jsonl          verl 0.9.1 file-logger lines
    OUT_DIR/validation/<label>/<step>.jsonl  verl 0.9.1 validation dumps (input, output, gts, score, step,
                                            acc, pred): 30 problems, each 32 times, one sample per row

- bf16: the baseline;
- fp8-effect: every problem's log-odds of a correct answer raised by --effect from step 1 on (a known
  effect the report must call "higher than bf16");
- fp8-null: the same accuracies as bf16, other sampling noise (a known null: "no clear difference").

With --replicas R each label gets R replicas, ``<label>#<k>``: replica k of every run shares seed
seed + k (its metrics), as an experiment's replicas do, and every replica answers the same validation
problems with its own sampling noise. Then:

    .venv/bin/flashrl report --output OUT_DIR/report --banner "Fixture runs (scripts/report_fixtures.py)" \\
        --metrics bf16=OUT_DIR/metrics/bf16.jsonl --validation bf16=OUT_DIR/validation/bf16 \\
        --metrics fp8-effect=OUT_DIR/metrics/fp8-effect.jsonl \\
        --validation fp8-effect=OUT_DIR/validation/fp8-effect \\
        --metrics fp8-null=OUT_DIR/metrics/fp8-null.jsonl --validation fp8-null=OUT_DIR/validation/fp8-null
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from flashrl_report.synthetic import FIXTURE_RUNS, write_fixture


def main(argv: list[str] | None = None) -> int:
    """Write the files and print the report command's arguments; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="directory to write metrics/ and validation/ into")
    parser.add_argument("--steps", type=int, default=40, help="training steps per run (default: 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of replica 0 (default: 0)")
    parser.add_argument("--replicas", type=int, default=1, help="replicas per run (default: 1)")
    parser.add_argument(
        "--effect", type=float, default=0.9, help="fp8-effect's log-odds shift (default: 0.9)"
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.replicas < 1:
        parser.error("--steps and --replicas must be at least 1")
    runs = tuple(replace(r, shift=args.effect) if r.shift else r for r in FIXTURE_RUNS)
    written = write_fixture(args.out, steps=args.steps, seed=args.seed, replicas=args.replicas, runs=runs)
    for label, (metrics, dumps) in written.items():
        print(f"--metrics '{label}={metrics}' --validation '{label}={dumps}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
