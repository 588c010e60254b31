"""Reading FlashRLJob manifests, with every problem reported as ``field.path: message``.

This is the one entry point for untrusted input (files, API objects, mounted specs): it never lets
a traceback reach the user, and it reports all problems at once rather than the first. Hostile input
is bounded before anything walks it: at most :data:`MAX_MANIFEST_BYTES` are read, documents nested
deeper than :data:`MAX_DEPTH`, holding more than :data:`MAX_NODES` values once YAML aliases are
expanded (a "billion laughs" bomb) or referring to themselves are refused, values are quoted back
only up to a short length, and at most :data:`MAX_PROBLEMS` problems are listed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flashrl_api._base import quote
from flashrl_api.cel import cel_string
from flashrl_api.k8s_names import (
    DNS_1035_LABEL_PATTERN,
    DNS_1035_LABEL_RE,
    DNS_LABEL_PATTERN,
    DNS_LABEL_RE,
    DNS_SUBDOMAIN_PATTERN,
    EXTENDED_RESOURCE_PATTERN,
    LABEL_KEY_RE,
    LABEL_VALUE_RE,
)
from flashrl_api.kubectl_yaml import BOOLEAN_KEY_HINT, load_all
from flashrl_api.renamed import renamed_hint
from flashrl_api.rules import violations
from flashrl_api.spec import (
    ENV_NAME_PATTERN,
    MOUNT_PATH_PATTERN,
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

NAME_PATTERN = DNS_1035_LABEL_PATTERN
_NAME_RE = DNS_1035_LABEL_RE
#: FlashRLJob names are DNS-1035 labels: they become RayJob, Service and pod names, and label values
#: (at most 63 characters). The RayJob itself is shortened with a hash to KubeRay's 47.
MAX_NAME_LENGTH = 63

#: The API server refuses request bodies above 3 MiB; a manifest larger than that cannot be applied.
MAX_MANIFEST_BYTES = 3 * 1024 * 1024
#: A FlashRLJob is 5 levels deep; 32 leaves room for metadata and still stops recursion bombs.
MAX_DEPTH = 32
#: Values in one document after YAML aliases are expanded (a full spec has a few hundred).
MAX_NODES = 100_000
#: Problems listed for one input; the rest are counted.
MAX_PROBLEMS = 50
#: Longest path segment (a map key) quoted in a field path.
MAX_KEY_IN_PATH = 64
NAME_MESSAGE = (
    "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, at most "
    f"{MAX_NAME_LENGTH} characters (it names the RayJob, its pods and their labels)"
)
#: The same check as CEL on the whole object, so the API server refuses such a name at admission
#: (Kubernetes itself allows custom-resource names of up to 253 characters).
NAME_CEL = (
    f"self.metadata.name.size() <= {MAX_NAME_LENGTH} && "
    f"self.metadata.name.matches({cel_string(NAME_PATTERN)})"
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located by its field path."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


_MORE = re.compile(r"^\.\.\. and ([0-9]+) more problems?$")


def capped(problems: Iterable[Problem], limit: int = MAX_PROBLEMS) -> list[Problem]:
    """The first ``limit`` problems and, when there are more, one line counting the rest.

    Idempotent: a list that was capped before (and perhaps extended) keeps its earlier count.
    """
    listed: list[Problem] = []
    hidden = 0
    for problem in problems:
        more = _MORE.match(problem.message) if not problem.path else None
        if more is not None:
            hidden += int(more.group(1))
        else:
            listed.append(problem)
    rest = max(len(listed) - limit, 0) + hidden
    if rest == 0:
        return listed
    return [*listed[:limit], Problem("", f"... and {rest} more problem{'s' if rest != 1 else ''}")]


class SpecError(ValueError):
    """The input is not a valid FlashRLJob; ``problems`` says where and why (at most MAX_PROBLEMS)."""

    def __init__(self, problems: Iterable[Problem], job: FlashRLJob | None = None) -> None:
        self.problems = tuple(capped(problems))
        #: The job as parsed when every field was well-formed and only cross-field rules failed, so
        #: callers can go on to report further problems (e.g. verl overrides) in the same run.
        self.job = job
        super().__init__("\n".join(str(p) for p in self.problems))


class ApiObject(BaseModel):
    """What every ``flashrl.dev`` object has as Kubernetes stores it: apiVersion, kind and metadata
    (the kinds add their ``spec`` and ``status``)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: dict[str, Any]

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


