"""One FlashRLExperiment: its reconcile (I/O) and the pure plan and goodput comparison it calls."""
