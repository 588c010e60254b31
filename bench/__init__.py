"""Benchmarks (not tests): ``python -m bench`` runs them and writes docs/benchmarks.md."""
