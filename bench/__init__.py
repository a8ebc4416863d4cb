"""Side-by-side benchmark of bytegraph against torch.compile (``make bench``).

``bench/run.py`` is the driver; every measurement runs in a fresh
``python -m bench.worker`` subprocess; the workloads live in
``bench/workloads.py``.
"""
