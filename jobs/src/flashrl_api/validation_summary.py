"""Every validation step, problem by problem, small enough for the job's ``<job>-metrics`` ConfigMap (pure).

verl writes each validation's samples to ``<checkpoint dir>/validation/attempt-<k>/<step>.jsonl``
(one JSON object per sample: ``input``, ``gts``, ``score``, ``step`` and the reward's extras). The
paired per-problem verdict of ``flashrl report`` needs, per step and problem, only how many samples
there were and how many were correct; that is what this module keeps, so the report can read it with
``--experiment`` from the cluster (:mod:`flashrl_api.history` says why a ConfigMap) instead of copying
the dumps off the checkpoint claim.

One definition of a problem and of a correct sample serves both routes (the report's file reader
:mod:`flashrl_report.validation` and the launcher's summariser use :func:`problem_id` and
:func:`correctness`): rows with identical ``input`` are samples of one problem, named by the first 12
hex digits of the SHA-256 of the prompt text; a sample is correct when its ``acc`` is true (what
verl's ``val-core/<source>/acc/mean@N`` averages) or, when the reward reports no ``acc``, when its
``score`` is above 0 (DAPO scores ±1).

The ConfigMap value (key :data:`VALIDATION_KEY`) holds one line per step,
``{"step": n, "attempt": k, "measure": "acc", "problems": {"<id>": [samples, correct], ...}}``; a step
summarised again by a later attempt replaces the earlier one (as the file reader does). It is bounded by
:data:`MAX_VALIDATION_BYTES` (with the history's bound, the ConfigMap's data stays under its 1 MiB):
AIME 2024's 30 problems take about 0.8 KB per step, 300 problems about 7 KB, so 30 validations of a
few hundred problems fit. Beyond that the oldest steps are dropped (the verdict is read from the late
stretch), and a single step too large on its own is refused; both are listed on a first line
``{"dropped": [...], "refused": [...]}`` so the report can say so. The dumps on the claim stay complete.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: The ConfigMap key holding the summaries (beside :data:`flashrl_api.history.HISTORY_KEY`).
VALIDATION_KEY: Final = "validation.jsonl"
#: Its bound: with the history's 768 KiB, 960 KiB of the 1 MiB a ConfigMap's data may hold.
MAX_VALIDATION_BYTES: Final = 192 * 1024
#: The note line names at most this many dropped (and refused) steps, the newest; it keeps this room.
NOTE_STEPS: Final = 100
NOTE_BYTES: Final = 2048
#: Hex digits of the prompt's SHA-256 naming a problem (48 bits: no collision among thousands).
PROBLEM_ID_HEX: Final = 12
#: The launcher reports the newest validations in ``status.validationProblems`` (several, so the operator
#: misses none when two come close together; it keeps every one in the ConfigMap).
STATUS_VALIDATIONS: Final = 3
#: A validation of more problems than this is not reported in the status (it would bloat the object;
#: about 50 KB at this bound); the launcher logs it and its dump stays on the claim.
MAX_STATUS_PROBLEMS: Final = 2048
#: The fields a sample's correctness is read from, in order of preference.
CORRECTNESS_FIELDS: Final = ("acc", "score")


def problem_id(prompt: str) -> str:
    """A short stable name of a problem: the first 12 hex digits of the SHA-256 of its prompt text."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:PROBLEM_ID_HEX]


def correctness(row: Mapping[str, object]) -> tuple[str, bool] | None:
    """``(field, correct)``: ``acc`` when the reward reports it, else ``score > 0``; None without either."""
    for name in CORRECTNESS_FIELDS:
        value = row.get(name)
        if isinstance(value, bool):
            return name, value
        if isinstance(value, int | float) and math.isfinite(value):
            return name, value > 0 if name == "score" else value > 0.5
    return None


@dataclass
class StepSummary:
    """One validation: per problem id, ``(samples, correct)``."""

    problems: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Which field the correctness came from (``acc`` or ``score``); "" before any sample.
    measure: str = ""
    #: Lines skipped: not JSON, no prompt, no correctness, or another measure than the first line's.
    skipped: int = 0
    #: Prompt text by problem id (for the report's table; not written to the ConfigMap).
    prompts: dict[str, str] = field(default_factory=dict)


def summarize_dump(lines: Iterable[str | bytes]) -> StepSummary:
    """Count each problem's samples and correct samples in one ``<step>.jsonl``."""
    out = StepSummary()
    counts: dict[str, list[int]] = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            out.skipped += 1
            continue
        found = correctness(row) if isinstance(row, Mapping) else None
        if (
            found is None
            or not isinstance(row.get("input"), str)
            or (out.measure and found[0] != out.measure)
        ):
            out.skipped += 1
            continue
        out.measure = out.measure or found[0]
        pid = problem_id(row["input"])
        out.prompts.setdefault(pid, row["input"])
        tally = counts.setdefault(pid, [0, 0])
        tally[0] += 1
        tally[1] += found[1]
    out.problems = {pid: (n, c) for pid, (n, c) in counts.items()}
    return out


@dataclass
class Summaries:
    """The ConfigMap value, parsed: per step, its summary and the attempt that wrote it."""

    steps: dict[int, tuple[int, StepSummary]] = field(default_factory=dict)
    #: Steps dropped to stay within the bound (oldest first), and steps too large to keep at all.
    dropped: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    #: More steps were dropped or refused than the note names (it names the newest :data:`NOTE_STEPS`).
    more: bool = False