class FlashRLJob(ApiObject):
    """A whole FlashRLJob object as stored by Kubernetes."""

    spec: FlashRLJobSpec
    status: FlashRLJobStatus | None = None


def _segment(key: Any) -> str:
    text = key if isinstance(key, str) else quote(key)
    return text if len(text) <= MAX_KEY_IN_PATH else f"{text[:MAX_KEY_IN_PATH]}..."


def _loc_to_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, str):
            item = _segment(item)
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
    DNS_SUBDOMAIN_PATTERN: "a DNS-1123 subdomain (DNS labels joined by '.', e.g. hf.token)",
    MOUNT_PATH_PATTERN: "an absolute path of non-empty segments, without '.' or '..' segments, ':', "
    "'$', whitespace or a trailing '/'",
    EXTENDED_RESOURCE_PATTERN: "an extended resource name: a domain, '/', and a name of at most 63 "
    "characters (e.g. rdma/hca_shared_devices_a)",
    QUANTITY_PATTERN: "a Kubernetes quantity such as 64, 500m or 512Gi",
    ENV_NAME_PATTERN: "an environment variable name (letters, digits and '_', not starting with a digit)",
}


#: How a suggestion starts in an unknown field's message (:func:`unknown_field`).
DID_YOU_MEAN = "did you mean "
UNKNOWN_FIELD = "unknown field (check the spelling; see `kubectl explain flashrljob.spec`)"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The model classes a field's annotation can hold (through ``X | None``, unions and lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def known_fields(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The wire names of the fields of the model found at ``loc`` (a pydantic error location below
    ``model``, without the unknown key); ``[]`` when ``loc`` does not lead to a model."""
    candidates = [model]
    for part in loc:
        if isinstance(part, int):
            continue  # a list item: the models the list holds
        named = [m for m in candidates if m.__name__ == part]  # a union member pydantic names
        if named:
            candidates = named
            continue
        field = next(
            (f for m in candidates for name, f in m.model_fields.items() if (f.alias or name) == part), None
        )
        if field is None:
            return []  # a map's key: its values are no model's fields
        candidates = _models_in(field.annotation)
    return sorted({f.alias or name for m in candidates for name, f in m.model_fields.items()})


def _folded(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def closest_field(name: str, known: Iterable[str]) -> str | None:
    """The known field ``name`` most likely meant (``difflib``'s closest match, ignoring case, ``_``
    and ``-``, so ``prompt_batch_size`` and ``promptBatchsize`` both find ``promptBatchSize``)."""
    by_folded = {_folded(k): k for k in known}
    found = difflib.get_close_matches(_folded(name), list(by_folded), n=1, cutoff=0.6)
    return by_folded[found[0]] if found else None


def unknown_field(path: str, name: str, known: Iterable[str], explain: str = "flashrljob.spec") -> str:
    """The message for the unknown field ``name`` at ``path``: with the full path of the closest known
    field of the same mapping when one is close (``did you mean spec.training.promptBatchSize?``);
    ``explain`` is what ``kubectl explain`` documents the fields of."""
    if name in ("true", "false"):
        return f"unknown field: {BOOLEAN_KEY_HINT}"
    suggestion = closest_field(name, known)
    if suggestion is None:
        return UNKNOWN_FIELD.replace("flashrljob.spec", explain)
    parent = path[: len(path) - len(_segment(name))].rstrip(".")
    where = f"{parent}.{suggestion}" if parent else suggestion
    return f"unknown field; {DID_YOU_MEAN}{where}? (see `kubectl explain {explain}`)"


def moved_suggestion(message: str, old_prefix: str, new_prefix: str) -> str:
    """``message`` with its suggestion's path moved as its problem was (a variant's field reported at
    ``spec.variants[i].spec`` rather than the merged job's ``spec``)."""
    return message.replace(DID_YOU_MEAN + old_prefix, DID_YOU_MEAN + new_prefix, 1)


