"""Where a job's model and data come from, and where they are staged on the job's volumes.

A source is either a path inside the pods (on a claim the user filled) or a Hugging Face reference in
``huggingface_hub``'s own URL syntax (``HfFileSystem``, ``huggingface_hub/hf_file_system.py``):

- model: ``hf://<owner>/<name>[@<revision>]``, the whole model repository;
- data:  ``hf://datasets/<owner>/<name>[@<revision>]/<file in the repo>``, one parquet file.

A Hugging Face source is downloaded by ``flashrl-launch stage`` (a CPU-only Job, before any GPU is
requested) into a fixed place on the volume the Ray pods mount, and verl is given that place. The
place depends only on the spec, so the renderer, the stage command and verl's arguments compute it
alike (:func:`staged_path`):

- model ``hf://Qwen/Qwen3-8B-Base`` -> ``<modelCache mount>/hf/Qwen/Qwen3-8B-Base/main``;
- data ``hf://datasets/O/N@v1/data/x.parquet`` -> ``<data mount>/hf/datasets/O/N/v1/data/x.parquet``.

Repository names must be ``owner/name`` (the Hub's legacy one-segment names now redirect to an
organisation), which keeps the data URL unambiguous: the file path starts after the third segment. A
revision is a branch, tag or commit; one containing ``/`` is written percent-encoded (``refs%2Fpr%2F1``),
as ``HfFileSystem`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import unquote

HF_SCHEME: Final = "hf://"
#: The revision a reference without ``@`` means (the Hub's default branch name).
DEFAULT_REVISION: Final = "main"
#: Directory, under a volume's mount path, holding staged Hugging Face downloads.
STAGE_DIR: Final = "hf"
#: File written last, atomically, into a staged directory: its presence means "complete and verified".
MARKER_FILE: Final = ".flashrl-staged.json"

# One owner or repository name as the Hub accepts it (huggingface_hub's validate_repo_id: letters,
# digits, '-', '_', '.', not starting or ending with '-' or '.', no '--' or '..'): runs of letters,
# digits and '_' joined by single '-' or '.'. At most 96 characters (checked in Python: a pattern
# cannot count characters across the runs).
_NAME = r"[A-Za-z0-9_]+([-.][A-Za-z0-9_]+)*"
_REPO = rf"{_NAME}/{_NAME}"
MAX_REPO_NAME: Final = 96
# A revision (branch, tag, commit, ``refs%2Fpr%2F1``): letters, digits, '_', '-' and percent escapes
# other than an encoded '.', in runs joined by single '.': never '.', '..' or a '..' inside, however
# it is written. At most 255 characters (checked in Python).
_REV_UNIT = r"([A-Za-z0-9_-]|%(2[0-9A-Da-dFf]|[013-9A-Fa-f][0-9A-Fa-f]))+"
_REVISION = rf"{_REV_UNIT}([.]{_REV_UNIT})*"
MAX_REVISION: Final = 255
# A file path inside the repository: segments of letters, digits, '_', '-' and '.', none of them '.'
# or '..' (a segment holds a character other than '.', or three dots or more).
_SEGMENT = r"([A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*|[.][.][.]+)"
_FILE = rf"{_SEGMENT}(/{_SEGMENT})*"
#: An absolute path inside the pods (no whitespace, no ':', no '.' or '..' segment).
_LOCAL = r"(/([^\s:/]*[^\s:/.][^\s:/]*|[.][.][.]+)?)+"

#: ``spec.model.source``: an absolute path, or ``hf://<owner>/<name>[@<revision>]``.
MODEL_SOURCE_PATTERN: Final = rf"^({_LOCAL}|hf://{_REPO}(@{_REVISION})?)$"
#: ``spec.data.train`` / ``spec.data.validation``: an absolute path, or
#: ``hf://datasets/<owner>/<name>[@<revision>]/<file>``.
DATA_SOURCE_PATTERN: Final = rf"^({_LOCAL}|hf://datasets/{_REPO}(@{_REVISION})?/{_FILE})$"

_MODEL_RE = re.compile(rf"^hf://(?P<repo>{_REPO})(@(?P<rev>{_REVISION}))?$")
_DATA_RE = re.compile(rf"^hf://datasets/(?P<repo>{_REPO})(@(?P<rev>{_REVISION}))?/(?P<file>{_FILE})$")

RepoType = Literal["model", "dataset"]


@dataclass(frozen=True)
class HfSource:
    """A parsed Hugging Face reference."""

    repo_id: str
    repo_type: RepoType
    #: As written (``main`` when omitted), percent-decoded.
    revision: str
    #: The file in the repository (datasets); ``None`` means the whole repository (models).
    filename: str | None = None

    @property
    def uri(self) -> str:
        """The reference in ``hf://`` form (revision always spelled out)."""
        from urllib.parse import quote

        prefix = "datasets/" if self.repo_type == "dataset" else ""
        rev = quote(self.revision, safe="")
        tail = f"/{self.filename}" if self.filename else ""
        return f"{HF_SCHEME}{prefix}{self.repo_id}@{rev}{tail}"

    def directory(self, mount_path: str) -> str:
        """The directory the repository (or the file's repository) is staged into under ``mount_path``."""
        from urllib.parse import quote

        kind = "datasets/" if self.repo_type == "dataset" else ""
        rev = quote(self.revision, safe="")
        return f"{mount_path.rstrip('/')}/{STAGE_DIR}/{kind}{self.repo_id}/{rev}"


