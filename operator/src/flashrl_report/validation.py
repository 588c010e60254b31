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

The directory is read as data someone else may have written (a shared volume, a copied run): only
regular files and directories inside it, no symbolic link is followed (a link named ``999.jsonl`` must
not put another file's text into the report), and a dump larger than :data:`MAX_DUMP_BYTES` is skipped
with a note instead of read whole.
"""

from __future__ import annotations

import os
import re
import stat
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
from flashrl_report.data import MetricsInputError

#: ``<step>.jsonl`` as verl names its dumps.
STEP_FILE: Final = re.compile(r"^(?P<step>\d+)\.jsonl$")
#: The per-attempt directories the launcher creates under ``<checkpoint dir>/validation``.
ATTEMPT_DIR: Final = re.compile(r"^attempt-(?P<k>\d+)$")
#: Said of a symbolic link where a dump or an attempt directory would be.
LINK_NOTE: Final = "a symbolic link, not read (only files inside the directory are)"
#: The largest dump read (bytes). verl's dump of a validation set holds every sample's prompt and
#: response: AIME 2024's 30 problems x 32 samples of 8k tokens are about 30 MB, MATH-500 x 16 about 130 MB.
MAX_DUMP_BYTES: Final = 512 * 1024 * 1024
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


def _entries(directory: Path, notes: list[str] | None) -> list[tuple[os.DirEntry[str], str]]:
    """The directory's regular files and directories, with their kind; each symbolic link is skipped,
    and said in ``notes`` when it has a dump's or an attempt directory's name."""
    found: list[tuple[os.DirEntry[str], str]] = []
    with os.scandir(directory) as listing:
        for entry in listing:
            if entry.is_symlink():
                if notes is not None and (STEP_FILE.match(entry.name) or ATTEMPT_DIR.match(entry.name)):
                    notes.append(
                        f"{entry.path}: a symbolic link, not read (only files inside the directory are)"
                    )
            elif entry.is_dir(follow_symlinks=False):
                found.append((entry, "dir"))
            elif entry.is_file(follow_symlinks=False):
                found.append((entry, "file"))
    return found


def _step_files(directory: Path, notes: list[str] | None) -> list[tuple[int, Path]]:
    return sorted(
        (int(m["step"]), Path(e.path))
        for e, kind in _entries(directory, notes)
        if kind == "file" and (m := STEP_FILE.match(e.name))
    )


def dump_files(directory: Path, notes: list[str] | None = None) -> list[tuple[int, Path]]:
    """``(step, file)`` in reading order: ``attempt-<k>/`` directories by k (later ones win), else the
    directory's own ``<step>.jsonl`` files. Regular files and directories only: symbolic links are
    skipped (and said in ``notes``)."""
    attempts = sorted(
        (int(m["k"]), Path(e.path))
        for e, kind in _entries(directory, notes)
        if kind == "dir" and (m := ATTEMPT_DIR.match(e.name))
    )
    if attempts:
        return [item for _, sub in attempts for item in _step_files(sub, notes)]
    return _step_files(directory, notes)


def read_dump(label: str, file: Path, notes: list[str], limit: int = MAX_DUMP_BYTES) -> list[str] | None:
    """A dump's lines, opened without following a link (a file swapped for one since it was listed is
    not read either); ``None`` with a note when it is not a regular file or is larger than ``limit``."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(file, flags)
    except OSError as exc:
        if not file.is_symlink():
            raise MetricsInputError(f"{label}={file}: cannot read: {exc.strerror or exc}") from None
        notes.append(f"{file}: {LINK_NOTE}")
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            notes.append(f"{file}: not a regular file, not read")
            return None
        if info.st_size > limit:
            notes.append(f"{file}: {info.st_size} bytes, more than the {limit} a dump may hold; skipped")
            return None
        data = handle.read(limit + 1)
    if len(data) > limit:
        notes.append(f"{file}: more than the {limit} bytes a dump may hold; skipped")
        return None
    return data.decode("utf-8", errors="replace").splitlines()


def load_validation(label: str, path: str | Path) -> ValidationSamples:
    """Read one run's validation dumps from a directory (``<step>.jsonl`` or ``attempt-<k>/<step>.jsonl``)."""
    directory = Path(path)
    if not directory.is_dir():
        raise MetricsInputError(f"--validation {label}={directory}: not a directory")
    notes: list[str] = []
    files = dump_files(directory, notes)
    if not files:
        raise MetricsInputError(
            f"--validation {label}={directory}: holds no <step>.jsonl (verl's validation dumps) "
            "and no attempt-<k>/ directory of them" + "".join(f"; {note}" for note in notes)
        )
    samples = ValidationSamples(label=label, sources=[str(directory)], notes=notes)
    for step, file in files:
        lines = read_dump(label, file, samples.notes)
        if lines is not None:
            parse_dump(samples, lines, step, str(file))
    if not samples.steps:
        samples.notes.append(f"{directory}: no validation sample could be read")
    return samples


__all__ = [
    "ATTEMPT_DIR",
    "CORRECTNESS_FIELDS",
    "MAX_DUMP_BYTES",
    "Problems",
    "ValidationSamples",
    "add_summary",
    "dump_files",
    "expand",
    "load_validation",
    "parse_dump",
    "read_dump",
    "samples_from_summaries",
]
