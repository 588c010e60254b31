"""Reading FlashRLJob manifests, with every problem reported as ``field.path: message``.

This is the one entry point for untrusted input (files, API objects, mounted specs): it never lets
a traceback reach the user, and it reports all problems at once rather than the first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flashrl_api.rules import violations
from flashrl_api.spec import (
    DNS_LABEL_PATTERN,
    ENV_NAME_PATTERN,
    OVERRIDE_PATTERN,
    QUANTITY_PATTERN,
    FlashRLJobSpec,
)
from flashrl_api.status import FlashRLJobStatus

GROUP = "flashrl.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "FlashRLJob"
PLURAL = "flashrljobs"
SINGULAR = "flashrljob"
SHORT_NAMES = ("frj",)

NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_NAME_RE = re.compile(NAME_PATTERN)
#: FlashRLJob names are DNS-1035 labels: they become RayJob, Service and pod names, and label values
#: (at most 63 characters). The RayJob itself is shortened with a hash to KubeRay's 47.
MAX_NAME_LENGTH = 63
NAME_MESSAGE = (
    "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, at most "
    f"{MAX_NAME_LENGTH} characters (it names the RayJob, its pods and their labels)"
)
#: The same check as CEL on the whole object, so the API server refuses such a name at admission
#: (Kubernetes itself allows custom-resource names of up to 253 characters).
NAME_CEL = f"self.metadata.name.size() <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{NAME_PATTERN}')"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located by its field path."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """The input is not a valid FlashRLJob; ``problems`` says where and why."""

    def __init__(self, problems: Iterable[Problem], job: FlashRLJob | None = None) -> None:
        self.problems = tuple(problems)
        #: The job as parsed when every field was well-formed and only cross-field rules failed, so
        #: callers can go on to report further problems (e.g. verl overrides) in the same run.
        self.job = job
        super().__init__("\n".join(str(p) for p in self.problems))


class FlashRLJob(BaseModel):
    """A whole FlashRLJob object as stored by Kubernetes."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: dict[str, Any]
    spec: FlashRLJobSpec
    status: FlashRLJobStatus | None = None

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        """``metadata.namespace`` (``default`` when absent, as kubectl would apply it)."""
        return str(self.metadata.get("namespace") or "default")

    @property
    def uid(self) -> str | None:
        """``metadata.uid`` when the object came from the API server."""
        uid = self.metadata.get("uid")
        return str(uid) if uid else None


def _loc_to_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            if parts:
                parts[-1] += f"[{item}]"
            else:
                parts.append(f"[{item}]")
        else:
            parts.append(item)
    return ".".join(parts)


#: What each shared pattern means, so a mismatch reads as advice rather than a regular expression.
_PATTERN_NAMES = {
    OVERRIDE_PATTERN: "a Hydra override: key=value, +key=value (add), ++key=value (force) or ~key (delete)",
    DNS_LABEL_PATTERN: "a DNS-1123 label (lower-case letters, digits and '-', starting and ending "
    "with a letter or digit)",
    QUANTITY_PATTERN: "a Kubernetes quantity such as 64, 500m or 512Gi",
    ENV_NAME_PATTERN: "an environment variable name (letters, digits and '_', not starting with a digit)",
}


