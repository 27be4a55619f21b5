"""What the metrics cost the send path (issue #23): the instruments a REST send touches, alone,
and whole REST sends with the instruments on and off.

``python -m bench.metrics_cost`` prints three measurements:

- ``micro``: the instrument work of one REST send (one ``posthaste_http_request_seconds``
  observation and one ``posthaste_emails_accepted_total`` increment), in memory (one process)
  and in prometheus_client's multiprocess mode (an mmap'ed file per process, as under the
  supervisor): the fastest of 7 runs of 20,000.
- ``callgrind``: the same work counted in instructions by valgrind (``--callgrind``; steady on
  a busy machine, where times are not): the difference between a run doing 20,000 and a run
  doing none, per send.
- ``sends``: whole ``POST /emails`` through the app in this process on SQLite, CPU seconds per
  send with the instruments and with no-op ones, alternating rounds (median of 7 rounds each).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CALLS = 20_000
SEND_ROUNDS = 7
SENDS_PER_ROUND = 200


def _instrument_work(calls: int) -> None:
    from posthaste.services.metrics import Metrics

    metrics = Metrics()
    for _ in range(calls):
        metrics.http_request("/emails", 200, 0.0021)
        metrics.email_accepted("api", "transactional")


def micro(multiprocess: bool) -> float:
    """Seconds per send of the instrument work (in a child process: the mode is chosen when
    prometheus_client is imported)."""
    code = (
        "import timeit; from bench.metrics_cost import _instrument_work as w; "
        f"print(min(timeit.repeat(lambda: w({CALLS}), number=1, repeat=7)) / {CALLS})"
    )
    with tempfile.TemporaryDirectory() as directory:
        env = _env(directory if multiprocess else None)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    out.check_returncode()
    return float(out.stdout.strip())


def callgrind(multiprocess: bool) -> float:
    """Instructions per send of the instrument work: a run of ``CALLS`` minus a run of none."""
    counts = []
    for calls in (0, CALLS):
        with tempfile.TemporaryDirectory() as directory:
            code = f"from bench.metrics_cost import _instrument_work as w; w({calls})"
            counts.append(_instructions(code, directory if multiprocess else None))
    return (counts[1] - counts[0]) / CALLS


def _env(directory: str | None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    if directory is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = directory
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1] / "src"), "."])
    return env


async def sends() -> tuple[float, float]:
    """CPU seconds per REST send with the instruments, and with no-op ones."""
    from posthaste.bootstrap import migrate
    from posthaste.config import Settings

    with tempfile.TemporaryDirectory() as directory:
        settings = Settings(data_dir=Path(directory), secret_key="b" * 40)
        await migrate(settings)
        timings: dict[bool, list[float]] = {True: [], False: []}
        for on in [True, False] * SEND_ROUNDS:
            timings[on].append(await _send_round(settings, SENDS_PER_ROUND, on) / SENDS_PER_ROUND)
    return statistics.median(timings[True]), statistics.median(timings[False])


async def _send_round(settings: Any, count: int, on: bool) -> float:
    """CPU seconds of ``count`` REST sends, through the app in this process."""
    import httpx

    from posthaste.api.app import create_app
    from posthaste.bootstrap import build_services
    from posthaste.core.api_keys import NewApiKey
    from posthaste.core.models import KeyMode
    from posthaste.services.metrics import Metrics

    class NoMetrics(Metrics):
        def http_request(self, route: str, status: int, seconds: float) -> None:
            pass

        def email_accepted(self, origin: str, stream_type: str) -> None:
            pass

    services = build_services(settings)
    if not on:
        services.metrics = NoMetrics()
        services.sending.metrics = services.metrics
    team = await services.teams.create_team(f"t{time.time_ns()}", 0, 0)
    key = await services.api_keys.create(team.id, NewApiKey("k", KeyMode.TEST))
    headers = {"Authorization": f"Bearer {key.token}"}
    body = {"from": "a@acme.test", "to": "b@example.com", "subject": "s", "text": "t"}
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://b.test") as client:
        await client.post("/emails", json=body, headers=headers)  # warm
        started = time.process_time()
        for _ in range(count):
            answer = await client.post("/emails", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
        spent = time.process_time() - started
    await services.close()
    return spent


def _callgrind_sends(directory: str, count: int, on: bool) -> None:
    """(In a child under valgrind) ``count`` sends on an already migrated database."""
    from posthaste.config import Settings

    settings = Settings(data_dir=Path(directory), secret_key="b" * 40)
    asyncio.run(_send_round(settings, count, on))


def callgrind_sends(count: int) -> dict[bool, float]:
    """Instructions per REST send with the instruments and with no-op ones: a run of
    ``count`` sends minus a run of none, each under valgrind."""
    from posthaste.bootstrap import migrate
    from posthaste.config import Settings

    per_send: dict[bool, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(migrate(Settings(data_dir=Path(directory), secret_key="b" * 40)))
        for on in (True, False):
            counts = []
            for n in (0, count):
                code = (
                    "from bench.metrics_cost import _callgrind_sends as s; "
                    f"s({directory!r}, {n}, {on})"
                )
                counts.append(_instructions(code, None))
            per_send[on] = (counts[1] - counts[0]) / count
    return per_send


def _instructions(code: str, multiprocess_dir: str | None) -> int:
    with tempfile.TemporaryDirectory() as directory:
        out_file = Path(directory) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}"]
        command += [sys.executable, "-c", code]
        env = {**_env(multiprocess_dir), "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        done.check_returncode()
        found = re.search(r"Collected : (\d+)", done.stderr)
        assert found is not None, done.stderr
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--callgrind", action="store_true", help="count instructions too")
    parser.add_argument(
        "--callgrind-sends", type=int, default=0, help="also count whole REST sends (slow)"
    )
    args = parser.parse_args()
    for multiprocess in (False, True):
        mode = "multiprocess (mmap)" if multiprocess else "one process (memory)"
        print(f"micro, {mode}: {micro(multiprocess) * 1e6:.2f} µs per send")
        if args.callgrind:
            print(f"callgrind, {mode}: {callgrind(multiprocess):,.0f} instructions per send")
    with_metrics, without = asyncio.run(sends())
    print(
        f"REST send, CPU per send: {with_metrics * 1e6:.0f} µs with the instruments, "
        f"{without * 1e6:.0f} µs with no-op ones ({(with_metrics / without - 1) * 100:+.1f} %)"
    )
    if args.callgrind_sends:
        counted = callgrind_sends(args.callgrind_sends)
        on, off = counted[True], counted[False]
        print(
            f"callgrind, REST send: {on:,.0f} instructions with the instruments, {off:,.0f} "
            f"with no-op ones ({on - off:+,.0f}, {(on / off - 1) * 100:+.2f} %)"
        )


if __name__ == "__main__":
    main()
