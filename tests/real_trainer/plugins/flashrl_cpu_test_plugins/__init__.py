"""Test-only plugins that let verl 0.9.1 and vLLM's CPU build run on a machine with no GPU.

Never part of the product or its images: the real-trainer tier puts this directory, and a distribution
record declaring the two entry points below, on the Ray head's ``PYTHONPATH``
(``tests/real_trainer/trainer_env.py``), so every process verl starts loads them.

* ``verl.plugins`` -> :mod:`.verl_cpu`, which calls :func:`register_verl` on import (verl loads the
  entry point and calls nothing): verl has no CPU platform (its platform manager knows nvidia,
  huawei and amd and falls back to nvidia); this registers ``cpu`` (``VERL_PLATFORM=cpu``): gloo,
  ``torch.device("cpu")``, and Ray's ``GPU`` resource, which verl's worker pools always ask for. verl then
  builds the process-group backend ``cpu:gloo,cpu:gloo``, which torch refuses: the wrapper asks for gloo.
* ``vllm.general_plugins`` -> :func:`register_vllm`: vLLM's CPU build packs linear weights for oneDNN and
  empties ``layer.weight``, so verl's weight sync would write into a tensor nothing reads (and then hang);
  turning the packing off keeps ``F.linear`` on the live weight.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


class _CpuDevice:
    """``torch.cpu`` with the CUDA-module calls verl makes on its device module (memory statistics, cache
    release, RNG state), answered as a CPU would: nothing cached, nothing reserved."""

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch.cpu, name)

    def empty_cache(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def memory_reserved(self, device: Any = None) -> int:
        return 0

    def memory_allocated(self, device: Any = None) -> int:
        return 0

    def max_memory_reserved(self, device: Any = None) -> int:
        return 0

    def max_memory_allocated(self, device: Any = None) -> int:
        return 0

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        return None

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        return None

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    def get_rng_state(self, device: Any = None) -> Any:
        return self._torch.get_rng_state()

    def set_rng_state(self, state: Any, device: Any = None) -> None:
        self._torch.set_rng_state(state)

    def get_device_name(self, device: Any = None) -> str:
        return "cpu"

    def set_device(self, device: Any) -> None:
        return None

    def device_count(self) -> int:
        return 1

    def is_available(self) -> bool:
        return True


def register_verl() -> None:
    """Register the ``cpu`` platform with verl and make its process groups plain gloo."""
    import torch
    import verl.utils.distributed as distributed
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> Any:
            return _CpuDevice()

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

        def current_device(self) -> Any:
            # verl moves tensors with ``.to(get_device_id())``: an index would mean cuda:<index>.
            return torch.device("cpu")

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_flashrl_cpu", False):
        return

    def gloo_process_group(timeout_second: int | None = None, backend: str | None = None) -> None:
        if backend is None or "," in backend:
            backend = "gloo"
        original(timeout_second=timeout_second, backend=backend)

    gloo_process_group._flashrl_cpu = True  # type: ignore[attr-defined]
    distributed.initialize_global_process_group_ray = gloo_process_group


def register_vllm() -> None:
    """Keep vLLM's CPU linear layers on their live ``weight`` (no oneDNN packing)."""
    import vllm._custom_ops as ops

    ops._supports_onednn = False
