"""Names of things, shared by every layer: KubeRay's vocabulary, every kind the operator touches
and where it lives in the REST API, and the operator's metrics. No decisions, no requests.
"""
