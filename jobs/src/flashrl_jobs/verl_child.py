"""verl's checks of a job, run in a child process that holds none of the caller's credentials.

The operator and ``flashrl validate`` check a job's verl configuration by composing it with Hydra and
running verl's own start-up code on it (:func:`flashrl_jobs.verl_config.check_config`). That code is
someone else's and reads a configuration a user wrote, so it runs here, apart from the caller:

* a fresh interpreter of the same Python, in isolated mode (``-I``: no ``PYTHON*`` variables, no user
  site, no working directory on the path; ``-B``: no bytecode written), started with a minimal
  environment (no ``KUBERNETES_*``, no tokens, ``HF_HUB_OFFLINE``) in an empty temporary directory;
* resource limits set by the child on itself before it imports anything: CPU seconds, address space,
  no core dump; and no file may grow (``RLIMIT_FSIZE`` 0) from the moment it has preloaded the installed
  libraries verl's checks import (numpy, torch), before it reads anything of the job's: their imports
  write (torch imports dill, which test-writes a file in the temporary directory, here the child's own
  empty working directory, ``TMPDIR``);
  the parent adds a wall-clock timeout and kills the child when it passes;
* an audit hook (``sys.addaudithook``, which cannot be removed once added) refusing every file opened
  for writing, every file read outside Python's own import roots (so the ServiceAccount token under
  ``/var/run/secrets`` and the operator's files cannot be read), every socket, every new process,
  ``ctypes``, ``chdir``, and every change to the file system;
* Hydra's instantiation confined to verl's config dataclasses
  (:func:`flashrl_jobs.verl_checks.instantiation_guard`), and overrides that could name code
  refused before the child starts (:mod:`flashrl_jobs.override_rules`).

What comes back is JSON on a private pipe; the child's stdout and stderr are discarded unread. A child
that fails, times out or answers nonsense is reported by a fixed sentence (:class:`VerlChildError`),
never by its output. docs/security.md says what this does not guarantee.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from flashrl_api import FlashRLJob, Problem

#: Wall-clock seconds the parent waits (generous: a composition takes a few seconds on a busy node).
WALL_TIMEOUT_SECONDS: Final = 180.0
#: CPU seconds the child may use (a check uses 2-5).
CPU_SECONDS: Final = 60
#: Address space the child may map. Python, pydantic, Hydra and verl's config modules need ~0.5 GiB;
#: where torch is installed (a user's machine, the trainer image) verl's checks import it, and its
#: shared libraries alone map a few GiB of address space, so the bound is generous.
ADDRESS_SPACE_BYTES: Final = 8 * 1024**3
#: Variables the child gets: nothing of the caller's.
CHILD_ENV: Final[Mapping[str, str]] = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HF_HUB_OFFLINE": "1",
    "PYTHONHASHSEED": "0",
}

#: The child's first lines: read the request, put the caller's import path in place, hand over.
_BOOTSTRAP = (
    "import json, os, sys\n"
    "request = json.loads(sys.stdin.read())\n"
    "sys.path[:] = request['path']\n"
    "from flashrl_jobs.verl_child import child_main\n"
    "child_main(request)\n"
)


class VerlChildError(RuntimeError):
    """The checking child did not answer; the message is fixed per failure class, never its output."""


# --- parent ---------------------------------------------------------------------------------------


def check_config_isolated(
    job: FlashRLJob,
    *,
    model_config: Mapping[str, Any] | None = None,
    timeout: float = WALL_TIMEOUT_SECONDS,
    cancel: threading.Event | None = None,
) -> tuple[list[Problem], list[str]]:
    """``check_config`` of the job in a sandboxed child: ``(problems, skipped)``.

    ``model_config`` (a model's ``config.json``, read by the caller from its own files) enables the
    model-dependent checks; the child reads no file of the caller's. Raises :class:`VerlChildError`
    when the child gives no answer (or passes its time budget, ``timeout``), :class:`CheckCancelledError`
    when ``cancel`` is set meanwhile (the child is killed: an operator stopping, a job deleted), and
    ``VerlConfigUnavailableError`` when verl's config is not installed.
    """
    request = {
        "path": [p for p in sys.path if p and Path(p).is_absolute()],
        "job": job.model_dump(mode="json", by_alias=True, exclude_none=True),
        "model_config": dict(model_config) if model_config is not None else None,
    }
    read_end, write_end = os.pipe()
    try:
        with tempfile.TemporaryDirectory(prefix="flashrl-verl-check-") as workdir:
            try:
                process = subprocess.Popen(
                    [sys.executable, "-I", "-B", "-c", _BOOTSTRAP, str(write_end)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    cwd=workdir,
                    # The temporary directory is the child's own working directory, removed after.
                    env={**CHILD_ENV, "TMPDIR": workdir},
                    pass_fds=(write_end,),
                    close_fds=True,
                )
            except OSError:
                raise VerlChildError("verl's checks could not be started in their sandbox") from None
            os.close(write_end)
            write_end = -1
            _wait(process, json.dumps(request).encode(), timeout, cancel)
            answer = _read_all(read_end)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    if process.returncode != 0:
        if process.returncode < 0:
            raise VerlChildError(
                f"verl's checks were stopped by signal {-process.returncode} in their sandbox "
                "(a CPU, memory or file limit)"
            )
        raise VerlChildError(f"verl's checks ended with exit code {process.returncode} in their sandbox")
    return _decode(answer)


class CheckCancelledError(VerlChildError):
    """The caller no longer wants the answer; the child was killed."""


#: How often a waiting parent looks at its cancel flag.
_POLL_SECONDS: Final = 0.25


def _wait(
    process: subprocess.Popen[bytes], request: bytes, timeout: float, cancel: threading.Event | None
) -> None:
    """Hand the child its request and wait for it to end, at most ``timeout`` seconds, killing it
    when the time budget passes or ``cancel`` is set."""
    deadline = time.monotonic() + timeout
    pending: bytes | None = request
    while True:
        left = deadline - time.monotonic()
        try:
            process.communicate(pending, timeout=max(0.0, min(_POLL_SECONDS, left)))
            return
        except subprocess.TimeoutExpired:
            pending = None  # communicate() keeps feeding what it was given first
        cancelled = cancel is not None and cancel.is_set()
        if cancelled or time.monotonic() >= deadline:
            process.kill()
            process.wait()
            if cancelled:
                raise CheckCancelledError("verl's checks were cancelled") from None
            raise VerlChildError(
                f"verl's checks did not finish within their time budget of {timeout:.0f} s in their "
                "sandbox (simplify spec.overrides)"
            ) from None


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
        if sum(len(c) for c in chunks) > 4 * 1024**2:
            raise VerlChildError("verl's checks answered more than 4 MiB from their sandbox")
    return b"".join(chunks)


def _decode(answer: bytes) -> tuple[list[Problem], list[str]]:
    try:
        loaded = json.loads(answer)
        problems = [Problem(str(path), str(message)) for path, message in loaded["problems"]]
        skipped = [str(note) for note in loaded["skipped"]]
    except (ValueError, KeyError, TypeError):
        raise VerlChildError("verl's checks gave no readable answer from their sandbox") from None
    if loaded.get("failed"):
        raise VerlChildError(f"verl's checks could not start in their sandbox: {loaded['failed']}")
    if loaded.get("unavailable"):
        from flashrl_jobs.verl_config import VerlConfigUnavailableError

        raise VerlConfigUnavailableError(str(loaded["unavailable"]))
    return problems, skipped


# --- child ----------------------------------------------------------------------------------------

#: Audit events refused outright in the child (a prefix ending in "." covers a family).
_REFUSED_EVENTS: Final = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.chdir",
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.symlink",
    "os.link",
    "os.chmod",
    "os.chown",
    "os.truncate",
    "os.utime",
    "shutil.",
    "ctypes.",
    "pty.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "webbrowser.",
    "sqlite3.",
    "winreg.",
)
#: Modules imported, when installed, before the audit hook is added (see :func:`child_main`): their
#: import loads shared libraries through ctypes (numpy, torch, ray) or makes directories (tensordict
#: imports torch._dynamo, which makes its cache directory under ``TMPDIR``), which the hook refuses.
#: The last three are installed where verl runs (the trainer image): verl's checks import them there.
_PRELOADED: Final = ("numpy", "torch", "ray", "tensordict")
#: File-system reads confined to the import roots.
_READ_EVENTS: Final = ("open", "os.listdir", "os.scandir", "glob.glob", "os.walk")


class SandboxRefusalError(PermissionError):
    """The child's audit hook refused an operation verl's checks have no reason to perform."""


def _limit(resource_module: Any, which: str, value: int) -> None:
    kind = getattr(resource_module, which, None)
    if kind is None:
        return
    _soft, hard = resource_module.getrlimit(kind)
    wanted = value if hard == resource_module.RLIM_INFINITY else min(value, hard)
    resource_module.setrlimit(kind, (wanted, wanted))


def _set_limits() -> None:
    import resource
    import signal

    # A write past the file-size limit fails with an error instead of killing the child.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _limit(resource, "RLIMIT_CPU", CPU_SECONDS)
    _limit(resource, "RLIMIT_AS", ADDRESS_SPACE_BYTES)
    _limit(resource, "RLIMIT_CORE", 0)


def _forbid_file_growth() -> None:
    import resource

    _limit(resource, "RLIMIT_FSIZE", 0)


#: The longest cause of a failed preload the parent repeats.
_CAUSE_CHARS: Final = 300


def _preload() -> str | None:
    """Import :data:`_PRELOADED` where installed; a sentence naming what failed, or None.

    Only an absent module (``ImportError``) is passed over. Anything else (a library that finds no
    writable temporary directory, a shared library that will not load within the limits) makes every
    check impossible, so it is reported with its cause: the text comes from installed code, run before
    anything of the job's is read.
    """
    for name in _PRELOADED:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        except Exception as exc:
            cause = f"{type(exc).__name__}: {exc}"
            return f"importing {name} failed ({cause[:_CAUSE_CHARS]})"
    return None


def _answer(out: int, answer: Mapping[str, Any]) -> None:
    payload = json.dumps(answer).encode()
    while payload:
        payload = payload[os.write(out, payload) :]
    os.close(out)
    sys.stdout.flush()
    os._exit(0)


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    if isinstance(flags, int):
        return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
    return False


#: Never readable, whatever the import roots are: where Kubernetes mounts ServiceAccount tokens and
#: Secrets.
_NEVER_READ: Final = ("/var/run/secrets", "/run/secrets")


def _audit_hook(roots: tuple[str, ...]) -> Any:
    def under(real: str, tops: Iterable[str]) -> bool:
        return any(real == top or real.startswith(top + os.sep) for top in tops)

    def within(path: Any) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return under(real, roots) and not under(real, _NEVER_READ)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_REFUSED_EVENTS):
            raise SandboxRefusalError(f"{event} is refused while verl's checks run")
        if event == "open":
            path, mode, flags = (*tuple(args), None, None, None)[:3]
            if _writes(mode, flags) or not within(path):
                raise SandboxRefusalError("open is refused here while verl's checks run")
        elif event in _READ_EVENTS and args and args[0] is not None and not within(args[0]):
            raise SandboxRefusalError(f"{event} is refused here while verl's checks run")

    return hook


def _import_roots() -> tuple[str, ...]:
    found = {os.path.realpath(p) for p in sys.path if p and Path(p).is_dir()}
    found.update(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix))
    # The project's packages wherever they are installed from (an editable install's source tree).
    for package in ("flashrl_api", "flashrl_jobs"):
        spec = importlib.util.find_spec(package)
        locations = (spec.submodule_search_locations or []) if spec is not None else []
        found.update(os.path.realpath(p) for p in locations)
    # The root directory itself would admit everything.
    return tuple(sorted(p for p in found if p != os.sep))


def child_main(request: Mapping[str, Any]) -> None:
    """The child's whole life: limit itself, lock itself in, check, answer on the pipe, exit."""
    out = int(sys.argv[1])
    _set_limits()
    failed = _preload()
    if failed is not None:
        _answer(out, {"problems": [], "skipped": [], "failed": failed})
    _forbid_file_growth()
    # The project's own modules are imported before the lock: an editable install maps them from a
    # source tree that is on no sys.path entry, so the hook would refuse their files.
    from flashrl_api.manifest import parse_job
    from flashrl_api.pins import load_pins
    from flashrl_jobs.verl_config import VerlConfigUnavailableError, check_config

    # The pins file too (a vLLM job's default image is read from it while the job is parsed): it is a
    # symbolic link out of the package, to images/pins.yaml, which the hook would refuse to open.
    load_pins()
    sys.addaudithook(_audit_hook(_import_roots()))
    answer: dict[str, Any] = {"problems": [], "skipped": []}
    try:
        job = parse_job(request["job"])
        result = check_config(job, model_files=False, model_config=request.get("model_config"))
        answer["problems"] = [[p.path, p.message] for p in result.problems]
        answer["skipped"] = list(result.skipped)
    except VerlConfigUnavailableError as exc:
        answer["unavailable"] = str(exc)
    except Exception as exc:
        answer["problems"] = [["spec", f"verl's checks failed in their sandbox with {type(exc).__name__}"]]
    _answer(out, answer)
