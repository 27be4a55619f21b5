"""``supervisor.set_session_nice``: each ``serve`` child leads a session of its own, and where
Linux schedules sessions as groups (autogroup) only the session's nice weighs against other
processes, so the supervisor sets it, as the unprivileged user a deployment runs as."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posthaste.supervisor import set_session_nice

AUTOGROUP = Path("/proc/self/autogroup")
ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.skipif(
    not AUTOGROUP.exists(), reason="a kernel without autogroup scheduling: nothing to set"
)

# As the user ``nobody`` when the suite runs as root (CI does), so that the kernel's limits for
# ordinary users apply (the change of user comes after the imports: nothing to read as nobody):
# three children in sessions of their own, their sessions' nice set one right after another
# (the kernel takes one change a tenth of a second from a user without CAP_SYS_ADMIN), and
# what each session's nice reads back.
SCRIPT = """
import asyncio, json, os, subprocess
from posthaste.supervisor import set_session_nice
from tests.helpers import session_nice

if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)

async def main():
    children = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(3)]
    try:
        took = [await set_session_nice(c.pid, 7 + n) for n, c in enumerate(children)]
        read = [session_nice(c.pid) for c in children]
        print(json.dumps({"uid": os.geteuid(), "took": took, "read": read}))
    finally:
        for child in children:
            child.kill()
            child.wait()

asyncio.run(main())
"""


def test_each_childs_session_gets_its_nice_as_an_ordinary_user() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["uid"] != 0
    assert found == {"uid": found["uid"], "took": [True, True, True], "read": [7, 8, 9]}


def test_a_process_that_is_gone_is_reported_not_raised() -> None:
    child = subprocess.Popen(["true"], start_new_session=True)
    child.wait()
    assert asyncio.run(set_session_nice(child.pid, 5)) is False