def _problems(raw: object) -> dict[str, tuple[int, int]] | None:
    if not isinstance(raw, Mapping):
        return None
    out: dict[str, tuple[int, int]] = {}
    for pid, pair in raw.items():
        if (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
            and 0 <= pair[1] <= pair[0]
        ):
            out[str(pid)] = (pair[0], pair[1])
    return out


def parse_summaries(text: str) -> Summaries:
    """The summaries by step (lines that are not summaries are skipped)."""
    out = Summaries()
    for line in text.splitlines():
        try:
            record: Any = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        if "dropped" in record or "refused" in record:
            out.dropped = [s for s in record.get("dropped") or [] if isinstance(s, int)]
            out.refused = [s for s in record.get("refused") or [] if isinstance(s, int)]
            out.more = record.get("more") is True
            continue
        step, attempt = record.get("step"), record.get("attempt", 0)
        problems = _problems(record.get("problems"))
        if isinstance(step, int) and isinstance(attempt, int) and problems is not None:
            out.steps[step] = (attempt, StepSummary(problems, str(record.get("measure") or "")))
    return out


def _line(step: int, attempt: int, summary: StepSummary) -> str:
    body = {
        "step": step,
        "attempt": attempt,
        "measure": summary.measure,
        "problems": {pid: list(summary.problems[pid]) for pid in sorted(summary.problems)},
    }
    return json.dumps(body, separators=(",", ":")) + "\n"


def render_summaries(summaries: Summaries, max_bytes: int = MAX_VALIDATION_BYTES) -> str:
    """The ConfigMap value within ``max_bytes``: the newest steps that fit, a note line of the rest."""
    lines = {s: _line(s, a, summary) for s, (a, summary) in summaries.steps.items()}
    dropped, refused = set(summaries.dropped), set(summaries.refused)
    kept: list[int] = []
    budget = max_bytes - NOTE_BYTES  # room for the note line
    full = False
    for step in sorted(lines, reverse=True):
        size = len(lines[step].encode("utf-8"))
        if size > max_bytes - NOTE_BYTES:
            refused.add(step)  # too large on its own: never kept, older steps still may be
        elif full or size > budget:
            full = True  # the kept steps are the newest ones in a row
            dropped.add(step)
        else:
            kept.append(step)
            budget -= size
    more = summaries.more or len(dropped) > NOTE_STEPS or len(refused) > NOTE_STEPS
    while True:
        head = ""
        if dropped or refused:
            note: dict[str, Any] = {
                "dropped": sorted(dropped)[-NOTE_STEPS:],
                "refused": sorted(refused)[-NOTE_STEPS:],
            }
            if more:
                note["more"] = True  # earlier steps were dropped or refused too
            head = json.dumps(note, separators=(",", ":")) + "\n"
        text = head + "".join(lines[s] for s in sorted(kept))
        if len(text.encode("utf-8")) <= max_bytes or not kept:
            return text
        dropped.add(kept.pop())  # a long note line: give it the oldest kept step's room


def add_summary(
    text: str, step: int, attempt: int, summary: StepSummary, max_bytes: int = MAX_VALIDATION_BYTES
) -> str:
    """The ConfigMap value with one step's summary merged in; an earlier attempt's summary of the same
    step is replaced, a later attempt's is kept (whichever order they arrive in)."""
    current = parse_summaries(text)
    known = current.steps.get(step)
    if known is not None and known[0] > attempt:
        return text
    current.steps[step] = (attempt, summary)
    current.dropped = [s for s in current.dropped if s != step]
    current.refused = [s for s in current.refused if s != step]
    return render_summaries(current, max_bytes)


def status_entry(step: int, attempt: int | None, summary: StepSummary) -> dict[str, Any]:
    """One ``status.validationProblems`` entry (:class:`flashrl_api.status.ValidationProblems`)."""
    entry: dict[str, Any] = {
        "step": step,
        "measure": summary.measure,
        "problems": {pid: list(summary.problems[pid]) for pid in sorted(summary.problems)},
    }
    if attempt is not None:
        entry["attempt"] = attempt
    return entry


def add_status(text: str, entries: Iterable[object], max_bytes: int = MAX_VALIDATION_BYTES) -> str:
    """The ConfigMap value with the status' ``validationProblems`` merged in (malformed entries skipped;
    merging the same entries again changes nothing)."""
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        step, attempt = entry.get("step"), entry.get("attempt") or 0
        problems = _problems(entry.get("problems"))
        if isinstance(step, int) and isinstance(attempt, int) and problems:
            summary = StepSummary(problems, str(entry.get("measure") or ""))
            text = add_summary(text, step, attempt, summary, max_bytes)
    return text


__all__ = [
    "CORRECTNESS_FIELDS",
    "MAX_STATUS_PROBLEMS",
    "MAX_VALIDATION_BYTES",
    "PROBLEM_ID_HEX",
    "STATUS_VALIDATIONS",
    "VALIDATION_KEY",
    "StepSummary",
    "Summaries",
    "add_status",
    "add_summary",
    "correctness",
    "parse_summaries",
    "problem_id",
    "render_summaries",
    "status_entry",
    "summarize_dump",
]
