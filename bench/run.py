"""``python -m bench.run``: every benchmark on SQLite and PostgreSQL, beside the raw baseline.

For each backend: the raw-insert baselines on a fresh database, then a real ``posthaste serve``
(API role) on another fresh database, loaded over HTTP from this process. Prints markdown
tables and writes ``bench/results/<timestamp>.json``. ``--profile`` instead samples the server
with py-spy under the single-send and the batch load (see ``bench/profile.py``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from bench import baseline, experiments, profile, report, scenarios, server
from bench.stats import Measurement

RESULTS = Path(__file__).resolve().parent / "results"
T = TypeVar("T")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per measurement")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds first")
    parser.add_argument("--quick", action="store_true", help="3 s measurements, 1 s warm-up")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batch-concurrency", type=int, default=4)
    parser.add_argument("--rate", type=float, default=500.0, help="open-loop requests/s")
    parser.add_argument(
        "--api-processes",
        type=int,
        default=1,
        help="server processes on the same database, clients spread over them (default 1)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="sample the server with py-spy instead"
    )
    parser.add_argument(
        "--experiment",
        action="append",
        choices=experiments.NAMES,
        default=[],
        help="a candidate optimisation to measure (repeatable; see bench/experiments.py)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = 3.0, 1.0
    return args


def client_runner() -> tuple[str, Callable[[Coroutine[Any, Any, T]], T]]:
    """The load generator runs on uvloop when available, to leave the server more CPU."""
    try:
        import uvloop
    except ImportError:
        return "asyncio", experiments.runner(())
    return "uvloop", uvloop.run


def _plan(args: argparse.Namespace) -> scenarios.Plan:
    return scenarios.Plan(
        duration=args.duration,
        warmup=args.warmup,
        concurrency=args.concurrency,
        batch_concurrency=args.batch_concurrency,
        rate=args.rate,
    )


def _server(backend: server.Backend, args: argparse.Namespace) -> Any:
    if not args.experiment:
        return server.running(backend, processes=args.api_processes)
    env = {experiments.ENV: ",".join(args.experiment)}
    command = ("-m", "bench.serve_experiment")
    return server.running(backend, command, env, processes=args.api_processes)


def run_backend(name: str, args: argparse.Namespace, stamp: str) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix=f"posthaste-bench-{name}-") as tmp,
        server.prepared(name, Path(tmp)) as backend,
    ):
        if args.profile:
            return _profiled(backend, args, RESULTS / f"{stamp}-{name}")
        return _measured(backend, args)


def _measured(backend: server.Backend, args: argparse.Namespace) -> dict[str, Any]:
    plan = _plan(args)
    _, run_client = client_runner()
    print(f"[{backend.name}] raw-insert baselines ...", flush=True)
    results: list[Measurement] = experiments.runner(args.experiment)(
        baseline.run(
            backend.raw_async_url,
            duration=plan.duration,
            warmup=plan.warmup,
            single_concurrency=plan.concurrency,
            batch_size=plan.batch_size,
            batch_concurrency=plan.batch_concurrency,
        )
    )
    print(f"[{backend.name}] HTTP load ...", flush=True)
    with _server(backend, args) as running:
        results += run_client(scenarios.all_of(running, plan))
    return {"measurements": results, "targets": report.targets(results)}


def _profiled(backend: server.Backend, args: argparse.Namespace, stem: Path) -> dict[str, Any]:
    plan = _plan(args)
    _, run_client = client_runner()
    paths = {"single": Path(f"{stem}-single.txt"), "batch": Path(f"{stem}-batch.txt")}
    print(f"[{backend.name}] single sends and batches under py-spy ...", flush=True)
    with _server(backend, args) as running:
        results = [
            run_client(scenarios.single_sends(running, plan, paths["single"])),
            run_client(scenarios.batches(running, plan, paths["batch"])),
        ]
    profiles = {
        load: {"samples_file": str(path), **profile.read(path).as_dict()}
        for load, path in paths.items()
    }
    return {"measurements": results, "targets": [], "profiles": profiles}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile and profile.py_spy() is None:
        print("--profile needs py-spy: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    experiments.apply(args.experiment)  # the baseline runs in this process
    stamp = time.strftime("%Y%m%d-%H%M%S")
    loop_name, _ = client_runner()
    document: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "bench.run", *(argv or sys.argv[1:])]),
        "started": stamp,
        "machine": report.machine(loop_name),
        "settings": vars(args),
        "backends": {},
    }
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for name in backends:
        outcome = run_backend(name, args, stamp)
        document["backends"][name] = outcome
        title = name + "".join(f" +{e}" for e in args.experiment)
        if args.api_processes > 1:
            title += f", {args.api_processes} API processes"
        print("\n" + report.table(title, outcome["measurements"]) + "\n", flush=True)
        for load, summary in outcome.get("profiles", {}).items():
            print(f"--- {name}, {load} load ---")
            print(profile.render(profile.read(Path(summary["samples_file"]))) + "\n")
    path = RESULTS / f"{stamp}.json"
    report.write_json(path, document)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
