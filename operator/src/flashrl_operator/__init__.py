"""The FlashRL operator: reconciles FlashRLJobs into KubeRay RayJobs and reports their status.

Layers: ``flashrl_api`` (models) <- ``render`` and ``crd`` (pure) <- ``status_mapping`` and
``conditions`` (pure) <- ``kube`` (the only module doing I/O) <- ``handlers`` (thin kopf wiring)
<- ``runner`` / ``cli``.
"""
