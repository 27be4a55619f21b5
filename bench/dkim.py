"""``python -m bench.dkim``: DKIM signatures per second per core for a 5 KB message.

Posthaste's signer (relaxed/relaxed canonicalisation in Python, RSA-2048 in OpenSSL through
``cryptography``, the loaded key cached) beside dkimpy as shipped (pure-Python RSA), the
baseline, in the same run.
Rates are per CPU-second of this process (``time.process_time``), so a busy neighbour on the
shared cores does not lower them; the wall rate is printed too.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import dkim
from tests.dkim_keys import make_key

from posthaste.core.dkim import sign_message

KEY = make_key()
TIMESTAMP = 1_700_000_000


def five_kb_message() -> bytes:
    headers = (
        "From: Acme <hello@acme.test>\r\nTo: someone@example.com\r\nSubject: Your receipt\r\n"
        "Date: Mon, 23 Nov 2026 12:00:00 +0000\r\nMessage-ID: <0193a1b2@acme.test>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "List-Unsubscribe: <https://acme.test/unsubscribe/0193a1b2>\r\n\r\n"
    )
    line = "Thank you for your order. Your receipt follows, with the items you bought.\r\n"
    body = line * (5000 // len(line))
    return (headers + body).encode()


def posthaste_sign(raw: bytes) -> bytes:
    return sign_message(raw, KEY, TIMESTAMP)


def dkimpy_sign(raw: bytes) -> bytes:
    return dkim.sign(
        raw,
        KEY.selector.encode(),
        KEY.domain.encode(),
        KEY.private_key_pem,
        canonicalize=(b"relaxed", b"relaxed"),
        include_headers=[b"from", b"to", b"subject", b"date", b"message-id"],
    )


def measure(sign: Callable[[bytes], bytes], raw: bytes, seconds: float) -> tuple[float, float]:
    """(signatures per CPU-second, signatures per wall-second)."""
    sign(raw)  # warm caches (the loaded key)
    count = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds:
        for _ in range(10):
            sign(raw)
        count += 10
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return count / cpu, count / wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dkim", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    raw = five_kb_message()
    print(f"message: {len(raw)} bytes, RSA-2048, relaxed/relaxed, rsa-sha256\n")
    print("| signer | signatures/s per core (CPU time) | signatures/s (wall) |")
    print("|---|---:|---:|")
    for label, sign in (("posthaste (cryptography)", posthaste_sign), ("dkimpy", dkimpy_sign)):
        per_cpu, per_wall = measure(sign, raw, args.seconds)
        print(f"| {label} | {per_cpu:,.0f} | {per_wall:,.0f} |")


if __name__ == "__main__":
    main()
