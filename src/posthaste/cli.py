"""The ``posthaste`` command: serve, migrate, teams, keys, destinations, pools,
tls-reports. The only place that parses argv."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from posthaste.config import Settings
from posthaste.config.sources import SECRET_KEY_FILENAME
from posthaste.core.api_keys import MAX_NAME_LENGTH, NewApiKey
from posthaste.core.ids import format_ms
from posthaste.core.models import KeyMode, Permission
from posthaste.errors import ConfigError, PosthasteError
from posthaste.logs import configure_logging

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="posthaste", description="Self-hosted email delivery.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the API and the workers")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--role", help="all (the default), or some of api, smtp, inbound, worker: api,smtp"
    )
    serve.add_argument("--processes", help="auto (one per core, the default) or N; 1 = one process")
    # Set by the supervisor on the processes it starts (``supervisor.py``), not by people.
    serve.add_argument("--supervised-ready-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--supervised-http-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument(
        "--supervised-smtp-fd", action="append", default=[], help=argparse.SUPPRESS
    )  # PORT=FD, once per SMTP socket the supervisor bound
    serve.add_argument("--supervised-prepare", action="store_true", help=argparse.SUPPRESS)
    commands.add_parser("migrate", help="apply database migrations")

    teams = commands.add_parser("teams", help="manage teams").add_subparsers(
        dest="action", required=True
    )
    for action in ("create", "update"):
        sub = teams.add_parser(action)
        sub.add_argument("name")
        sub.add_argument("--rate-limit", type=int, help="requests per second (0 = unlimited)")
        sub.add_argument(
            "--daily-quota", type=int, help="accepted emails per UTC day (0 = unlimited)"
        )
    teams.add_parser("list")

    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(
        dest="action", required=True
    )
    create = keys.add_parser("create")
    create.add_argument("--team", required=True)
    create.add_argument("--name")
    create.add_argument("--mode", choices=[m.value for m in KeyMode], default="live")
    create.add_argument(
        "--permission", choices=[p.value for p in Permission], default="full_access"
    )
    listing = keys.add_parser("list")
    listing.add_argument("--team", required=True)
    revoke = keys.add_parser("revoke")
    revoke.add_argument("id")
    keys.add_parser(
        "rotate-secret",
        help="a new secret key (kept in the data dir) or, with POSTHASTE_SECRET_KEY set, the "
        "configured one: stored secrets are sealed again with it; the previous keys stay valid",
    )

    destinations = commands.add_parser(
        "destinations", help="the receiving destinations of mx delivery and their throttle"
    )
    destinations.add_argument("--json", action="store_true", help="as GET /destinations shows")
    pools = commands.add_parser(
        "pools", help="the IP pools of mx delivery: addresses, warm-up day, cap and count today"
    )
    pools.add_argument("--json", action="store_true", help="as GET /pools shows")

    reports = commands.add_parser(
        "tls-reports", help="the daily TLS reports (RFC 8460) produced, newest day first"
    )
    reports.add_argument("--day", help="only the reports of this UTC day (YYYY-MM-DD)")
    reports.add_argument("--limit", type=int, default=100)
    reports.add_argument("--json", action="store_true", help="each report in full, with its rua")
    return parser


def _event_loop_runner(command: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    """uvloop for the long-running server (measured: ~10 % more requests per CPU second)."""
    if command == "serve":
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.run
    return asyncio.run


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.load()
        if args.command == "serve":
            settings = _serve_overrides(settings, args)
        configure_logging(settings.log_level)
        return _event_loop_runner(args.command)(_dispatch(settings, args))
    except ConfigError as exc:
        print(f"posthaste: configuration error: {exc}", file=sys.stderr)
        return 2
    except PosthasteError as exc:
        print(f"posthaste: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _serve_overrides(settings: Settings, args: argparse.Namespace) -> Settings:
    environ = dict(os.environ)
    if args.host:
        environ["POSTHASTE_HTTP_HOST"] = args.host
    if args.port is not None:
        environ["POSTHASTE_HTTP_PORT"] = str(args.port)
    if args.role:
        environ["POSTHASTE_ROLE"] = args.role
    if args.processes:
        environ["POSTHASTE_PROCESSES"] = args.processes
    return Settings.load(environ) if environ != os.environ else settings


async def _dispatch(settings: Settings, args: argparse.Namespace) -> int:
    if args.command == "serve":  # imports only what the process's roles need
        return await _serve(settings, args)
    from posthaste.bootstrap import build_services, migrate

    if args.command == "migrate":
        await migrate(settings)
        print("database is up to date")
        return 0
    await migrate(settings)
    if args.command == "keys" and args.action == "rotate-secret":
        return await _rotate_secret(settings)
    services = build_services(settings)
    try:
        if args.command == "teams":
            return await _teams(services, args)
        if args.command == "destinations":
            return await _destinations(services, args)
        if args.command == "pools":
            return await _pools(services, args)
        if args.command == "tls-reports":
            return await _tls_reports(services, args)
        return await _keys(services, args)
    finally:
        await services.close()


async def _rotate_secret(settings: Settings) -> int:
    """The secret key's rotation (docs/deploying.md#rotating-the-secret-key): with the key kept
    in the data dir, a new one replaces it and the old one moves to ``secret.key.previous``;
    with a configured key, the operator has set the new one and the previous ones already. Then
    every stored secret is sealed again with the current key."""
    from posthaste.config.sources import rotate_secret_key_file
    from posthaste.services.secret_keys import reseal

    if _key_from_data_dir(settings):
        rotate_secret_key_file(settings.data_dir)
        settings = Settings.load()
        print(f"new secret key in {settings.data_dir / SECRET_KEY_FILENAME}; the previous one")
        print("stays valid (secret.key.previous). Restart `posthaste serve` to sign with it.")
    elif not settings.secret_key_previous:
        raise ConfigError(
            "POSTHASTE_SECRET_KEY_PREVIOUS: required to rotate a configured key: set "
            "POSTHASTE_SECRET_KEY to the new key and POSTHASTE_SECRET_KEY_PREVIOUS to the old "
            "one on every process, restart them, then run this command"
        )
    from posthaste.bootstrap import build_services

    services = build_services(settings)
    try:
        done = await reseal(services.db, settings.secret_keys)
    finally:
        await services.close()
    print(
        f"sealed again with the current key: {done.dkim_keys} DKIM keys, "
        f"{done.webhook_secrets} webhook secrets"
    )
    if done.unreadable:
        print(f"{done.unreadable} secrets open with no key of the ring (see the log)")
        return 1
    return 0


def _key_from_data_dir(settings: Settings) -> bool:
    """Whether the secret key is the one kept in the data dir (not configured)."""
    path = settings.data_dir / SECRET_KEY_FILENAME
    try:
        return path.read_text(encoding="utf-8").strip() == settings.secret_key
    except OSError:
        return False


async def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from posthaste.server import Supervised, prepare, serve
    from posthaste.supervisor import plan, supervise

    if args.supervised_prepare:
        return await prepare(settings)
    if args.supervised_ready_fd is not None:
        smtp_fds = tuple(
            (int(port), int(fd))
            for port, _, fd in (v.partition("=") for v in args.supervised_smtp_fd)
        )
        linked = Supervised(args.supervised_ready_fd, args.supervised_http_fd, smtp_fds)
        return await serve(settings, linked)
    layout = plan(settings)
    if layout is None:
        return await serve(settings)
    return await supervise(settings, layout)


async def _teams(services: Services, args: argparse.Namespace) -> int:
    if args.action == "create":
        team = await services.teams.create_team(args.name, args.rate_limit, args.daily_quota)
        print(team.id)
    elif args.action == "update":
        team = await services.teams.update_team(args.name, args.rate_limit, args.daily_quota)
        print(team.id)
    else:
        for team in await services.teams.list_teams():
            print(
                f"{team.id}  {team.name}  rate_limit={team.rate_limit}/s  "
                f"daily_quota={team.daily_quota or 'unlimited'}"
            )
    return 0


async def _keys(services: Services, args: argparse.Namespace) -> int:
    if args.action == "create":
        team = await services.teams.team_by_name(args.team)
        mode = KeyMode(args.mode)
        name = (args.name or f"{mode.value} key")[:MAX_NAME_LENGTH]
        created = await services.api_keys.create(
            team.id, NewApiKey(name, mode, Permission(args.permission))
        )
        print(created.token)
    elif args.action == "list":
        team = await services.teams.team_by_name(args.team)
        for key in await services.api_keys.all(team.id):
            print(
                f"{key.id}  {key.token_hint}…  {key.mode.value}  {key.permission.value}  "
                f"{key.name}  created {format_ms(key.created_at)}"
            )
    else:
        await services.api_keys.revoke(args.id)
        print(f"revoked {args.id}")
    return 0


async def _destinations(services: Services, args: argparse.Namespace) -> int:
    from posthaste.core.destinations import format_rate
    from posthaste.core.serialize import destination_record

    views = await services.destinations.list()
    if args.json:
        print(json.dumps({"object": "list", "data": [destination_record(v) for v in views]}))
        return 0
    for view in views:
        until = f" until {format_ms(view.suspended_until)}" if view.suspended_until else ""
        print(
            f"{view.name}  {view.state}{until}  {format_rate(view.rate)} "
            f"(policy {format_rate(view.policy.rate)}, {view.policy.max_connections} connections)"
            f"  mx: {', '.join(view.mx_hosts)}"
        )
        for reply in view.recent[:3]:
            print(f"    {format_ms(reply.at)}  {reply.reply}  -> {reply.decision}")
    return 0


async def _pools(services: Services, args: argparse.Namespace) -> int:
    from posthaste.core.serialize import pool_record

    views = await services.pools.list()
    if args.json:
        print(json.dumps({"object": "list", "data": [pool_record(v) for v in views]}))
        return 0
    for view in views:
        warmup = ", ".join(map(str, view.per_day)) or "none"
        print(f"{view.name}  helo {view.helo or '(POSTHASTE_MX_HOST)'}  warm-up per day: {warmup}")
        if not view.addresses:
            print("    the machine's own address")
        for a in view.addresses:
            day = "unused" if a.warmup_day is None else f"day {a.warmup_day}"
            cap = "no cap" if a.cap is None else f"cap {a.cap}"
            print(f"    {a.address}  {day}  {cap}  sent today {a.sent_today}")
    return 0


async def _tls_reports(services: Services, args: argparse.Namespace) -> int:
    stored = await services.tls_reports.list(args.day, args.limit)
    if args.json:
        data = [
            {
                "day": r.day,
                "policy_domain": r.policy_domain,
                "report": r.report,
                "deliveries": r.deliveries,
                "created_at": format_ms(r.created_at),
            }
            for r in stored
        ]
        print(json.dumps({"object": "list", "data": data}))
        return 0
    for r in stored:
        sent = ", ".join(f"{d['rua']} {d['status']}" for d in r.deliveries)
        for entry in r.report.get("policies", []):
            summary = entry["summary"]
            print(
                f"{r.day}  {r.policy_domain}  {entry['policy']['policy-type']}  "
                f"ok {summary['total-successful-session-count']}  "
                f"failed {summary['total-failure-session-count']}  -> {sent}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
