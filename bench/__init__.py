"""Posthaste benchmarks: accept rates and latency of the REST API beside a raw-insert baseline.

Run with ``python -m bench.run`` (or ``make bench``); see ``bench/README.md``.
"""
