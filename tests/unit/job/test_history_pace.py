"""The history fold's pace: at most once per job per interval, however often the status changes, in a
worker thread, and not again for a report already folded."""

from __future__ import annotations

import threading
from typing import Any

from flashrl_operator.job.history import History

KEY = ("rl", "qwen")


def status(step: int) -> dict[str, Any]:
    return {"metrics": [{"step": step, "name": "critic/score/mean", "value": 0.5}]}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_status_patched_every_fifth_of_a_second_is_folded_once_per_interval() -> None:
    clock = Clock()
    history = History(interval=5.0, clock=clock)
    folds = 0
    for patch in range(25):  # five seconds of patches, 0.2 s apart
        report = status(patch + 1)
        assert history.wants(KEY, report)
        if history.due_in(KEY) == 0:
            await history.fold(KEY, {}, report)
            history.done(KEY, report)
            folds += 1
        clock.now += 0.2
    assert folds == 1
    assert history.due_in(KEY) == 0  # five seconds later: the newest report is folded next


async def test_a_folded_report_is_not_folded_again_and_nothing_reported_is_nothing_to_fold() -> None:
    history = History(interval=5.0, clock=Clock())
    assert not history.wants(KEY, {})
    assert not history.wants(KEY, {"metrics": "not a list"})
    report = status(3)
    data = await history.fold(KEY, {}, report)
    assert '"step":3' in data["history.jsonl"].replace(" ", "")
    history.done(KEY, report)
    assert not history.wants(KEY, report)
    assert history.wants(KEY, status(4))
    history.forget(KEY)
    assert history.wants(KEY, report) and history.due_in(KEY) == 0


async def test_the_fold_runs_off_the_event_loop(monkeypatch: Any) -> None:
    import flashrl_operator.job.history as module

    threads: list[int] = []
    real = module.fold

    def fold(known: Any, report: Any, total: int | None = None) -> dict[str, str]:
        threads.append(threading.get_ident())
        return real(known, report, total)

    monkeypatch.setattr(module, "fold", fold)
    await History().fold(KEY, {}, status(1))
    assert threads and threads[0] != threading.get_ident()
