"""Environment variables the engines need inside the Ray pods (pure).

Only variables that the pinned versions actually read are set; each has a reason.
"""

from __future__ import annotations

from flashrl_api import FlashRLJobSpec


def pod_env(spec: FlashRLJobSpec) -> dict[str, str]:
    """Environment for every Ray container (head and GPU workers) of a job."""
    env = {
        # Hugging Face downloads land on the model cache volume, shared across jobs.
        "HF_HOME": spec.storage.model_cache.mount_path,
        # Fail NCCL collectives loudly instead of hanging forever on a lost peer.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "NCCL_DEBUG": "WARN",
        # Python output unbuffered so `kubectl logs` and the Ray job log show progress as it happens.
        "PYTHONUNBUFFERED": "1",
    }
    return env
