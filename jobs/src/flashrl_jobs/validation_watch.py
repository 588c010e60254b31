"""Summarise each validation verl dumps, problem by problem, for ``status.validationProblems``.

verl writes ``<step>.jsonl`` into ``trainer.validation_data_dir`` (this attempt's
``<checkpoint dir>/validation/attempt-<k>``) during the validation of step ``<step>``, and logs that
step's metrics after it: so once the launcher has seen step ``n`` logged (or verl has exited), every
dump of a step ``<= n`` is complete. The launcher calls :meth:`ValidationWatch.poll` from its step
hook and once more at the end; each new dump is reduced to per-problem counts
(:func:`flashrl_api.validation_summary.summarize_dump`, the report's own rule) and the newest few are
reported, which the operator keeps in the job's ``<job>-metrics`` ConfigMap for ``flashrl report
--experiment``. Nothing here raises: an unreadable dump is logged and tried again at the next step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from flashrl_api.validation_summary import (
    MAX_STATUS_PROBLEMS,
    STATUS_VALIDATIONS,
    status_entry,
    summarize_dump,
)

Log = Callable[[str], None]

#: ``<step>.jsonl`` as verl names its dumps.
STEP_FILE: Final = re.compile(r"^(?P<step>\d+)\.jsonl$")


class ValidationWatch:
    """Finds the dumps of one attempt not summarised yet; not thread-safe (one caller: the step hook)."""

    def __init__(self, directory: Path, attempt: int | None, log: Log) -> None:
        self.directory = directory
        self.attempt = attempt
        self._log = log
        self._done: set[int] = set()
        #: The newest summaries, oldest first: what ``status.validationProblems`` carries.
        self.recent: list[dict[str, Any]] = []

    def _pending(self, upto: int | None) -> list[tuple[int, Path]]:
        try:
            found = [(int(m["step"]), p) for p in self.directory.iterdir() if (m := STEP_FILE.match(p.name))]
        except OSError:
            return []  # not created yet: verl makes it at its first validation
        return sorted((s, p) for s, p in found if s not in self._done and (upto is None or s <= upto))

    def poll(self, upto: int | None) -> list[dict[str, Any]] | None:
        """Summarise the new dumps of steps ``<= upto`` (every one when ``None``: verl has exited);
        the newest summaries when there was a new one, else ``None``."""
        new = False
        for step, path in self._pending(upto):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                self._log(f"Cannot read verl's validation dump {path} ({exc}); will retry")
                continue
            self._done.add(step)
            summary = summarize_dump(text.splitlines())
            if len(summary.problems) > MAX_STATUS_PROBLEMS:
                self._log(
                    f"Validation of step {step} has {len(summary.problems)} problems (more than "
                    f"{MAX_STATUS_PROBLEMS}): not reported for flashrl report; its dump {path} is complete"
                )
                continue
            if not summary.problems:
                self._log(f"verl's validation dump {path} holds no sample with a prompt and a correctness")
                continue
            self.recent = [*self.recent, status_entry(step, self.attempt, summary)][-STATUS_VALIDATIONS:]
            new = True
        return list(self.recent) if new else None


__all__ = ["STEP_FILE", "ValidationWatch"]
