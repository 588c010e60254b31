"""One FlashRLJob: the reconcile (the only module here that does I/O) and the pure decisions it
calls: attempts and retries, staging, the admin's policy, what the cluster must provide.
"""
