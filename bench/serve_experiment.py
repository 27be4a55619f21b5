"""``posthaste serve`` with the experiments named in ``POSTHASTE_BENCH_EXPERIMENTS`` applied
(comma-separated; see ``bench/experiments.py``). Used by ``python -m bench.run --experiment``."""

from __future__ import annotations

import os

from bench import experiments


def main() -> int:
    names = [n for n in os.environ.get(experiments.ENV, "").split(",") if n]
    experiments.apply(names)
    from posthaste.cli import main as posthaste_main

    return posthaste_main(["serve"])


if __name__ == "__main__":
    raise SystemExit(main())
