"""GPU products by compute capability: the one table ``resources.gpuProduct`` is judged against.

FP8 tensor cores arrived with compute capability 8.9 (Ada: L4, L40, L40S, L20, RTX 4090) and 9.0
(Hopper: H100, H800, H20, H200). On older GPUs (A100, A10, V100, T4, ...) SGLang's FP8 GEMMs have no
hardware path, so an FP8 rollout there fails when the servers start, after the whole cluster came
up; the same check holds for vLLM (``rollout.engine: vllm``), whose FP8 on such GPUs would be a
weight-only fallback, not the FP8 rollout the correction is measured against. ``gpuProduct``
is the ``nvidia.com/gpu.product`` label GPU Feature Discovery sets: NVML's product name with spaces
replaced by ``-`` (``NVIDIA-H20``, ``NVIDIA-A100-SXM4-80GB``, ``Tesla-T4``), sometimes followed by
``-SHARED`` under time-slicing; each family is therefore matched by a regular expression on the name's
start (RE2 syntax, so the CEL rule in the CRD uses the very same patterns).

Compute capabilities: https://developer.nvidia.com/cuda-gpus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

#: First compute capability with FP8 (E4M3/E5M2) tensor cores.
FP8_MIN_CAPABILITY: Final = (8, 9)

_VENDOR = r"(?i)^(NVIDIA-|Tesla-|Quadro-)?"
_END = r"([-_.]|$)"


@dataclass(frozen=True)
class GpuFamily:
    """Products sharing a compute capability."""

    name: str
    capability: tuple[int, int]
    #: RE2/Python pattern matched (``search``) against the product label.
    pattern: str

    @property
    def has_fp8(self) -> bool:
        """Whether this family has FP8 tensor cores."""
        return self.capability >= FP8_MIN_CAPABILITY


def _family(name: str, capability: tuple[int, int], models: str) -> GpuFamily:
    return GpuFamily(name, capability, f"{_VENDOR}({models}){_END}")


#: Known families, newest first. A product matching none is unknown (accepted, with a warning).
GPU_FAMILIES: Final[tuple[GpuFamily, ...]] = (
    _family(
        "Blackwell", (10, 0), r"B100|B200|GB200|B300|GB300|RTX-PRO-[0-9]+-Blackwell.*|GeForce-RTX-50[0-9]0.*"
    ),
    _family("Hopper", (9, 0), r"H100|H800|H20|H200|GH200"),
    _family("Ada", (8, 9), r"L4|L40|L40S|L20|L2|RTX-[0-9]+-Ada.*|GeForce-RTX-40[0-9]0.*"),
    _family("Ampere GA10x", (8, 6), r"A10|A10G|A10M|A16|A2|A40|RTX-A[0-9]+|GeForce-RTX-30[0-9]0.*"),
    _family("Ampere GA100", (8, 0), r"A100|A800|A30"),
    _family("Turing", (7, 5), r"T4|T4G|Quadro-RTX-[0-9]+|GeForce-RTX-20[0-9]0.*"),
    _family("Volta", (7, 0), r"V100|V100S"),
    _family("Pascal GP10x", (6, 1), r"P40|P4|P6"),
    _family("Pascal GP100", (6, 0), r"P100"),
    _family("Maxwell", (5, 2), r"M60|M40|M10|M4"),
    _family("Kepler", (3, 7), r"K80|K40|K20"),
)

#: One pattern matching every product without FP8 tensor cores (for the CRD's CEL rule).
NO_FP8_PATTERN: Final = (
    _VENDOR
    + "("
    + "|".join(f"({f.pattern.removeprefix(_VENDOR)})" for f in GPU_FAMILIES if not f.has_fp8)
    + ")"
)


def gpu_family(product: str) -> GpuFamily | None:
    """The family of a ``nvidia.com/gpu.product`` label value, or None when it is not in the table."""
    for family in GPU_FAMILIES:
        if re.search(family.pattern, product):
            return family
    return None


def lacks_fp8(product: str) -> bool:
    """True only for a known product below compute capability 8.9 (unknown products get the benefit of
    the doubt)."""
    return re.search(NO_FP8_PATTERN, product) is not None


#: The ``nvidia.com/gpu.product`` values GPU Feature Discovery writes for the FP8-capable products, by
#: the short name people call them. GFD (now part of NVIDIA/k8s-device-plugin) labels a node with the
#: device name NVML reports (what ``nvidia-smi --query-gpu=name`` prints, e.g. "NVIDIA H100 80GB HBM3")
#: with each space replaced by ``-``; the names below are those NVML names for each product's boards.
#: A node selector on the short name (``H20``) matches no node, so such a spec is refused with these.
GFD_PRODUCT_LABELS: Final[dict[str, tuple[str, ...]]] = {
    "H20": ("NVIDIA-H20",),
    "H100": ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"),
    "H800": ("NVIDIA-H800", "NVIDIA-H800-PCIe"),
    "H200": ("NVIDIA-H200", "NVIDIA-H200-NVL"),
    "GH200": ("NVIDIA-GH200-480GB", "NVIDIA-GH200-144G-HBM3e"),
    "L4": ("NVIDIA-L4",),
    "L40": ("NVIDIA-L40",),
    "L40S": ("NVIDIA-L40S",),
    "L20": ("NVIDIA-L20",),
    "B200": ("NVIDIA-B200",),
    "GB200": ("NVIDIA-GB200",),
}
#: Every label value in :data:`GFD_PRODUCT_LABELS`.
GFD_LABEL_VALUES: Final = tuple(v for values in GFD_PRODUCT_LABELS.values() for v in values)
_VENDOR_PREFIX = "NVIDIA-"
#: What a user may write for a known product that is not the label value itself: the short name, the
#: label without its vendor prefix, any of them in another case (label values are case-sensitive).
_NOT_LABELS: Final[dict[str, tuple[str, ...]]] = {
    **{v.removeprefix(_VENDOR_PREFIX).casefold(): (v,) for v in GFD_LABEL_VALUES},
    **{v.casefold(): (v,) for v in GFD_LABEL_VALUES},
    **{short.casefold(): values for short, values in GFD_PRODUCT_LABELS.items()},
    **{(_VENDOR_PREFIX + short).casefold(): values for short, values in GFD_PRODUCT_LABELS.items()},
}
#: RE2 for the CEL rule: a product spelled like a known one, in any case, with or without "NVIDIA-".
NOT_A_LABEL_PATTERN: Final = (
    "(?i)^(NVIDIA-)?("
    + "|".join(
        sorted(
            {*GFD_PRODUCT_LABELS, *(v.removeprefix(_VENDOR_PREFIX) for v in GFD_LABEL_VALUES)},
            key=lambda name: (-len(name), name),
        )
    )
    + ")$"
)


def label_values_for(product: str) -> tuple[str, ...]:
    """The label values GFD writes for what ``product`` names, when ``product`` is a short name or a
    misspelled case of one (``H20``, ``h20``, ``nvidia-h20``); empty for a label value itself and for
    products not in :data:`GFD_PRODUCT_LABELS`."""
    if product in GFD_LABEL_VALUES:
        return ()
    return _NOT_LABELS.get(product.casefold(), ())
