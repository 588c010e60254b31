"""The cluster the tests run on, for people too: the real control plane as processes, KubeRay's own
operator and kwok's simulated H20 nodes, the chart and the operator from this clone.

Shared by ``tests/envtest`` (the tests' fixtures), the kwok e2e and ``make dev-cluster``
(:mod:`flashrl_devcluster.__main__`). Not part of the distribution: nothing of ``flashrl_*`` imports it.
"""
