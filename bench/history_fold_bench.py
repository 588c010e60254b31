"""One tenant's hostile status: the cost of folding it into the job's history, and what it does to the
operator on the real API server.

The fold: a history at its bound (64 validation scores per status, each at a step of its own, long
names), then one more such status, folded by ``flashrl_api.history.add_metrics`` as it is and as it was
at :data:`BEFORE` (read from git: the algorithm that tried the strides one doubling at a time and
rendered the whole history at each, once per new step). Steps near 2**62 (what the CRD allowed before)
and near 2**31 (the most it allows now, with a job that asks for that many steps). CPU seconds.

The operator: ``tests/integration/test_apiserver_hostile_status.py`` (needs ``make tools``), whose
figures are printed by the test and copied here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashrl_api import history

REPO = Path(__file__).resolve().parents[1]
#: The revision whose fold is "before" (the last one that rendered per stride).
BEFORE = os.environ.get("BENCH_HISTORY_BEFORE", "0055250")
NAMES = [f"val-core/{'s' * 200}-{i:02d}/acc/mean@1" for i in range(64)]
TEST = "tests/integration/test_apiserver_hostile_status.py"


def _old_history() -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:jobs/src/flashrl_api/history.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("history_before")
    exec(compile(source, "history_before.py", "exec"), module.__dict__)
    return module


def _status(top: int, round_: int, value: float = 0.5) -> list[dict[str, Any]]:
    return [
        {"name": n, "value": value, "step": top - 3 * (round_ * len(NAMES) + i)} for i, n in enumerate(NAMES)
    ]


def _cpu(fold: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    start = time.process_time()
    fold(*args, **kwargs)
    return time.process_time() - start


def _fold_rows() -> list[str]:
    old = _old_history()
    rows = []
    for top, label in ((2**62, "near 2**62"), (history.MAX_STEP, "near 2**31 (totalSteps 2**31-1)")):
        text = ""
        for round_ in range(80):  # grow to the bound with the current fold, without its checks
            records = history.parse_history(text)
            for metric in _status(top, round_):
                records.setdefault(metric["step"], {})[metric["name"]] = metric["value"]
            text = history.render_history(records)
        status = _status(top, 80, 0.25)
        before = _cpu(old.add_metrics, text, status)
        after = _cpu(history.add_metrics, text, status, total_steps=history.MAX_STEP)
        records = history.parse_history(text)
        for metric in status:
            records.setdefault(metric["step"], {})[metric["name"]] = metric["value"]
        render = _cpu(history.render_history, records)
        size = len(text.encode()) // 1024
        rows.append(f"| {label} | {size} KiB | {before:.2f} s | {after:.3f} s | {render:.3f} s |")
    return rows


def _real_server() -> str:
    if os.environ.get("BENCH_SKIP_REAL_SERVER"):
        return "Not measured in this run (BENCH_SKIP_REAL_SERVER)."
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"hostile status figures \(s\): (\{.*\})", proc.stdout)
    if proc.returncode != 0 or found is None:
        return f"Not measured in the last run: the test exited {proc.returncode}."
    figures = {k: float(v) for k, v in re.findall(r"'([^']+)': ([0-9.e-]+)", found.group(1))}
    return "\n".join(
        [
            "| figure | without the attack | under the attack |",
            "|---|---|---|",
            f"| `/healthz`, median of 25 | {figures['healthz median calm']:.4f} s | "
            f"{figures['healthz median attacked']:.4f} s |",
            f"| `/healthz`, slowest of 25 | {figures['healthz max calm']:.4f} s | "
            f"{figures['healthz max attacked']:.4f} s |",
            "| another namespace's new job to its RayJob, median of 3 | "
            f"{figures['to RayJob median calm']:.2f} s | {figures['to RayJob median attacked']:.2f} s |",
        ]
    )


def run() -> str:
    """The section for docs/benchmarks.md."""
    lines = [
        "## One tenant's hostile status vs the operator",
        "",
        "A job's status is written by whoever holds its launcher's token (any `edit` user can mint one). "
        "Folding one status of 64 validation scores, each at a step of its own, into a history at its "
        f"bound, CPU seconds; before is `flashrl_api/history.py` at {BEFORE} (the strides tried one "
        "doubling at a time, the whole history rendered at each, once per new step), after is the fold "
        "now (the status' implausible values dropped first, then every line rendered once and the "
        "stride computed from their sizes). `bench/history_fold_bench.py`.",
        "",
        "| steps | history | before | after (add_metrics) | after, render alone |",
        "|---|---|---|---|---|",
        *_fold_rows(),
        "",
        "Near 2**62 the status is dropped before any work (beyond every job's total, and the CRD now "
        "refuses such a step); the render alone shows what the same history costs to fold.",
        "",
        f"On the real API server (`{TEST}`, the operator as the chart runs it): one job's launcher token "
        "patches such a status every 0.2 s (55 patches to fill the history, then on until the measurements "
        "are done; the job asks for 2**31-1 steps, so every one "
        "is folded and the history is thinned at each), while plain jobs are created in another "
        "namespace; measured side by side in one run (2 cores shared with other work):",
        "",
        _real_server(),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
