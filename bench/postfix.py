"""A throwaway Postfix instance for the benchmarks' baselines (Linux, run as root).

Issue #4 measures Posthaste against "what Postfix reaches" on this kind of machine: relaying to
a loopback sink, and accepting over SMTP with STARTTLS and AUTH. This module starts a Postfix of
its own (its own configuration and queue in a temporary folder, its own loopback port; the
machine's ``/etc/postfix`` is read for nothing but the daemons' location), so those figures are
measured in the same run as ours, on the same box, instead of quoted.

``available()`` says whether Postfix can be used here (``apt-get install postfix sasl2-bin``;
the benchmarks print the baseline as "not measured" otherwise). Tuned as one would for a relay
benchmark: no ``in_flow_delay`` (which slows clients when the queue manager lags), no DNS
(the relay host is an IP literal), connection reuse toward the relay host, 20 parallel
deliveries to it (Postfix's default per-destination concurrency) and a process limit of 100.
Queue files are written and synced as Postfix always does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import cpu, sink
from bench.server import free_port

DAEMONS = Path("/usr/lib/postfix/sbin")
SASL_USER = "bench"
SASL_PASSWORD = "bench-password"
SASL_REALM = "postfix.bench"

_MASTER_CF = """\
{port} inet n - n - - smtpd
pickup unix n - n 60 1 pickup
cleanup unix n - n - 0 cleanup
qmgr unix n - n 300 1 qmgr
tlsmgr unix - - n 1000? 1 tlsmgr
rewrite unix - - n - - trivial-rewrite
bounce unix - - n - 0 bounce
defer unix - - n - 0 bounce
trace unix - - n - 0 bounce
verify unix - - n - 1 verify
flush unix n - n 1000? 0 flush
proxymap unix - - n - - proxymap
proxywrite unix - - n - 1 proxymap
smtp unix - - n - - smtp
relay unix - - n - - smtp
showq unix n - n - - showq
error unix - - n - - error
retry unix - - n - - error
discard unix - - n - - discard
local unix - n n - - local
virtual unix - n n - - virtual
anvil unix - - n - 1 anvil
scache unix - - n - 1 scache
postlog unix-dgram n - n - 1 postlogd
"""


@dataclass(frozen=True)
class Postfix:
    port: int
    config: Path
    log: Path

    def cpu_seconds(self) -> float:
        """CPU seconds of this instance's processes so far, reaped ones included."""
        return cpu.tree_seconds(self.master_pid())

    def delivered(self) -> int:
        """Messages delivered to the Maildir so far (``running(mailboxes=...)``)."""
        folder = self.config.parent / "mail" / "Maildir" / "new"
        return sum(1 for _ in folder.iterdir()) if folder.exists() else 0

    def master_pid(self) -> int:
        pid_file = self.config.parent / "queue" / "pid" / "master.pid"
        return int(pid_file.read_text().split()[0])


def available() -> bool:
    return (
        os.geteuid() == 0
        and shutil.which("postfix") is not None
        and (DAEMONS / "master").exists()
        and shutil.which("saslpasswd2") is not None
    )


def _main_cf(
    root: Path, relay_port: int | None, tls: tuple[Path, Path] | None, mailboxes: str | None = None
) -> str:
    lines = [
        "compatibility_level = 3.6",
        f"queue_directory = {root / 'queue'}",
        f"data_directory = {root / 'data'}",
        f"maillog_file = {root / 'maillog'}",
        f"maillog_file_prefixes = {root}",
        "mail_owner = postfix",
        "setgid_group = postdrop",
        "myhostname = postfix.bench",
        "mydomain = postfix.bench",
        "myorigin = $myhostname",
        "mydestination =",
        "local_recipient_maps =",
        "alias_maps =",
        "alias_database =",
        "inet_interfaces = 127.0.0.1",
        "inet_protocols = ipv4",
        "mynetworks = 127.0.0.0/8",
        "smtpd_relay_restrictions = permit_mynetworks, permit_sasl_authenticated, reject",
        "in_flow_delay = 0s",
        "default_process_limit = 100",
        "max_use = 100000",
        "smtp_tls_security_level = none",
        "smtp_dns_support_level = disabled",
        "smtp_host_lookup = native",
        "disable_dns_lookups = yes",
        "smtpd_peername_lookup = no",
        "biff = no",
        "message_size_limit = 41943040",
        "append_dot_mydomain = no",
    ]
    if mailboxes is not None:  # an MX: every address at the domain is one Maildir's
        user = pwd.getpwnam("postfix")
        lines += [
            f"virtual_mailbox_domains = {mailboxes}",
            f"virtual_mailbox_base = {root / 'mail'}",
            "virtual_mailbox_maps = static:Maildir/",
            "virtual_minimum_uid = 1",
            f"virtual_uid_maps = static:{user.pw_uid}",
            f"virtual_gid_maps = static:{user.pw_gid}",
            "relayhost = [127.0.0.1]:9",
        ]
    elif relay_port is None:  # accepting only: every message is queued on hold, never delivered
        lines += [
            "smtpd_data_restrictions = check_client_access static:HOLD",
            "relayhost = [127.0.0.1]:9",
        ]
    else:
        lines += [
            f"relayhost = [127.0.0.1]:{relay_port}",
            f"smtp_connection_cache_destinations = [127.0.0.1]:{relay_port}",
        ]
    if tls is not None:
        cert, key = tls
        lines += [
            f"smtpd_tls_cert_file = {cert}",
            f"smtpd_tls_key_file = {key}",
            "smtpd_tls_security_level = may",
        ]
    if tls is not None and mailboxes is None:
        lines += [
            "smtpd_tls_auth_only = yes",
            "smtpd_sasl_auth_enable = yes",
            "smtpd_sasl_type = cyrus",
            f"cyrus_sasl_config_path = {root / 'config' / 'sasl'}",
            "smtpd_sasl_path = smtpd",
            f"smtpd_sasl_local_domain = {SASL_REALM}",
        ]
    return "\n".join(lines) + "\n"


