"""Runnable examples for bytegraph (importable so tests can reuse the demo model)."""
