"""Sampling the server with py-spy under load, and reading the samples back.

py-spy is not a project dependency: ``.venv/bin/pip install py-spy`` to use ``--profile``.
Samples are written in the collapsed-stack format (one ``frame;frame;... count`` line per
distinct stack), which speedscope.app and flamegraph.pl open directly.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_RATE = 200
# Threads parked on a queue that py-spy still reports as running: counted apart, not as CPU.
_PARKED = ("threading.py:Condition.wait", "queue.py:Queue.get")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
_PACKAGE_ROOTS = ("site-packages/", "lib/python3.11/", "src/")


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter, else on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


async def record(pid: int, start: float, seconds: float, output: Path) -> None:
    """Attach to ``pid`` at ``start`` (perf_counter) and sample it for ``seconds``."""
    executable = py_spy()
    if executable is None:
        raise RuntimeError("py-spy is not installed: .venv/bin/pip install py-spy")
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    process = await asyncio.create_subprocess_exec(
        executable,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        str(SAMPLE_RATE),
        "--nonblocking",  # pausing the server for each sample slows it several times here
        "--gil",
        "--format",
        "raw",
        "--output",
        str(output),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"py-spy failed: {stderr.decode(errors='replace')}")


def _short(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``module/path.py:func`` without the line number."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    for root in _PACKAGE_ROOTS:
        if root in path:
            path = path.rsplit(root, 1)[1]
            break
    return f"{path}:{match['func']}"


def _package(frame: str) -> str:
    """The top-level package of a frame; for posthaste (and bench) the module file."""
    path = _short(frame).partition(":")[0]
    head = path.split("/", 1)[0]
    if head in ("posthaste", "bench"):
        return path
    return head.removesuffix(".py") or "?"


def _where(frames: list[str]) -> str:
    """Which part of the process a stack belongs to, from its outermost frames."""
    if not frames:
        return "no Python frame (native code, or between frames)"
    head = ";".join(frames[:4])
    if "Thread._bootstrap" in head:
        if "aiosqlite" in head:
            return "aiosqlite connection threads"
        if "anyio" in head:
            return "anyio worker threads (sync FastAPI dependencies)"
        return "other threads"
    if "sqlalchemy/" in frames[0]:
        return "event loop thread, inside SQLAlchemy greenlets"
    return "event loop thread"


@dataclass
class Profile:
    samples: int = 0
    inclusive: Counter[str] = field(default_factory=Counter)
    self_time: Counter[str] = field(default_factory=Counter)
    by_package: Counter[str] = field(default_factory=Counter)
    by_place: Counter[str] = field(default_factory=Counter)
    parked: int = 0

    def share(self, count: int) -> float:
        return round(100 * count / self.samples, 1) if self.samples else 0.0

    def as_dict(self, top: int = 40) -> dict[str, object]:
        return {
            "samples": self.samples,
            "parked_thread_samples_excluded": self.parked,
            "inclusive_pct": {k: self.share(v) for k, v in self.inclusive.most_common(top)},
            "self_pct": {k: self.share(v) for k, v in self.self_time.most_common(top)},
            "self_by_package_pct": {k: self.share(v) for k, v in self.by_package.most_common()},
            "by_place_pct": {k: self.share(v) for k, v in self.by_place.most_common()},
        }


def read(path: Path) -> Profile:
    """Inclusive and self sample counts per function, and self counts per top-level package."""
    profile = Profile()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        raw = [f for f in stack.split(";") if f.strip()]
        if raw and _short(raw[-1]) in _PARKED:
            profile.parked += count
            continue
        profile.samples += count
        profile.by_place[_where(raw)] += count
        if not raw:
            continue
        frames = [_short(f) for f in raw]
        for name in set(frames):
            profile.inclusive[name] += count
        profile.self_time[frames[-1]] += count
        profile.by_package[_package(raw[-1])] += count
    return profile


def render(profile: Profile, top: int = 25) -> str:
    lines = [
        f"{profile.samples} samples (CPU-busy stacks only; idle waits are not sampled; "
        f"{profile.parked} samples of threads parked on a queue excluded)"
    ]
    lines.append("\nwhere:")
    lines += [f"  {profile.share(c):5.1f}%  {k}" for k, c in profile.by_place.most_common()]
    lines.append("\nself time by package (posthaste by module):")
    lines += [f"  {profile.share(c):5.1f}%  {k}" for k, c in profile.by_package.most_common(20)]
    lines.append("\ninclusive (the function and everything it calls):")
    lines += [f"  {profile.share(c):5.1f}%  {k}" for k, c in profile.inclusive.most_common(top)]
    lines.append("\nself (time in the function's own code):")
    lines += [f"  {profile.share(c):5.1f}%  {k}" for k, c in profile.self_time.most_common(top)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(read(Path(sys.argv[1])), top=int(sys.argv[2]) if len(sys.argv) > 2 else 25))
