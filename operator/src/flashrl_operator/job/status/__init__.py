"""A FlashRLJob's status from what one reconcile observed (pure): phase, conditions, attempts,
goodput, and why KubeRay, the pods or the launcher say it failed.
"""
