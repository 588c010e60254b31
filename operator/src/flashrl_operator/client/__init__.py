"""The Kubernetes access layer: the one client the operator's requests go through, its credentials,
and the errors it raises (independent of any client library).
"""
