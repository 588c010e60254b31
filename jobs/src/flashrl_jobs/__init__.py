"""In-pod launcher for FlashRLJobs: config first, then a Ray readiness gate, then verl.

Shares the typed API models with the operator (``flashrl_api``) and never imports the operator.
"""