def _is_local(source: str) -> bool:
    return re.fullmatch(_LOCAL, source) is not None


def is_hf(source: str) -> bool:
    """True for a Hugging Face reference (anything else is a path inside the pods)."""
    return source.startswith(HF_SCHEME)


def parse_model_source(source: str) -> HfSource | None:
    """The reference in ``spec.model.source``; ``None`` for a path. Raises ``ValueError`` if malformed."""
    if not is_hf(source):
        return None
    if source.startswith(f"{HF_SCHEME}datasets/"):
        raise ValueError(f"{source!r} is a dataset; a model is hf://<owner>/<name>[@<revision>]")
    match = _hf_match(
        _MODEL_RE,
        source,
        "hf://<owner>/<name>[@<revision>] (names and revisions as the Hub accepts them: no '..', '--', "
        "leading or trailing '-' or '.')",
    )
    return HfSource(match["repo"], "model", _revision(match["rev"]))


def parse_data_source(source: str) -> HfSource | None:
    """The reference in ``spec.data.*``; ``None`` for a path. Raises ``ValueError`` if malformed."""
    if not is_hf(source):
        return None
    match = _hf_match(
        _DATA_RE,
        source,
        "hf://datasets/<owner>/<name>[@<revision>]/<file> (names, revisions and file paths as the Hub "
        "accepts them: no '..' segment, '--', leading or trailing '-' or '.')",
    )
    return HfSource(match["repo"], "dataset", _revision(match["rev"]), match["file"])


def _hf_match(pattern: re.Pattern[str], source: str, form: str) -> re.Match[str]:
    """``source`` matched against ``pattern``, its repository checked; ``form`` says what it should be."""
    match = pattern.fullmatch(source)
    if match is None:
        raise ValueError(f"{source!r} is not {form}")
    _check_repo(match["repo"])
    return match


def _check_repo(repo: str) -> None:
    for part in repo.split("/"):
        if len(part) > MAX_REPO_NAME:
            raise ValueError(
                f"{part[:32]!r}...: a Hub owner or repository name is at most {MAX_REPO_NAME} characters"
            )


def _revision(raw: str | None) -> str:
    """The revision as the Hub reads it (percent-decoded), refused when decoding makes it a path."""
    if raw is None:
        return DEFAULT_REVISION
    if len(raw) > MAX_REVISION:
        raise ValueError(f"a revision is at most {MAX_REVISION} characters")
    decoded = unquote(raw)
    if (
        decoded in (".", "..")
        or any(part in ("", ".", "..") for part in decoded.split("/"))
        or any(ord(c) < 0x20 or c == "\\" for c in decoded)
    ):
        raise ValueError(f"revision {raw!r} decodes to {decoded!r}, which is not a branch, tag or commit")
    return decoded


def check_model_source(source: str) -> str:
    """Pydantic validator body: a clear message instead of a regular expression."""
    if is_hf(source):
        parse_model_source(source)
    elif not _is_local(source):
        hint = (
            f"; a Hugging Face id is written hf://{source}" if _MODEL_RE.fullmatch(f"hf://{source}") else ""
        )
        raise ValueError(
            f"{source!r} is neither hf://<owner>/<name>[@<revision>] (downloaded before the job starts) "
            f"nor an absolute path inside the pods (e.g. on storage.modelCache){hint}"
        )
    return source


def check_data_source(source: str) -> str:
    """Pydantic validator body for ``spec.data.train`` and ``spec.data.validation``."""
    if is_hf(source):
        parse_data_source(source)
    elif not _is_local(source):
        raise ValueError(
            f"{source!r} is neither hf://datasets/<owner>/<name>[@<revision>]/<file> nor an absolute "
            "path inside the pods (e.g. on storage.data)"
        )
    return source


def staged_path(source: HfSource, mount_path: str) -> str:
    """What verl reads for a staged source: the model directory, or the data file inside its repository's
    directory."""
    directory = source.directory(mount_path)
    return f"{directory}/{source.filename}" if source.filename else directory
