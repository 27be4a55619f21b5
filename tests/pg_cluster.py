"""A private PostgreSQL server for the tests that stop or restart it (the shared one on 5432 serves
every other test of the run, and must stay up).

Made with Debian's ``initdb``/``pg_ctl`` (the ``postgresql`` package the shared server comes from),
in a fresh directory on a free loopback port, ``fsync`` off. When the tests run as root (CI), the
server runs as the ``postgres`` user, as PostgreSQL refuses root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Cluster:
    port: int
    data: Path
    bindir: Path
    log: Path
    as_user: list[str]

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data), *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def restart(self) -> None:
        """``fast``: sessions are ended (57P01), new connections refused while it is down."""
        self.pg_ctl("restart", "-m", "fast", "-w", "-t", "60", "-l", str(self.log), *self._opts())

    def _opts(self) -> list[str]:
        settings = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        return ["-o", settings]


def _bindir() -> Path | None:
    root = Path("/usr/lib/postgresql")
    versions = sorted(root.iterdir(), key=lambda p: int(p.name)) if root.is_dir() else []
    for version in reversed(versions):
        if (version / "bin" / "initdb").exists():
            return version / "bin"
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@contextmanager
def private_cluster(port: int) -> Iterator[Cluster]:
    bindir = _bindir()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("initdb is required under CI=true (Debian's postgresql package)")
        pytest.skip("initdb not found: install PostgreSQL's server package")
    # Not under pytest's tmp dir: that is private to root, and the server runs as postgres.
    data = Path(tempfile.mkdtemp(prefix="posthaste-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(data, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    cluster = Cluster(port, data / "data", bindir, data / "server.log", as_user)
    initdb = [str(bindir / "initdb"), "-D", str(cluster.data), "-A", "trust", "-U", "postgres"]
    subprocess.run(
        [*as_user, *initdb, "--no-sync", "-E", "UTF8", "--locale", "C"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster.pg_ctl("start", "-w", "-t", "60", "-l", str(cluster.log), *cluster._opts())
    try:
        yield cluster
    finally:
        try:
            cluster.pg_ctl("stop", "-m", "immediate", "-w")
        finally:
            shutil.rmtree(data, ignore_errors=True)
