"""The FlashRL operator: reconciles FlashRLJobs into KubeRay RayJobs and reports their status.

Its folders are its layers, top to bottom (docs/architecture.md draws them; an import contract
keeps them): ``cli`` ─ ``sim`` ─ ``run`` ─ ``experiment`` ─ ``job`` (with its pure ``status``) ─
``client | render | generate`` ─ ``vocab``. A folder imports only the folders below it.
"""
