"""``flashrl-launch stage``: download a job's Hugging Face sources into its claims, verify them, mark them.

Runs in a CPU-only Kubernetes Job before the Ray cluster (and so before any GPU) is requested. For each
source of :func:`flashrl_api.staging.staging_plan`:

1. **Already staged?** The marker file (written last, atomically) names the source, the commit it
   resolved to and every file with its size. When it matches the source and the files are there with
   those sizes, nothing is downloaded and the Hub is not asked (this also works with
   ``HF_HUB_OFFLINE=1``).
2. **Resolve.** ``HfApi.repo_info(files_metadata=True)`` gives the commit and, per file, its size and the
   checksum the Hub reports: the LFS sha256 for large files, the git blob id for the others.
3. **Room.** The bytes still to download are compared with the volume's free space first.
4. **Download** each file with ``hf_hub_download`` pinned to the resolved commit, into the source's
   directory (``local_dir``), which honours ``HF_ENDPOINT`` (a mirror), ``HF_TOKEN`` and the client's
   retries; then hash it and compare with the Hub's checksum.
5. **Columns.** A data file must be parquet with the columns verl 0.9.1 reads (:data:`REQUIRED_COLUMNS`).
6. **Marker.** Written to a temporary file, fsynced and renamed: a half-finished download never counts.

Failures raise :class:`StagingError` with a cause the operator shows after ``StagingFailed``. The
hashing is written here rather than taken from ``huggingface_hub.utils.sha`` because its git-blob hash
takes the whole file in memory, and model shards are several GB.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from flashrl_api import FlashRLJobSpec
from flashrl_api.staging import StagedSource, staging_plan
from flashrl_api.times import now_rfc3339

if TYPE_CHECKING:
    from huggingface_hub import HfApi

Log = Callable[[str], None]
#: Called with the running totals after each source is resolved and after each verified file.
OnProgress = Callable[["Progress"], None]

#: Why staging failed; the operator reports ``StagingFailed`` with ``<cause>: <detail>``.
Cause = Literal[
    "RepositoryNotFound",
    "GatedRepository",
    "RevisionNotFound",
    "FileNotFound",
    "HubUnreachable",
    "NotStagedOffline",
    "VolumeFull",
    "VolumeNotWritable",
    "ChecksumMismatch",
    "MissingColumn",
    "NotParquet",
    "UnsafePath",
]

#: Columns verl 0.9.1 reads from every row of an RL parquet file, besides the prompt column
#: (``data.promptKey``): ``verl/utils/dataset/rl_dataset.py`` takes the chat messages from the prompt
#: column (``_build_messages``: ``example[key]``), and the ``dapo`` reward manager
#: (``verl/experimental/reward_loop/reward_manager/dapo.py``, ``run_single``) reads
#: ``data_source`` and ``reward_model["ground_truth"]``.
REQUIRED_COLUMNS: Final[tuple[str, ...]] = ("data_source", "reward_model")
#: Fields a struct column must have: ``reward_model.ground_truth`` (dapo.py, above).
REQUIRED_FIELDS: Final[dict[str, tuple[str, ...]]] = {"reward_model": ("ground_truth",)}

#: Weight formats skipped when a model repository has safetensors weights: transformers loads the
#: safetensors and the duplicates would double the download.
DUPLICATE_WEIGHT_SUFFIXES: Final = (".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".onnx", ".ot")
MARKER_VERSION: Final = 1
_CHUNK = 8 << 20


class StagingError(Exception):
    """Staging failed for a reason no retry of the same Job would fix."""

    def __init__(self, cause: Cause, detail: str) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail

    @property
    def reason(self) -> str:
        """``<cause>: <detail>``, the line the operator shows after StagingFailed."""
        return f"{self.cause}: {self.detail}"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository at a commit, as the Hub describes it."""

    path: str
    size: int
    #: ``("sha256", hex)`` for LFS files, ``("git-sha1", hex)`` for the others; None if not reported.
    checksum: tuple[str, str] | None


@dataclass
class Progress:
    """Files and bytes done over the whole job (every source)."""

    files: int = 0
    files_total: int = 0
    bytes: int = 0
    bytes_total: int = 0
    #: Bytes actually downloaded in this run (0 when everything was staged already).
    downloaded: int = 0

    def record(self) -> dict[str, Any]:
        """``status.staging`` as the FlashRLJob carries it."""
        return {
            "files": self.files,
            "filesTotal": self.files_total,
            "bytes": self.bytes,
            "bytesTotal": self.bytes_total,
            "updateTime": now_rfc3339(),
        }

    def line(self) -> str:
        """``3/7 files, 1.2/16.4 GB``."""
        return (
            f"{self.files}/{self.files_total} files, {self.bytes / 1e9:.2f}/{self.bytes_total / 1e9:.2f} GB"
        )


