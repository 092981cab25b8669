"""Runnable examples of data pipelines on seglog (copy them as a starting point)."""
