"""What every subcommand shares: reading a job or an experiment's runs, the one-line summary, and
reporting problems.

Bad input of any kind ends with one ``field.path: message`` line per problem on stderr and exit
status 2 (:data:`EXIT_INVALID`); it never shows a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from flashrl_api import FlashRLJob, Problem, SpecError, load_documents, load_job_file, parse_job
from flashrl_api.manifest import MAX_MANIFEST_BYTES, capped, decode_manifest

if TYPE_CHECKING:
    from flashrl_api.experiment import FlashRLExperiment, Variant

#: Exit status for input the user must fix (argparse uses the same for bad arguments).
EXIT_INVALID: Final = 2
STDIN: Final = "-"

#: A subcommand's body: its parsed arguments in, its exit status out.
Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One subcommand: what ``--help`` says of it, its arguments, and its body."""

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Handler


def repeatable(
    parser: argparse._ActionsContainer,
    flag: str,
    *,
    metavar: str,
    help: str,
    type: Callable[[str], object] = str,
) -> None:
    """An option given once per value: its values in order, an empty list when it is not given."""
    parser.add_argument(flag, action="append", type=type, default=[], metavar=metavar, help=help)


def read_job(source: str, stdin: TextIO | None = None) -> FlashRLJob:
    """Load one FlashRLJob from a file, or from standard input when ``source`` is ``-``."""
    if source != STDIN:
        return load_job_file(source)
    stream = stdin if stdin is not None else sys.stdin
    buffer = getattr(stream, "buffer", None)
    try:
        if buffer is not None:
            text = decode_manifest(buffer.read(MAX_MANIFEST_BYTES + 1), "standard input")
        else:
            text = stream.read(MAX_MANIFEST_BYTES + 1)
    except UnicodeDecodeError:
        raise SpecError([Problem("", "standard input is not UTF-8 text")]) from None
    docs = load_documents(text, "standard input")
    if len(docs) != 1:
        raise SpecError(
            [Problem("", f"standard input must hold one FlashRLJob, found {len(docs)} documents")]
        )
    return parse_job(docs[0])


def summary(job: FlashRLJob) -> str:
    """What a valid job will run, in one parenthesised phrase."""
    spec = job.spec
    tis = spec.correction.tis
    correction = "TIS off" if tis.level == "off" else f"{tis.level} TIS C={tis.cap}"
    res = spec.resources
    precision: str = spec.rollout.quantization
    if spec.rollout.kv_cache != "auto":
        precision += f" with {spec.rollout.kv_cache} KV cache"
    parts = [precision, correction, f"{res.nodes}x{res.gpus_per_node} {res.gpu_product}"]
    if spec.correction.guard.action != "Alert":
        parts.append(f"guard {spec.correction.guard.action}")
    pool = spec.rollout.pool
    if spec.training.mode != "sync":
        parts.append(spec.training.mode)
    if pool is not None:
        parts.append(f"rollout pool {pool.nodes}x{pool.gpus_per_node} {pool.gpu_product}")
    if spec.dry_run:
        parts.append("dry run")
    return f"({', '.join(parts)})"


def source_name(source: str) -> str:
    """How messages name a source: its path, or standard input."""
    return "standard input" if source == STDIN else source


def report_problems(problems: Sequence[Problem], err: TextIO) -> int:
    """One line per problem (capped), and the exit status for input the user must fix."""
    for problem in capped(problems):
        print(problem, file=err)
    return EXIT_INVALID


def read_text(source: str) -> str:
    """A manifest's text from a file or standard input, at most :data:`MAX_MANIFEST_BYTES` (one byte
    more is read to tell, never the rest: ``/dev/zero`` is refused, not exhausted); unreadable,
    oversized or non-UTF-8 input is a :class:`SpecError`."""
    if source == STDIN:
        buffer = getattr(sys.stdin, "buffer", None)
        try:
            if buffer is not None:
                return decode_manifest(buffer.read(MAX_MANIFEST_BYTES + 1), "standard input")
            text = sys.stdin.read(MAX_MANIFEST_BYTES + 1)
        except UnicodeDecodeError:
            raise SpecError([Problem("", "standard input is not UTF-8 text")]) from None
        if len(text) > MAX_MANIFEST_BYTES:
            raise SpecError([Problem("", f"standard input is larger than {MAX_MANIFEST_BYTES} bytes")])
        return text
    try:
        with Path(source).open("rb") as stream:
            data = stream.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read {source}: {exc.strerror or exc}")]) from None
    return decode_manifest(data, source)


@dataclass(frozen=True)
class ExperimentRuns:
    """A valid FlashRLExperiment's runs as the operator creates them (each variant's replicas together),
    each with the FlashRLJob it becomes, and where a problem of that job belongs in the manifest."""

    experiment: FlashRLExperiment
    template: Mapping[str, Any]
    runs: tuple[tuple[Variant, FlashRLJob], ...]
    index: Mapping[str, int]
    """Each variant's position in ``spec.variants``."""

    @classmethod
    def read(cls, raw: Mapping[str, Any]) -> ExperimentRuns | list[Problem]:
        """The runs of ``raw``, or its problems as an experiment (each at its field path)."""
        from flashrl_api.experiment import (
            experiment_problems,
            experiment_runs,
            variant_jobs,
            variants_of,
        )

        experiment, problems = experiment_problems(raw)
        if problems or experiment is None:
            return problems
        spec = raw.get("spec")
        template = (spec.get("template") if isinstance(spec, Mapping) else None) or {}
        index = {variant.name: i for i, variant in enumerate(variants_of(experiment.spec))}
        variants = [variant for variant, _ in experiment_runs(experiment.spec)]
        jobs = variant_jobs(experiment, template)
        return cls(experiment, template, tuple(zip(variants, jobs, strict=True)), index)

    @property
    def jobs(self) -> list[FlashRLJob]:
        """The runs' FlashRLJobs, in the order the operator creates them."""
        return [job for _, job in self.runs]

    def field_path(self, variant: Variant, spec_path: str) -> str:
        """Where ``spec_path`` of the variant's merged spec belongs: the variant's field when it set
        it, the template's otherwise."""
        from flashrl_api.experiment import variant_field_path

        return variant_field_path(self.index[variant.name], spec_path, variant.spec, self.template)
