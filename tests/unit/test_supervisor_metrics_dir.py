"""``serve`` removes the metrics directory a supervisor killed with SIGKILL left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from posthaste.supervisor import METRICS_PREFIX, _remove_orphaned_metrics_dirs


def test_only_the_directories_of_supervisors_that_no_longer_run_are_removed(
    tmp_path: Path,
) -> None:
    finished = subprocess.Popen([sys.executable, "-c", ""])
    finished.wait()  # reaped: its pid runs no more
    running = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        dead = tmp_path / f"{METRICS_PREFIX}{finished.pid}-abc123"
        (dead / "sub").mkdir(parents=True)
        (dead / "counter_1.db").write_bytes(b"x")
        kept = [
            tmp_path / f"{METRICS_PREFIX}{running.pid}-def456",  # a live supervisor's
            tmp_path / f"{METRICS_PREFIX}{os.getpid()}-ghi789",  # this process's own
            tmp_path / f"{METRICS_PREFIX}k2j3h4",  # an older name, without a pid
            tmp_path / "posthaste-other-1",
        ]
        for path in kept:
            path.mkdir()
        (tmp_path / f"{METRICS_PREFIX}{finished.pid}-file").write_text("a file, not a directory")

        _remove_orphaned_metrics_dirs(str(tmp_path))

        assert not dead.exists()
        assert all(path.is_dir() for path in kept)
        assert (tmp_path / f"{METRICS_PREFIX}{finished.pid}-file").is_file()
    finally:
        running.communicate(b"")


def test_a_missing_temporary_directory_is_no_error(tmp_path: Path) -> None:
    _remove_orphaned_metrics_dirs(str(tmp_path / "absent"))
