"""Import verl's config-validation modules where torch is not installed.

verl's start-up checks live in plain-Python modules (the config dataclasses in
``verl/trainer/config/*.py`` and ``verl/workers/config/*.py``, ``verl/utils/config.py``), but Python
can only reach them through package ``__init__`` files that import torch (``verl/__init__.py`` via
``verl.protocol``, ``verl/utils/__init__.py`` via ``groupwise``, ``verl/utils/profiler/__init__.py`` via
``device``, ``verl/utils/qat/__init__.py`` via ``core``), and a few modules import torch or transformers
at the top for functions the checks never call. :func:`verl_sandbox` therefore, for its duration:

* registers those packages as bare packages (their ``__path__`` only) that re-export just what their
  ``__init__`` would from the torch-free submodules (``ProfilerConfig``, ``QATConfig``, ...), so the
  submodules themselves are imported from verl's own files and run unchanged;
* serves every module that cannot be imported here (torch, transformers, numpy, ...) as a
  placeholder whose attributes can be named (type hints, base-class lookups at import time) but
  whose use raises :class:`VerlUnavailableError`, so no check can pass by touching a placeholder:
  it fails loudly and the caller reports that check as not run;
* restores ``sys.modules`` afterwards (verl's modules and the placeholders are dropped), so nothing of
  this leaks into the rest of the process (the operator, the launcher, the CLI).

Where torch *is* installed (the trainer image) the real packages are imported as usual. Hand-written
because no library imports one subpackage while skipping its parents' ``__init__``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from typing import Any, Final

#: Top-level distributions verl's config modules import but whose code the checks never run.
HEAVY: Final = (
    "torch",
    "transformers",
    "numpy",
    "tensordict",
    "transfer_queue",
    "torchdata",
    "PIL",
    "peft",
    "datasets",
)
#: verl modules that execute torch at import time and are only imported, never used, by the checks.
VERL_PLACEHOLDERS: Final = (
    "verl.utils.device",
    "verl.utils.fs",
    "verl.utils.model",
    "verl.utils.torch_functional",
    "verl.protocol",
)
#: Packages whose ``__init__`` imports torch: name -> {attribute: submodule it is re-exported from}.
BARE_PACKAGES: Final[dict[str, dict[str, str]]] = {
    "verl": {},
    "verl.utils": {
        "omega_conf_to_dataclass": "verl.utils.config",
        "validate_config": "verl.utils.config",
        "hf_processor": "verl.utils.tokenizer",
        "hf_tokenizer": "verl.utils.tokenizer",
    },
    "verl.utils.profiler": {"ProfilerConfig": "verl.utils.profiler.config"},
    "verl.utils.qat": {"QATConfig": "verl.utils.qat.core"},
    "verl.trainer.ppo.v1": {},
}

_LOCK = threading.RLock()


class VerlUnavailableError(RuntimeError):
    """A check reached code that needs a library (torch, transformers, ...) not installed here."""


class _Placeholder:
    """Stands in for an object of an uninstalled library: nameable, never usable."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise VerlUnavailableError(f"{self._name} is not available without its library")

    def __getitem__(self, item: Any) -> _Placeholder:
        return self

    def __or__(self, other: Any) -> _Placeholder:
        return self

    def __ror__(self, other: Any) -> _Placeholder:
        return self

    def __bool__(self) -> bool:
        raise VerlUnavailableError(f"{self._name} is not available without its library")

    def __repr__(self) -> str:
        return f"<unavailable {self._name}>"


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, attr: str) -> _Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}")


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: Sequence[str]) -> None:
        self._names = tuple(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in self._names or fullname.split(".")[0] in self._names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _missing(names: Sequence[str]) -> list[str]:
    out = []
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                out.append(name)
        except (ImportError, ValueError):
            out.append(name)
    return out


@contextlib.contextmanager
def verl_sandbox() -> Iterator[None]:
    """verl's config modules importable (see the module docstring); ``sys.modules`` restored on exit."""
    with _LOCK:
        before = dict(sys.modules)
        heavy_missing = _missing(HEAVY)
        finder: _PlaceholderFinder | None = None
        try:
            if heavy_missing:
                root = importlib.util.find_spec("verl")
                if root is None or not root.submodule_search_locations:
                    raise VerlUnavailableError("verl is not installed")
                base = next(iter(root.submodule_search_locations))
                finder = _PlaceholderFinder([*heavy_missing, *VERL_PLACEHOLDERS])
                sys.meta_path.insert(0, finder)
                for package in BARE_PACKAGES:
                    bare = types.ModuleType(package)
                    location = base + package.removeprefix("verl").replace(".", "/")
                    bare.__path__ = [location]
                    bare.__spec__ = importlib.machinery.ModuleSpec(package, None, is_package=True)
                    bare.__spec__.submodule_search_locations = [location]
                    sys.modules[package] = bare
                for package, exports in BARE_PACKAGES.items():
                    for attr, source in exports.items():
                        setattr(sys.modules[package], attr, getattr(importlib.import_module(source), attr))
            yield
        finally:
            if finder is not None:
                sys.meta_path.remove(finder)
            for name, module in list(sys.modules.items()):
                # verl's modules and the placeholders go; a real library imported meanwhile (torch in
                # the trainer image) stays, since extension modules cannot be imported twice.
                if name not in before and (
                    name.split(".")[0] == "verl" or isinstance(module, _PlaceholderModule)
                ):
                    del sys.modules[name]
            sys.modules.update(
                {name: module for name, module in before.items() if name.split(".")[0] == "verl"}
            )


def verl_module(name: str) -> types.ModuleType:
    """Import one verl module; call inside :func:`verl_sandbox`."""
    return importlib.import_module(name)