def _humanize(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; see `kubectl explain flashrljob.spec`)"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"must be one of {expected}, got {error.get('input')!r}"
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        what = _PATTERN_NAMES.get(pattern, f"a string matching {pattern}")
        return f"must be {what}, got {error.get('input')!r}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping, got {type(error.get('input')).__name__}"
    msg = str(error.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind.endswith(("_type", "_parsing")) and not isinstance(error.get("input"), Mapping | list):
        # Say what was given: `nodes: "2"` (a string) is refused like the API server refuses it.
        msg += f", got {error.get('input')!r}"
    return msg


def spec_problems(raw_spec: Any, prefix: str = "spec") -> tuple[FlashRLJobSpec | None, list[Problem]]:
    """Validate a raw spec mapping: field types, ranges, then cross-field rules."""
    if not isinstance(raw_spec, Mapping):
        return None, [Problem(prefix, f"must be a mapping, got {type(raw_spec).__name__}")]
    try:
        spec = FlashRLJobSpec.model_validate(dict(raw_spec), strict=True)
    except ValidationError as exc:
        problems = [
            Problem(_loc_to_path(prefix, tuple(e["loc"])), _humanize(e))
            for e in exc.errors(include_url=False)
        ]
        return None, problems
    return spec, [Problem(f"{prefix}.{path}", message) for path, message in violations(spec)]


def parse_spec(raw_spec: Any, prefix: str = "spec") -> FlashRLJobSpec:
    """Validate a raw spec mapping, raising :class:`SpecError` with every problem."""
    spec, problems = spec_problems(raw_spec, prefix)
    if problems or spec is None:
        raise SpecError(problems)
    return spec


def parse_job(raw: Any) -> FlashRLJob:
    """Validate a whole FlashRLJob object (apiVersion, kind, metadata.name, spec)."""
    if not isinstance(raw, Mapping):
        raise SpecError([Problem("", f"a FlashRLJob must be a YAML mapping, got {type(raw).__name__}")])
    problems: list[Problem] = []
    if raw.get("apiVersion") != API_VERSION:
        problems.append(Problem("apiVersion", f"must be {API_VERSION!r}, got {raw.get('apiVersion')!r}"))
    if raw.get("kind") != KIND:
        problems.append(Problem("kind", f"must be {KIND!r}, got {raw.get('kind')!r}"))
    metadata = raw.get("metadata")
    if not isinstance(metadata, Mapping):
        problems.append(Problem("metadata", "must be a mapping with a name"))
        metadata = {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        problems.append(Problem("metadata.name", "is required"))
    elif len(name) > MAX_NAME_LENGTH or not _NAME_RE.match(name):
        problems.append(
            Problem(
                "metadata.name",
                f"{name!r} {NAME_MESSAGE}",
            )
        )
    extra = sorted(set(raw) - {"apiVersion", "kind", "metadata", "spec", "status"})
    problems.extend(Problem(key, "unknown field") for key in extra)
    spec, spec_errors = spec_problems(raw.get("spec", {}) if raw.get("spec") is not None else {})
    if spec is None or problems:
        raise SpecError([*problems, *spec_errors])
    status = raw.get("status")
    parsed_status: FlashRLJobStatus | None = None
    if isinstance(status, Mapping):
        try:
            known = {k: v for k, v in status.items() if k in _STATUS_ALIASES}
            parsed_status = FlashRLJobStatus.model_validate(known)
        except ValidationError:
            parsed_status = None  # Status is ours to rewrite; a damaged one is not the user's error.
    job = FlashRLJob(
        api_version=API_VERSION, kind=KIND, metadata=dict(metadata), spec=spec, status=parsed_status
    )
    if spec_errors:  # Only cross-field rules failed: the fields themselves are well-formed.
        raise SpecError(spec_errors, job)
    return job


_STATUS_ALIASES = frozenset(f.alias for f in FlashRLJobStatus.model_fields.values() if f.alias is not None)


def load_documents(text: str, source: str = "<input>") -> list[Any]:
    """Parse a YAML stream, turning syntax errors into a :class:`SpecError`."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([Problem("", f"{source} is not valid YAML{where}: {problem}")]) from None
    if not docs:
        raise SpecError([Problem("", f"{source} contains no YAML document")])
    return docs


def load_job_file(path: str | Path) -> FlashRLJob:
    """Read a file holding exactly one FlashRLJob and validate it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read {path}: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise SpecError([Problem("", f"{path} is not UTF-8 text")]) from None
    docs = load_documents(text, str(path))
    if len(docs) != 1:
        raise SpecError([Problem("", f"{path} must hold one FlashRLJob, found {len(docs)} documents")])
    return parse_job(docs[0])
