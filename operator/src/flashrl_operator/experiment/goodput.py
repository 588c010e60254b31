"""Each variant's goodput in the FlashRLExperiment status (pure): GPU-hours, productive fraction, and
its speed-up over the baseline variant end to end and in generation alone.

The baseline is the first variant whose rollout is bf16 (with replicas, its replica with the same
index: the two share a seed). The numbers come from the variants'
``status.goodput`` (the operator's ledger of each FlashRLJob) and ``status.progress.step``; the
arithmetic is :func:`flashrl_api.goodput.compare`, the same as ``flashrl report``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flashrl_api import FlashRLJob
from flashrl_api.experiment import REPLICA_LABEL, VariantStatus
from flashrl_api.goodput import Ledger, compare, ledger_of

#: The rollout precision the speed-ups are measured against.
BASELINE_QUANTIZATION = "bf16"


def _ledger(child: Mapping[str, Any] | None) -> tuple[Ledger, int] | None:
    status = (child or {}).get("status") or {}
    goodput = status.get("goodput") or {}
    by_phase = goodput.get("byPhase") if isinstance(goodput, Mapping) else None
    if not isinstance(by_phase, list):
        return None
    step = (status.get("progress") or {}).get("step")
    return ledger_of(by_phase), step if isinstance(step, int) else 0


def with_goodput(
    statuses: Sequence[VariantStatus], jobs: Sequence[FlashRLJob], children: Mapping[str, Mapping[str, Any]]
) -> list[VariantStatus]:
    """``statuses`` with each variant's goodput fields filled from its job (unchanged without a ledger)."""
    ledgers = [_ledger(children.get(job.name)) for job in jobs]
    # With replicas, replica k is compared with the baseline's replica k (they share a seed).
    base_of: dict[str | None, int] = {}
    for i, job in enumerate(jobs):
        if job.spec.rollout.quantization == BASELINE_QUANTIZATION:
            base_of.setdefault(job.metadata.get("labels", {}).get(REPLICA_LABEL), i)
    out = []
    for index, (status, found) in enumerate(zip(statuses, ledgers, strict=True)):
        base_index = base_of.get(jobs[index].metadata.get("labels", {}).get(REPLICA_LABEL))
        base = ledgers[base_index] if base_index is not None else None
        if found is None:
            out.append(status)
            continue
        ledger, steps = found
        update: dict[str, Any] = {
            "held_gpu_hours": round(ledger.held_gpu_seconds / 3600, 3),
            "productive_fraction": (
                round(ledger.productive_fraction, 4) if ledger.productive_fraction is not None else None
            ),
        }
        if base is not None and index != base_index:
            comparison = compare(ledger, steps, base[0], base[1])
            if comparison is not None:
                update["end_to_end_speedup"] = round(comparison.end_to_end, 3)
                update["generation_speedup"] = round(comparison.generation, 3)
                update["speedup_phase"] = str(comparison.decisive) if comparison.decisive else None
        out.append(status.model_copy(update=update))
    return out
