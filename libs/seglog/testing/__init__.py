"""Helpers for seglog's tests and benchmarks (not used by the services)."""
