"""Every validation sample of a run, read from verl's validation dumps (pure reading, no statistics).

verl 0.9.1 writes one file per validation when ``trainer.validation_data_dir`` is set
(``verl/trainer/ppo/v1/trainer_base.py`` ``_validate`` → ``_dump_generations``): ``<dir>/<step>.jsonl``,
one JSON object per sample with ``input`` (the decoded prompt), ``output``, ``gts``, ``score``, ``step``
and the reward function's extra values (the ``dapo`` reward manager adds ``acc`` and ``pred``). The
launcher points it at ``<checkpoint dir>/validation/attempt-<k>/`` so a retry that repeats a
validation does not overwrite the earlier attempt's file; a directory of ``attempt-<k>`` directories
is read as one run, later attempts winning for the steps they repeat (as :mod:`flashrl_report.data`
does for the metrics).

A problem is its prompt text: rows with identical ``input`` are samples of one problem, whether the
validation file repeats the problem (DAPO's AIME 2024 file holds each of its 30 problems 32 times) or
verl sampled it ``val_kwargs.n`` times; it is named by :func:`flashrl_api.validation_summary.problem_id`.
A sample is correct by :func:`flashrl_api.validation_summary.correctness` (its ``acc`` when the reward
function reports one, as verl's ``val-core/<source>/acc/mean@N`` averages, else ``score > 0``). Each
dump is reduced to per-problem counts (:func:`~flashrl_api.validation_summary.summarize_dump`), the
form the launcher also writes to the job's ``<job>-metrics`` ConfigMap, so ``--validation`` and
``--experiment`` feed the paired comparison the same structure (:func:`add_summary`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from flashrl_api.validation_summary import (
    CORRECTNESS_FIELDS,
    StepSummary,
    parse_summaries,
    summarize_dump,
)
from flashrl_report.data import MetricsInputError, read_lines

#: ``<step>.jsonl`` as verl names its dumps.
STEP_FILE: Final = re.compile(r"^(?P<step>\d+)\.jsonl$")
#: The per-attempt directories the launcher creates under ``<checkpoint dir>/validation``.
ATTEMPT_DIR: Final = re.compile(r"^attempt-(?P<k>\d+)$")
#: problem id (:func:`flashrl_api.validation_summary.problem_id`) -> each sample's correctness (0 or 1).
Problems = dict[str, list[float]]


@dataclass
class ValidationSamples:
    """One run's validation samples, by step and problem."""

    label: str
    sources: list[str] = field(default_factory=list)
    #: step -> problem -> per-sample correctness.
    steps: dict[int, Problems] = field(default_factory=dict)
    #: Which field the correctness came from (``acc`` or ``score``); "" before any sample.
    measure: str = ""
    #: What was skipped or looked wrong while reading, one sentence each.
    notes: list[str] = field(default_factory=list)
    #: Prompt text by problem id, when read from the dumps (the ConfigMap's summaries carry ids only).
    prompts: dict[str, str] = field(default_factory=dict)

    def prompt(self, problem: str) -> str:
        """The problem's prompt text when known, else its id."""
        return self.prompts.get(problem, problem)

    def samples_per_problem(self) -> tuple[int, int, int] | None:
        """``(fewest, median, most)`` samples per problem over every validation (None without samples)."""
        counts = [len(v) for problems in self.steps.values() for v in problems.values()]
        if not counts:
            return None
        return min(counts), int(statistics.median(counts)), max(counts)

    def problem_count(self) -> int:
        """Distinct problems over every validation."""
        return len({p for problems in self.steps.values() for p in problems})

    def describe(self) -> str:
        """``30 problems × 32 samples each (acc), 13 validations (steps 0–60)``."""
        spp = self.samples_per_problem()
        if spp is None:
            return "no validation sample"
        low, mid, high = spp
        each = f"{low} samples each" if low == high else f"{low}–{high} samples each (median {mid})"
        steps = sorted(self.steps)
        return (
            f"{self.problem_count()} problems × {each} ({self.measure}), {len(steps)} validations "
            f"(steps {steps[0]}–{steps[-1]})"
        )

    def pooled(self, steps: Iterable[int]) -> Problems:
        """Each problem's samples over ``steps`` together."""
        out: Problems = {}
        for step in steps:
            for problem, values in self.steps.get(step, {}).items():
                out.setdefault(problem, []).extend(values)
        return out