def _sasl(root: Path) -> None:
    """One user in a sasldb of our own, checked by the Cyrus library inside smtpd (Debian's
    build reads ``<config_directory>/sasl/smtpd.conf``)."""
    folder = root / "config" / "sasl"
    folder.mkdir()
    db = folder / "sasldb2"
    settings = ["pwcheck_method: auxprop", "auxprop_plugin: sasldb", "mech_list: PLAIN LOGIN"]
    (folder / "smtpd.conf").write_text("\n".join([*settings, f"sasldb_path: {db}", ""]))
    subprocess.run(
        ["saslpasswd2", "-c", "-p", "-f", str(db), "-u", SASL_REALM, SASL_USER],
        input=SASL_PASSWORD.encode(),
        check=True,
    )
    shutil.chown(db, "root", "postfix")
    db.chmod(0o640)


@contextmanager
def running(
    port: int,
    relay_port: int | None,
    tls: tuple[Path, Path] | None = None,
    mailboxes: str | None = None,
) -> Iterator[Postfix]:
    """A Postfix listening on 127.0.0.1:``port``; relaying to ``relay_port`` or keeping all.

    With ``tls`` (cert, key): STARTTLS offered and AUTH PLAIN/LOGIN after it, user
    ``SASL_USER`` with ``SASL_PASSWORD``. With ``mailboxes`` (a domain), an MX instead: mail for
    any address at that domain is delivered by Postfix's ``virtual`` agent into one Maildir
    (``Postfix.delivered()`` counts it), STARTTLS offered with ``tls`` and no AUTH. Its files
    live in a temporary folder of its own that the ``postfix`` user can enter (the benchmarks'
    own folders are root's alone)."""
    with tempfile.TemporaryDirectory(prefix="posthaste-bench-postfix-") as folder:
        root = Path(folder)
        root.chmod(0o755)
        config = root / "config"
        config.mkdir()
        (root / "queue").mkdir()
        (root / "data").mkdir()
        shutil.chown(root / "data", "postfix")
        if tls is not None:
            tls = (Path(shutil.copy(tls[0], root)), Path(shutil.copy(tls[1], root)))
            if mailboxes is None:
                _sasl(root)
        if mailboxes is not None:
            (root / "mail").mkdir()
            shutil.chown(root / "mail", "postfix", "postfix")
        (config / "main.cf").write_text(_main_cf(root, relay_port, tls, mailboxes))
        (config / "master.cf").write_text(_MASTER_CF.format(port=port))
        instance = Postfix(port, config, root / "maillog")
        command = ["postfix", "-c", str(config)]
        started = subprocess.run([*command, "start"], capture_output=True, text=True)
        if started.returncode:
            log = instance.log.read_text() if instance.log.exists() else ""
            raise RuntimeError(f"postfix did not start: {started.stderr}{log}")
        try:
            _wait_for_master(instance)
            yield instance
        finally:
            subprocess.run([*command, "abort"], capture_output=True)
            _wait_for_exit(instance)


async def relay_to_sink(
    sink_port: int,
    sink_pid: int,
    count: int,
    connections: int,
    message: sink.Message,
    tls: tuple[Path, Path] | None = None,
) -> dict[str, float]:
    """A Postfix of its own relaying ``count`` messages to the sink (``bench/sink.py``), from
    the first submission until the sink has them all. With ``tls`` (cert, key) every client
    connection does STARTTLS and AUTH first, as a relay's clients do. Messages/s end to end,
    messages/s accepted, and the CPU ms per message of Postfix's processes and of the sink's."""
    with running(free_port(), sink_port, tls) as instance:
        before = await sink.count(sink_port)
        cpu_before = instance.cpu_seconds(), cpu.process_seconds(sink_pid)
        context = None if tls is None else ssl.create_default_context(cafile=str(tls[0]))
        login = None if tls is None else (SASL_USER, SASL_PASSWORD)
        started = time.perf_counter()
        accepted, refused = await sink.submit(
            instance.port, count, connections, message, context, login
        )
        submitted = time.perf_counter() - started
        if refused:
            raise RuntimeError(
                f"Postfix refused {dict(refused)}:\n{instance.log.read_text()[-3000:]}"
            )
        done = await sink.until_counted(
            sink_port, before + accepted, lambda: instance.log.read_text()[-3000:]
        )
        elapsed = done - started
        figures = {
            "messages": accepted,
            "seconds": elapsed,
            "per_s": accepted / elapsed,
            "accept_per_s": accepted / submitted,
            "postfix_cpu_ms": 1000 * (instance.cpu_seconds() - cpu_before[0]) / accepted,
            "sink_cpu_ms": 1000 * (cpu.process_seconds(sink_pid) - cpu_before[1]) / accepted,
        }
        return {name: round(value, 3) for name, value in figures.items()}


def _wait_for_master(instance: Postfix) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            instance.master_pid()
            return
        except (OSError, ValueError, IndexError):
            time.sleep(0.05)
    raise RuntimeError(f"postfix did not start; see {instance.log}")


def _wait_for_exit(instance: Postfix) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(instance.master_pid(), 0)
        except (OSError, ValueError, IndexError):
            return
        time.sleep(0.05)