@dataclass
class StageResult:
    """What one run did, per source."""

    staged: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def read_marker(item: StagedSource) -> dict[str, Any] | None:
    """The marker of a completely staged source, or None (absent, unreadable, another source, or a
    listed file missing or of another size)."""
    try:
        data = json.loads(Path(item.marker).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("source") != item.source.uri:
        return None
    files = data.get("files")
    if not isinstance(files, list) or not files:
        return None
    base = Path(item.directory)
    for entry in files:
        if not isinstance(entry, dict):
            return None
        try:
            if (base / str(entry["path"])).stat().st_size != int(entry["size"]):
                return None
        except (OSError, KeyError, TypeError, ValueError):
            return None
    return data


def write_marker(item: StagedSource, commit: str, files: Iterable[RemoteFile]) -> dict[str, Any]:
    """Atomically record a completely staged and verified source (temporary file, fsync, rename)."""
    record: dict[str, Any] = {
        "version": MARKER_VERSION,
        "source": item.source.uri,
        "repo": item.source.repo_id,
        "repoType": item.source.repo_type,
        "revision": item.source.revision,
        "commit": commit,
        "stagedAt": now_rfc3339(),
        "files": [
            {"path": f.path, "size": f.size, **({f.checksum[0]: f.checksum[1]} if f.checksum else {})}
            for f in files
        ],
    }
    marker = Path(item.marker)
    marker.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".flashrl-staged.", dir=marker.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(record, out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        Path(tmp).replace(marker)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(marker.parent)
    return record


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def file_checksum(path: Path, kind: str) -> str:
    """``sha256`` of the content, or git's blob id (``sha1("blob <size>\\0" + content)``), streamed."""
    digest = hashlib.sha256() if kind == "sha256" else hashlib.sha1(usedforsecurity=False)
    if kind != "sha256":
        digest.update(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def prompt_key(spec: FlashRLJobSpec) -> str:
    """The column verl will read prompts from: ``data.promptKey``, unless ``spec.overrides`` sets
    ``data.prompt_key``, which then replaces the generated value (``verl_args.merge_overrides``), so
    the staged files are checked for the column verl actually reads."""
    from flashrl_jobs.verl_args import override_key

    key = spec.data.prompt_key
    for override in spec.overrides:
        if override.startswith("~") or "=" not in override or override_key(override) != "data.prompt_key":
            continue
        value = override.split("=", 1)[1].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        key = value
    return key


def check_columns(path: Path, prompt_key: str) -> None:
    """Refuse a data file verl 0.9.1 could not train on: not parquet, or a required column missing."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a non-parquet file
        raise StagingError("NotParquet", f"{path} is not a readable parquet file: {exc}") from None
    names = set(schema.names)
    missing = [c for c in (prompt_key, *REQUIRED_COLUMNS) if c not in names]
    if missing:
        raise StagingError(
            "MissingColumn",
            f"{path} has no column {', '.join(missing)} (verl 0.9.1 reads {prompt_key} as the chat "
            f"prompt (data.promptKey), data_source and reward_model.ground_truth for the dapo reward; "
            f"columns: {', '.join(sorted(names))})",
        )
    import pyarrow as pa

    for column, fields in REQUIRED_FIELDS.items():
        kind = schema.field(column).type
        present = {kind.field(i).name for i in range(kind.num_fields)} if pa.types.is_struct(kind) else set()
        absent = [f for f in fields if f not in present]
        if absent:
            raise StagingError(
                "MissingColumn",
                f"{path}: column {column} has no field {', '.join(absent)} (a struct with "
                f"{', '.join(fields)} is needed by the dapo reward; it is {kind})",
            )


def _remote_files(api: HfApi, item: StagedSource) -> tuple[str, list[RemoteFile]]:
    """The commit the revision resolves to, and the files to stage with their sizes and checksums."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils._validators import validate_repo_id

    src = item.source
    try:
        # The spec's rules already hold the Hub's naming rules; the library's own check is the last word.
        validate_repo_id(src.repo_id)
    except HFValidationError:
        raise StagingError("UnsafePath", f"{src.repo_id} is not a repository id the Hub accepts") from None
    try:
        info = api.repo_info(src.repo_id, repo_type=src.repo_type, revision=src.revision, files_metadata=True)
    except GatedRepoError:
        raise StagingError(
            "GatedRepository",
            f"{src.repo_id} is gated: accept its terms on the Hub and provide a token with access "
            "(HF_TOKEN; spec.huggingFace.tokenSecret)",
        ) from None
    except RevisionNotFoundError:
        raise StagingError("RevisionNotFound", f"{src.repo_id} has no revision {src.revision!r}") from None
    except RepositoryNotFoundError:
        raise StagingError(
            "RepositoryNotFound",
            f"{src.repo_type} repository {src.repo_id} not found at {_endpoint()} (or it is private and "
            "no token with access was given)",
        ) from None
    except EntryNotFoundError as exc:
        raise StagingError("FileNotFound", str(exc).splitlines()[0]) from None
    except (HfHubHTTPError, OSError) as exc:
        raise StagingError("HubUnreachable", f"{_endpoint()}: {str(exc).splitlines()[0]}") from None
    if not info.sha:
        raise StagingError("HubUnreachable", f"{_endpoint()} did not say which commit {src.revision} is")
    files: list[RemoteFile] = []
    for sibling in getattr(info, "siblings", None) or []:
        checksum: tuple[str, str] | None = None
        if sibling.lfs is not None:
            checksum = ("sha256", sibling.lfs.sha256)
        elif sibling.blob_id:
            checksum = ("git-sha1", sibling.blob_id)
        size = sibling.lfs.size if sibling.lfs is not None else sibling.size
        files.append(RemoteFile(_safe_file_name(src.repo_id, sibling.rfilename), int(size or 0), checksum))
    if src.filename is not None:
        wanted = [f for f in files if f.path == src.filename]
        if not wanted:
            raise StagingError(
                "FileNotFound", f"{src.repo_id}@{src.revision} ({info.sha[:12]}) has no file {src.filename}"
            )
        return info.sha, wanted
    if any(f.path.endswith(".safetensors") for f in files):
        files = [f for f in files if not f.path.endswith(DUPLICATE_WEIGHT_SUFFIXES)]
    return info.sha, files


def _safe_file_name(repo_id: str, name: object) -> str:
    """A file name from the Hub's listing, refused unless it is a relative path that stays inside the
    repository's directory (no absolute path, no '.' or '..' segment, no backslash or control
    character): the listing comes from whatever ``HF_ENDPOINT`` names, and is data."""
    text = name if isinstance(name, str) else ""
    parts = text.split("/")
    if (
        not text
        or len(text) > 1024
        or text.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or any(ord(c) < 0x20 or c in "\\\x7f" for c in text)
    ):
        raise StagingError(
            "UnsafePath",
            f"{repo_id}: the Hub's file listing holds a name that is not a path inside the repository",
        )
    return text


def _contained(mount_path: str, path: Path, what: str) -> Path:
    """``path`` with every symlink resolved, refused unless it is inside the volume's mount: a link
    planted on the claim must not carry a download (or a checksum read) out of it."""
    mount = Path(mount_path).resolve()
    resolved = path.resolve()
    if resolved != mount and mount not in resolved.parents:
        raise StagingError(
            "UnsafePath", f"{what}: {path} leads outside {mount_path} (a symbolic link on the volume)"
        )
    return resolved


def _endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def _room(directory: Path, needed: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise StagingError(
            "VolumeFull",
            f"{needed / 1e9:.2f} GB to download into {directory}, {free / 1e9:.2f} GB free on its volume",
        )


def _verified(local: Path, remote: RemoteFile) -> bool:
    if local.stat().st_size != remote.size:
        return False
    if remote.checksum is None:
        return True
    kind, expected = remote.checksum
    return file_checksum(local, kind) == expected


def _download(api: HfApi, item: StagedSource, commit: str, remote: RemoteFile, *, force: bool) -> Path:
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    try:
        local = api.hf_hub_download(
            item.source.repo_id,
            remote.path,
            repo_type=item.source.repo_type,
            revision=commit,
            local_dir=item.directory,
            force_download=force,
        )
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise StagingError(
                "VolumeFull", f"{item.directory}: no space left writing {remote.path}"
            ) from None
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise StagingError("VolumeNotWritable", f"{item.directory}: {exc.strerror}") from None
        if isinstance(exc, HfHubHTTPError | EntryNotFoundError):
            raise StagingError("HubUnreachable", f"{remote.path}: {str(exc).splitlines()[0]}") from None
        raise
    return Path(local)


def stage_source(
    api: HfApi | None,
    item: StagedSource,
    spec: FlashRLJobSpec,
    progress: Progress,
    log: Log,
    on_progress: OnProgress | None = None,
) -> dict[str, Any] | None:
    """Stage one source; returns its new marker, or None when it was already staged."""
    src = item.source
    _contained(item.mount_path, Path(item.directory), src.uri)
    _contained(item.mount_path, Path(item.marker), src.uri)
    existing = read_marker(item)
    if existing is not None:
        size = sum(int(f["size"]) for f in existing["files"])
        progress.files_total += len(existing["files"])
        progress.files += len(existing["files"])
        progress.bytes_total += size
        progress.bytes += size
        log(f"{src.uri}: already staged at {item.path} (commit {str(existing.get('commit'))[:12]}); skipped")
        return None
    if api is None:
        raise StagingError(
            "NotStagedOffline",
            f"HF_HUB_OFFLINE is set and {src.uri} is not staged at {item.directory}: stage it with network "
            "access first, or point the spec at a path on a claim",
        )
    commit, files = _remote_files(api, item)
    directory = Path(item.directory)
    _contained(item.mount_path, directory, src.uri)
    for remote in files:
        _contained(item.mount_path, directory / remote.path, src.uri)
    total = sum(f.size for f in files)
    progress.files_total += len(files)
    progress.bytes_total += total
    try:
        _room(directory, total - _present_bytes(directory, files))
    except PermissionError as exc:
        raise StagingError("VolumeNotWritable", f"{directory}: {exc.strerror}") from None
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise StagingError("VolumeNotWritable", f"{directory}: {exc.strerror}") from None
        raise
    log(f"{src.uri}: {len(files)} file(s), {total / 1e9:.2f} GB at commit {commit[:12]} -> {item.path}")
    for remote in files:
        present = _size_or_zero(directory / remote.path)
        # A file of another size is a leftover of an interrupted run: huggingface_hub's local_dir
        # metadata would still call it current, so it is downloaded again.
        local = _download(api, item, commit, remote, force=present not in (0, remote.size))
        _contained(item.mount_path, local, src.uri)
        fresh = present != remote.size
        if not _verified(local, remote) and not fresh:
            # Same size, other content: the copy on the volume was damaged after it was verified.
            local = _download(api, item, commit, remote, force=True)
            fresh = True
        if not _verified(local, remote):
            kind, expected = remote.checksum or ("", "")
            actual = file_checksum(local, kind)
            local.unlink(missing_ok=True)
            raise StagingError(
                "ChecksumMismatch",
                f"{src.repo_id}/{remote.path}: {kind} {actual} but the Hub reports {expected} "
                "(the file was removed; a rerun downloads it again)",
            )
        progress.downloaded += remote.size if fresh else 0
        progress.files += 1
        progress.bytes += remote.size
        log(f"{src.uri}: {remote.path} verified ({progress.line()})")
        if on_progress is not None:
            on_progress(progress)
    if src.filename is not None:
        check_columns(directory / src.filename, prompt_key(spec))
    return write_marker(item, commit, files)


def _present_bytes(directory: Path, files: Iterable[RemoteFile]) -> int:
    return sum(f.size for f in files if _size_or_zero(directory / f.path) == f.size)


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def check_local_data(spec: FlashRLJobSpec, log: Log) -> None:
    """Data given as paths on the job's volumes (mounted here too) get the same column check."""
    from flashrl_api.sources import is_hf

    mounts = [spec.storage.data.mount_path, spec.storage.model_cache.mount_path]
    for name, value in (("data.train", spec.data.train), ("data.validation", spec.data.validation)):
        if is_hf(value) or not any(value.startswith(m.rstrip("/") + "/") for m in mounts):
            continue
        path = Path(value)
        if not path.is_file():
            raise StagingError("FileNotFound", f"spec.{name}: {value} does not exist on its volume")
        check_columns(path, prompt_key(spec))
        log(f"spec.{name}: {value} has verl's columns")


def stage(spec: FlashRLJobSpec, log: Log, on_progress: OnProgress | None = None) -> StageResult:
    """Stage every Hugging Face source of the spec (see the module docstring); raises StagingError."""
    result = StageResult()
    plan = staging_plan(spec)
    check_local_data(spec, log)
    if not plan:
        log("Nothing to stage: the model and data are paths inside the pods")
        return result
    api = None
    if not _offline():
        from huggingface_hub import HfApi

        api = HfApi(library_name="flashrl")
    for item in plan:
        record = stage_source(api, item, spec, result.progress, log, on_progress)
        if record is None:
            result.skipped.append(item.source.uri)
        else:
            result.staged.append(record)
    if on_progress is not None:
        on_progress(result.progress)
    log(
        f"Staged {len(plan)} source(s): {result.progress.line()}, "
        f"{result.progress.downloaded / 1e9:.2f} GB downloaded in this run"
    )
    return result
