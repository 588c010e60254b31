"""Run every benchmark and write the figures to docs/benchmarks.md (``make bench``).

Each benchmark module has ``run() -> str`` returning one markdown section; this file puts the
sections under a common header that records the exact command.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import sys
from pathlib import Path

from bench import apiserver_bench, chaos_bench, fair_bench, history_fold_bench, override_bench, resume_bench

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"

HEADER = """# Benchmarks

Measured figures, not targets; tests never assert timings. Regenerate with:

```sh
make bench          # or: .venv/bin/python -m bench
BENCH_BASELINE=<git revision> make bench   # the real-server section measures that revision too, side by side
```

Last run: {date}. Each section below is written by one module in `bench/`.

"""


def main() -> int:
    sections = []
    status = 0
    print("operator benchmark on the real API server (needs `make tools`) ...", file=sys.stderr)
    sections.append(apiserver_bench.run())
    if importlib.util.find_spec("bench.gate_bench") is not None:
        print("Ray gate benchmark ...", file=sys.stderr)
        try:
            gate_bench = importlib.import_module("bench.gate_bench")
            sections.append(gate_bench.run())
        except Exception as exc:  # Keep the figures already measured; say what failed.
            print(f"the Ray gate benchmark failed: {exc!r}", file=sys.stderr)
            sections.append(f"## Ray GPU gate vs fixed sleep\n\nNot measured in the last run: {exc!r}\n")
            status = 1
    print("chaos scenario on the real API server (needs `make tools`) ...", file=sys.stderr)
    sections.append(chaos_bench.run())
    print("retry benchmark: simulated 100-step runs with failures ...", file=sys.stderr)
    sections.append(resume_bench.run())
    print("override benchmark: verl overrides at the CRD's maximum ...", file=sys.stderr)
    sections.append(override_bench.run())
    print("fairness benchmark: one tenant's slow verl checks vs another's plain job ...", file=sys.stderr)
    sections.append(fair_bench.run())
    print("hostile status: the history fold, and the operator on the real API server ...", file=sys.stderr)
    sections.append(history_fold_bench.run())
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    text = HEADER.format(date=date) + "\n".join(sections)
    DOC.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {DOC}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