def expand(samples: int, correct: int) -> list[float]:
    """A problem's per-sample correctness from its counts, correct ones first: the one form both the
    dumps and the ConfigMap's summaries take, so both give the same verdict, bootstrap draws included."""
    return [1.0] * correct + [0.0] * (samples - correct)


def add_summary(samples: ValidationSamples, step: int, summary: StepSummary, source: str) -> None:
    """Add one step's per-problem counts to ``samples`` (replacing what an earlier attempt left)."""
    if summary.skipped:
        samples.notes.append(
            f"{source}: {summary.skipped} line(s) without a prompt (input) and a correctness "
            f"({' or '.join(CORRECTNESS_FIELDS)}), or with another than the first line's, were skipped"
        )
    if not summary.problems:
        return
    if samples.measure and summary.measure and summary.measure != samples.measure:
        samples.notes.append(
            f"{source}: correctness is {summary.measure}, not {samples.measure} as in earlier steps; skipped"
        )
        return
    samples.measure = samples.measure or summary.measure
    samples.prompts.update(summary.prompts)
    samples.steps[step] = {pid: expand(n, c) for pid, (n, c) in summary.problems.items()}


def parse_dump(samples: ValidationSamples, lines: Iterable[str], step: int, source: str) -> None:
    """Add one ``<step>.jsonl`` to ``samples``; the step replaces whatever an earlier attempt left."""
    add_summary(samples, step, summarize_dump(lines), source)


def samples_from_summaries(label: str, text: str, source: str) -> ValidationSamples:
    """One run's validation samples from the per-problem summaries the launcher wrote to its
    ``<job>-metrics`` ConfigMap (:data:`flashrl_api.validation_summary.VALIDATION_KEY`)."""
    samples = ValidationSamples(label=label, sources=[source])
    parsed = parse_summaries(text)
    for step in sorted(parsed.steps):
        add_summary(samples, step, parsed.steps[step][1], f"{source} step {step}")
    if parsed.dropped:
        samples.notes.append(
            f"{source}: the validations of steps {_steps(parsed.dropped, parsed.more)} were dropped to "
            "keep the ConfigMap under its bound (the newest are kept); every dump is on the checkpoint claim "
            "(--validation LABEL=DIR reads them)"
        )
    if parsed.refused:
        samples.notes.append(
            f"{source}: the validations of steps {_steps(parsed.refused, parsed.more)} have too many "
            "problems to fit in a ConfigMap; their dumps are on the checkpoint claim "
            "(--validation LABEL=DIR reads them)"
        )
    return samples


def _steps(steps: Sequence[int], more: bool) -> str:
    return ("earlier ones and " if more else "") + ", ".join(str(s) for s in steps)


def _step_files(directory: Path) -> list[tuple[int, Path]]:
    return sorted(
        (int(m["step"]), p) for p in directory.iterdir() if p.is_file() and (m := STEP_FILE.match(p.name))
    )


def dump_files(directory: Path) -> list[tuple[int, Path]]:
    """``(step, file)`` in reading order: ``attempt-<k>/`` directories by k (later ones win), else the
    directory's own ``<step>.jsonl`` files."""
    attempts = sorted(
        (int(m["k"]), p) for p in directory.iterdir() if p.is_dir() and (m := ATTEMPT_DIR.match(p.name))
    )
    if attempts:
        return [item for _, sub in attempts for item in _step_files(sub)]
    return _step_files(directory)


def load_validation(label: str, path: str | Path) -> ValidationSamples:
    """Read one run's validation dumps from a directory (``<step>.jsonl`` or ``attempt-<k>/<step>.jsonl``)."""
    directory = Path(path)
    if not directory.is_dir():
        raise MetricsInputError(f"--validation {label}={directory}: not a directory")
    files = dump_files(directory)
    if not files:
        raise MetricsInputError(
            f"--validation {label}={directory}: holds no <step>.jsonl (verl's validation dumps) "
            "and no attempt-<k>/ directory of them"
        )
    samples = ValidationSamples(label=label, sources=[str(directory)])
    for step, file in files:
        parse_dump(samples, read_lines(label, file), step, str(file))
    if not samples.steps:
        samples.notes.append(f"{directory}: no validation sample could be read")
    return samples


__all__ = [
    "ATTEMPT_DIR",
    "CORRECTNESS_FIELDS",
    "Problems",
    "ValidationSamples",
    "add_summary",
    "dump_files",
    "expand",
    "load_validation",
    "parse_dump",
    "samples_from_summaries",
]