def model_problem(
    error: Mapping[str, Any], model: type[BaseModel], prefix: str, explain: str = "flashrljob.spec"
) -> Problem:
    """One pydantic error of validating ``model`` at ``prefix`` as a :class:`Problem`; an unknown field
    gets the closest known one of its mapping as a suggestion."""
    loc = tuple(error.get("loc", ()))
    path = _loc_to_path(prefix, loc)
    if error.get("type") == "extra_forbidden" and loc and isinstance(loc[-1], str):
        return Problem(path, unknown_field(path, loc[-1], known_fields(model, loc[:-1]), explain))
    return Problem(path, _humanize(error))


def _humanize(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        if error.get("loc", ())[-1:] in (("true",), ("false",)):
            return f"unknown field: {BOOLEAN_KEY_HINT}"
        return UNKNOWN_FIELD
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"must be one of {expected}, got {quote(error.get('input'))}"
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        what = _PATTERN_NAMES.get(pattern, f"a string matching {pattern}")
        return f"must be {what}, got {quote(error.get('input'))}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping, got {type(error.get('input')).__name__}"
    msg = str(error.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind.endswith(("_type", "_parsing")) and not isinstance(error.get("input"), Mapping | list):
        # Say what was given: `nodes: "2"` (a string) is refused like the API server refuses it.
        msg += f", got {quote(error.get('input'))}"
    return msg


def shape_problem(document: Any) -> str | None:
    """Why a parsed document is too deep, too large or self-referential to walk, or None.

    YAML aliases make a document a graph: ``&a [*a]`` refers to itself, and nine levels of nine
    aliases are nine levels of objects but 9**9 values to every pass that walks them. The walk here is
    iterative and visits each object once, counting what alias expansion would produce.
    """
    expanded: dict[int, int] = {}
    depth_of: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, Mapping | list):
            continue
        ident = id(node)
        children = list(node.keys()) + list(node.values()) if isinstance(node, Mapping) else list(node)
        containers = [c for c in children if isinstance(c, Mapping | list)]
        if children_done:
            on_path.discard(ident)
            expanded[ident] = 1 + len(children) + sum(expanded[id(c)] - 1 for c in containers)
            depth_of[ident] = 1 + max((depth_of[id(c)] for c in containers), default=0)
            if depth_of[ident] > MAX_DEPTH:
                return f"is nested more than {MAX_DEPTH} levels deep"
            if expanded[ident] > MAX_NODES:
                return f"holds more than {MAX_NODES} values once its YAML aliases are expanded"
            continue
        if ident in expanded:
            continue
        if ident in on_path:
            return "refers to itself (a recursive YAML alias)"
        on_path.add(ident)
        stack.append((node, True))
        for child in containers:
            if id(child) in on_path:
                return "refers to itself (a recursive YAML alias)"
            if id(child) not in expanded:
                stack.append((child, False))
    return None


def without_nulls(value: Any) -> Any:
    """``value`` with every ``null`` map entry dropped: the API server prunes them before defaulting,
    so ``rdma: null`` means the same as leaving ``rdma`` out. (Call on shape-checked input only.)"""
    if isinstance(value, Mapping):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def _renamed_or(error: Mapping[str, Any], prefix: str) -> str | None:
    """For an unknown field that is an old name (:data:`~flashrl_api.renamed.RENAMED_FIELDS`): the
    field to write instead."""
    if error.get("type") != "extra_forbidden":
        return None
    return renamed_hint(".".join(str(part) for part in error.get("loc", ())), prefix)


def spec_problems(raw_spec: Any, prefix: str = "spec") -> tuple[FlashRLJobSpec | None, list[Problem]]:
    """Validate a raw spec mapping: field types, ranges, then cross-field rules.

    Field names are accepted only as the CRD spells them (camelCase): the models' Python names
    (``prompt_batch_size``) are unknown fields here, as they are to the API server.
    """
    if not isinstance(raw_spec, Mapping):
        return None, [Problem(prefix, f"must be a mapping, got {type(raw_spec).__name__}")]
    shape = shape_problem(raw_spec)
    if shape is not None:
        return None, [Problem(prefix, shape)]
    try:
        spec = FlashRLJobSpec.model_validate(
            without_nulls(raw_spec), strict=True, by_alias=True, by_name=False
        )
    except ValidationError as exc:
        problems = []
        for e in exc.errors(include_url=False):
            renamed = _renamed_or(e, prefix)
            if renamed is not None:
                problems.append(Problem(_loc_to_path(prefix, tuple(e["loc"])), renamed))
            else:
                problems.append(model_problem(e, FlashRLJobSpec, prefix))
        return None, problems
    return spec, [Problem(f"{prefix}.{path}", message) for path, message in violations(spec)]


def parse_spec(raw_spec: Any, prefix: str = "spec") -> FlashRLJobSpec:
    """Validate a raw spec mapping, raising :class:`SpecError` with every problem."""
    spec, problems = spec_problems(raw_spec, prefix)
    if problems or spec is None:
        raise SpecError(problems)
    return spec


def header_problems(raw: Mapping[str, Any], kind: str) -> tuple[Mapping[str, Any], str, list[Problem]]:
    """``apiVersion``, ``kind`` and ``metadata.name`` of a ``flashrl.dev`` object of ``kind``:
    ``(metadata, name, problems)``, with ``{}`` for a metadata that is not a mapping and ``""`` for a
    name that is not a string."""
    problems: list[Problem] = []
    if raw.get("apiVersion") != API_VERSION:
        problems.append(Problem("apiVersion", f"must be {API_VERSION!r}, got {quote(raw.get('apiVersion'))}"))
    if raw.get("kind") != kind:
        problems.append(Problem("kind", f"must be {kind!r}, got {quote(raw.get('kind'))}"))
    metadata = raw.get("metadata")
    if not isinstance(metadata, Mapping):
        problems.append(Problem("metadata", "must be a mapping with a name"))
        metadata = {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        problems.append(Problem("metadata.name", "is required"))
        name = ""
    elif len(name) > MAX_NAME_LENGTH or not _NAME_RE.fullmatch(name):
        problems.append(Problem("metadata.name", f"{quote(name)} {NAME_MESSAGE}"))
    problems.extend(label_and_annotation_problems(metadata))
    return metadata, name, problems


#: The API server's bound on all of an object's annotations together, keys and values
#: (apimachinery's TotalAnnotationSizeLimitB).
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024


def _key_problem(key: Any) -> str | None:
    """Why ``key`` is not a qualified name (a label or annotation key) as the API server checks it."""
    if not isinstance(key, str):
        return f"must be a string, got {type(key).__name__}"
    prefix, _, name = key.rpartition("/")
    if not LABEL_KEY_RE.fullmatch(key) or len(name) > 63 or len(prefix) > 253:
        return (
            "must be an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of "
            "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def label_and_annotation_problems(metadata: Mapping[str, Any]) -> list[Problem]:
    """``metadata.labels`` and ``metadata.annotations`` as the API server validates them: string maps,
    qualified-name keys, label values of at most 63 label characters, annotations within 256 KiB."""
    problems: list[Problem] = []
    for field in ("labels", "annotations"):
        values = metadata.get(field)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            problems.append(Problem(f"metadata.{field}", f"must be a mapping, got {type(values).__name__}"))
            continue
        for key, value in values.items():
            path = f"metadata.{field}[{_segment(str(key))}]"
            why = _key_problem(key)
            if why is not None:
                problems.append(Problem(path, f"key {quote(key)} {why}"))
            if not isinstance(value, str):
                problems.append(Problem(path, f"must be a string, got {type(value).__name__}"))
            elif field == "labels" and (len(value) > 63 or not LABEL_VALUE_RE.fullmatch(value)):
                problems.append(
                    Problem(
                        path,
                        f"{quote(value)} must be at most 63 letters, digits, '-', '_' or '.', starting and "
                        "ending with a letter or digit (or empty)",
                    )
                )
        if field == "annotations":
            size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in values.items())
            if size > MAX_ANNOTATIONS_BYTES:
                problems.append(
                    Problem("metadata.annotations", f"{size} bytes in all, more than {MAX_ANNOTATIONS_BYTES}")
                )
    return problems


def namespace_problems(metadata: Mapping[str, Any]) -> list[Problem]:
    """``metadata.namespace``, when given, must be a namespace name (matched whole: no trailing newline)."""
    namespace = metadata.get("namespace")
    if namespace is None or (
        isinstance(namespace, str) and len(namespace) <= 63 and DNS_LABEL_RE.fullmatch(namespace)
    ):
        return []
    return [
        Problem(
            "metadata.namespace",
            f"must be a namespace name (a DNS-1123 label of at most 63 characters), got {quote(namespace)}",
        )
    ]


#: The top-level fields of every ``flashrl.dev`` object.
TOP_LEVEL_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")


def unknown_field_problems(raw: Mapping[str, Any]) -> list[Problem]:
    """One problem per top-level field that is none of apiVersion, kind, metadata, spec, status."""
    extra = sorted(str(key) for key in set(raw) - set(TOP_LEVEL_FIELDS))
    problems = []
    for key in extra:
        suggestion = closest_field(key, TOP_LEVEL_FIELDS)
        hint = f"; {DID_YOU_MEAN}{suggestion}?" if suggestion else ""
        problems.append(Problem(_segment(key), "unknown field" + hint))
    return problems


def parse_job(raw: Any) -> FlashRLJob:
    """Validate a whole FlashRLJob object (apiVersion, kind, metadata.name, spec)."""
    if not isinstance(raw, Mapping):
        raise SpecError([Problem("", f"a FlashRLJob must be a YAML mapping, got {type(raw).__name__}")])
    shape = shape_problem(raw)
    if shape is not None:
        raise SpecError([Problem("", f"the document {shape}")])
    metadata, _name, problems = header_problems(raw, KIND)
    problems.extend(namespace_problems(metadata))
    uid = metadata.get("uid")
    if uid is not None and (not isinstance(uid, str) or len(uid) > 128):
        problems.append(Problem("metadata.uid", f"must be a string set by the API server, got {quote(uid)}"))
    problems.extend(unknown_field_problems(raw))
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


#: libyaml's safe loader when PyYAML was built with it (several times faster on large input), else
#: PyYAML's own; both construct only plain YAML types.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_VALUE_EVENTS = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent, yaml.AliasEvent)


def _count_values(text: str, source: str) -> None:
    """Refuse a stream holding more than :data:`MAX_NODES` values before any object is built: the
    parser's events are cheap, constructing millions of Python objects is not (a 2.8 MB input took
    half a minute). A parse error here is left for the real load to report."""
    count = 0
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, _VALUE_EVENTS):
                count += 1
                if count > MAX_NODES:
                    break
    except (yaml.YAMLError, RecursionError, ValueError):
        return  # a parse error is left for the real load to report
    if count > MAX_NODES:
        # Raised outside the handler above: SpecError is a ValueError, which it would swallow.
        raise SpecError([Problem("", f"{source} holds more than {MAX_NODES} values")])


def load_documents(text: str, source: str = "<input>") -> list[Any]:
    """Parse a YAML stream, turning every parser failure into a :class:`SpecError`.

    PyYAML raises more than ``YAMLError`` on hostile text: ``RecursionError`` (its composer recurses
    once per nesting level), ``ValueError`` (a date such as 2024-13-45, an integer beyond Python's
    digit limit). Each is a problem with the input, reported as one line.
    """
    if len(text) > MAX_MANIFEST_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_MANIFEST_BYTES:
        raise SpecError([Problem("", f"{source} is larger than {MAX_MANIFEST_BYTES} bytes")])
    _count_values(text, source)
    try:
        docs = [d for d in load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([Problem("", f"{source} is not valid YAML{where}: {quote(problem, 200)}")]) from None
    except RecursionError:
        raise SpecError([Problem("", f"{source} is nested too deeply to parse")]) from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise SpecError(
            [Problem("", f"{source} holds a value YAML cannot read: {quote(str(exc), 200)}")]
        ) from None
    if not docs:
        raise SpecError([Problem("", f"{source} contains no YAML document")])
    for doc in docs:
        shape = shape_problem(doc)
        if shape is not None:
            raise SpecError([Problem("", f"{source}: a document {shape}")])
    return docs


def decode_manifest(data: bytes, source: str) -> str:
    """The text of a manifest read as bytes (at most MAX_MANIFEST_BYTES + 1 of them)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise SpecError([Problem("", f"{source} is larger than {MAX_MANIFEST_BYTES} bytes")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError([Problem("", f"{source} is not UTF-8 text")]) from None


def load_job_file(path: str | Path) -> FlashRLJob:
    """Read a file holding exactly one FlashRLJob and validate it."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read {path}: {exc.strerror or exc}")]) from None
    text = decode_manifest(data, str(path))
    docs = load_documents(text, str(path))
    if len(docs) != 1:
        raise SpecError([Problem("", f"{path} must hold one FlashRLJob, found {len(docs)} documents")])
    return parse_job(docs[0])
