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
verl sampled it ``val_kwargs.n`` times. A sample's correctness is its ``acc`` (what verl's
``val-core/<source>/acc/mean@N`` averages) when the reward function reports one, else its ``score``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from flashrl_report.data import MetricsInputError

#: ``<step>.jsonl`` as verl names its dumps.
STEP_FILE: Final = re.compile(r"^(?P<step>\d+)\.jsonl$")
#: The per-attempt directories the launcher creates under ``<checkpoint dir>/validation``.
ATTEMPT_DIR: Final = re.compile(r"^attempt-(?P<k>\d+)$")
#: The fields a sample's correctness is read from, in order of preference.
CORRECTNESS_FIELDS: Final = ("acc", "score")

#: problem (prompt text) -> the correctness of each of its samples.
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


def _correctness(row: Mapping[str, object]) -> tuple[str, float] | None:
    for name in CORRECTNESS_FIELDS:
        value = row.get(name)
        if isinstance(value, bool):
            return name, float(value)
        if isinstance(value, int | float) and math.isfinite(value):
            return name, float(value)
    return None


def parse_dump(samples: ValidationSamples, lines: Iterable[str], step: int, source: str) -> None:
    """Add one ``<step>.jsonl`` to ``samples``; the step replaces whatever an earlier attempt left."""
    problems: Problems = {}
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(row, Mapping) or not isinstance(row.get("input"), str):
            skipped += 1
            continue
        found = _correctness(row)
        if found is None:
            skipped += 1
            continue
        name, value = found
        if samples.measure and name != samples.measure:
            skipped += 1
            continue
        samples.measure = samples.measure or name
        problems.setdefault(str(row["input"]), []).append(value)
    if skipped:
        samples.notes.append(
            f"{source}: {skipped} line(s) without a prompt (input) and a correctness "
            f"({' or '.join(CORRECTNESS_FIELDS)}) were skipped"
        )
    if problems:
        samples.steps[step] = problems


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
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise MetricsInputError(f"{label}={file}: cannot read: {exc.strerror or exc}") from None
        parse_dump(samples, text.splitlines(), step, str(file))
    if not samples.steps:
        samples.notes.append(f"{directory}: no validation sample could be read")
    return samples


def parse_validation_argument(value: str) -> tuple[str, str]:
    """``LABEL=DIR`` as given to ``--validation``."""
    label, sep, path = value.partition("=")
    if not sep or not label.strip() or not path.strip():
        raise MetricsInputError(f"--validation {value!r}: expected LABEL=DIR, e.g. bf16=runs/bf16/validation")
    return label.strip(), path.strip()


__all__ = [
    "ATTEMPT_DIR",
    "CORRECTNESS_FIELDS",
    "Problems",
    "ValidationSamples",
    "dump_files",
    "load_validation",
    "parse_dump",
    "parse_validation_argument",
]
