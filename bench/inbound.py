"""``python -m bench.inbound``: the inbound MX's acceptance, beside a bare aiosmtpd server's.

For each backend: a real ``posthaste serve --role inbound`` on a fresh database with one
receiving domain (``inbound.bench``, its records marked verified in the database: no DNS), and,
in the same run, a bare aiosmtpd server with the same certificate and STARTTLS whose DATA
handler only answers 250 (what aiosmtpd itself costs); then Postfix where it is installed
(``bench/postfix.py``: accepting with STARTTLS and keeping every message on hold, as the
inbound server stores a message and answers). The load generator is ``bench.relay``'s:
``--connections`` aiosmtplib connections (16 by default), each doing STARTTLS once and then
sending messages back to back (about 2 KB, text and html, a new recipient at the receiving
domain each), without AUTH, as MX traffic comes. Each 250 counts once the message is stored
(parsed, its raw kept, its ``email.received`` event written). Prints a markdown table and
writes ``bench/results/inbound-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

from bench import postfix, server
from bench.relay import Figures, Target, _measured, _process, sink_server, table

DOMAIN = "inbound.bench"
RESULTS = Path(__file__).resolve().parent / "results"


async def _receiving_domain(env: dict[str, str]) -> None:
    """A team with ``DOMAIN`` receiving and verified, written as a verify would leave it."""
    from posthaste.bootstrap import build_services
    from posthaste.config import Settings
    from posthaste.core.api_keys import NewApiKey
    from posthaste.core.domain_requests import parse_new_domain
    from posthaste.core.domains import RecordStatus
    from posthaste.core.ids import now_ms
    from posthaste.core.models import KeyMode
    from posthaste.storage import domains as domains_repo

    services = build_services(Settings.load(env))
    try:
        team = await services.teams.create_team("bench", 0, 0)
        key = await services.api_keys.create(team.id, NewApiKey("bench", KeyMode.LIVE))
        principal = await services.api_keys.authenticate(key.token)
        regions = [region["name"] for region in services.domains.regions()]
        new = parse_new_domain({"name": DOMAIN, "receiving": True}, regions)
        domain = await services.domains.create(principal, new)
        verified = replace(
            domain,
            status=RecordStatus.VERIFIED,
            verified_at=now_ms(),
            records=tuple(replace(r, status=RecordStatus.VERIFIED) for r in domain.records),
        )
        async with services.db.transaction() as tx:
            await domains_repo.update_domain(tx, verified)
    finally:
        await services.close()


@contextlib.contextmanager
def inbound_server(backend: server.Backend) -> Iterator[tuple[int, int, Path]]:
    """``posthaste serve --role inbound``: its pid, its port and its certificate."""
    backend.data_dir.mkdir(parents=True, exist_ok=True)
    port = server.free_port()
    env = {
        **server.server_env(backend, server.free_port()),
        "POSTHASTE_ROLE": "inbound",
        "POSTHASTE_SMTP_INBOUND_PORT": str(port),
    }
    args = [sys.executable, *server.SERVE]
    with _process(args, env, backend.workdir, port, backend.workdir / "inbound.log") as pid:
        asyncio.run(_receiving_domain(env))
        yield pid, port, backend.data_dir / "smtp-tls-cert.pem"


def run_backend(name: str, args: argparse.Namespace, workdir: Path) -> list[Figures]:
    with (
        server.prepared(name, workdir / name) as backend,
        inbound_server(backend) as (pid, port, cert),
    ):
        mx = Target(f"{name}: inbound", port, "", "", (pid,), domain=DOMAIN, login=False)
        figures = [_measured(mx, cert, args)]
        with sink_server(cert, backend.workdir, auth=False) as (sink_pid, sink_port):
            sink = replace(mx, name=f"{name}: bare aiosmtpd server", port=sink_port)
            figures.append(_measured(replace(sink, pids=(sink_pid,)), cert, args))
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inbound", description=__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    args = parser.parse_args(argv)
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    figures: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-inbound-") as tmp:
        for name in backends:
            figures.extend(run_backend(name, args, Path(tmp)))
    if not postfix.available():
        print("Postfix is not installed here: its baseline is not measured.\n")
    print(table(figures))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"inbound-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps([asdict(f) for f in figures], indent=2) + "\n")
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
