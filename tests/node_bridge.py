"""The official Resend Node SDK (pinned in tests/node/package.json), driven from Python.

One long-lived ``node tests/node/bridge.mjs`` per server: each call is one JSON line in, one out.
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).parent / "node"
BRIDGE = NODE_DIR / "bridge.mjs"
SDK_PACKAGE = NODE_DIR / "node_modules" / "resend" / "package.json"


def pinned_version() -> str:
    """The SDK version tests/node/package.json pins."""
    version: str = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["resend"]
    return version


def missing_node() -> str | None:
    """Why the Node SDK cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed (apt-get install nodejs npm)"
    if not SDK_PACKAGE.exists():
        return "the Resend Node SDK is not installed (make test runs npm ci in tests/node)"
    return None


def require_node() -> None:
    """Skip the calling test where the Node SDK cannot run; under ``CI=true`` fail instead."""
    reason = missing_node()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"The Resend Node SDK tests must run under CI=true: {reason}")
    pytest.skip(reason)


@contextmanager
def running_bridge(url: str, key: str, log: Path) -> Iterator[NodeBridge]:
    """A bridge to the server at ``url`` with ``key``, checked to run the pinned SDK."""
    require_node()
    bridge = NodeBridge(url, key, log)
    try:
        assert bridge.sdk_version == pinned_version(), "stale tests/node/node_modules: make test"
        yield bridge
    finally:
        bridge.close()


def buffer(data: bytes) -> dict[str, str]:
    """An argument the bridge hands to the SDK as a Node ``Buffer``."""
    return {"$buffer": base64.b64encode(data).decode()}


class NodeBridge:
    """``call("emails.send", {...})`` → what the SDK returned: ``{data, error, headers}``."""

    def __init__(self, base_url: str, api_key: str, log: Path) -> None:
        env = {**os.environ, "RESEND_BASE_URL": base_url, "RESEND_API_KEY": api_key}
        self._log = log
        with log.open("wb") as err:
            self._process = subprocess.Popen(
                ["node", str(BRIDGE)],
                cwd=NODE_DIR,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._buffered = b""

    @property
    def sdk_version(self) -> str:
        version: str = json.loads(SDK_PACKAGE.read_text())["version"]
        return version

    def call(
        self, method: str, *args: Any, key: str | None = None, then: str | None = None
    ) -> dict[str, Any]:
        """Call ``resend.<method>(*args)`` (then ``.<then>()`` on its result, with ``key`` as
        the API key when given); raises if the SDK threw instead of answering."""
        request: dict[str, Any] = {"method": method, "args": list(args)}
        if key is not None:
            request["key"] = key
        if then is not None:
            request["then"] = {"method": then}
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request).encode() + b"\n")
        self._process.stdin.flush()
        answer: dict[str, Any] = json.loads(self._read_line(deadline=time.monotonic() + 30))
        if "thrown" in answer:
            raise RuntimeError(f"{method} threw in the Node SDK: {answer['thrown']}")
        return answer

    def ok(self, method: str, *args: Any, key: str | None = None, then: str | None = None) -> Any:
        """The call's ``data``, asserting the SDK reported no error."""
        answer = self.call(method, *args, key=key, then=then)
        assert answer["error"] is None, f"{method}: {answer['error']}"
        return answer["data"]

    def _read_line(self, deadline: float) -> bytes:
        stdout = self._process.stdout
        assert stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffered:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise TimeoutError(f"the Node bridge did not answer:\n{self._log.read_text()}")
                chunk = os.read(stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(f"the Node bridge exited:\n{self._log.read_text()}")
                self._buffered += chunk
        line, _, self._buffered = self._buffered.partition(b"\n")
        return line

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
