"""Which processes ``posthaste serve`` supervises, and what each runs (``supervisor.plan``)."""

from __future__ import annotations

import pytest

from posthaste.config import Settings
from posthaste.config.parsers import parse_roles
from posthaste.supervisor import Layout, plan


def labels(layout: Layout | None) -> list[str]:
    assert layout is not None
    return layout.labels()


@pytest.mark.parametrize(
    ("cores", "expected"),
    [
        (2, ["api,smtp", "worker", "worker"]),
        (3, ["api,smtp", "worker", "worker", "worker"]),
        (4, ["api", "smtp", "worker", "worker", "worker", "worker"]),
        (8, ["api", "api", "smtp", "smtp"] + ["worker"] * 8),
        (16, ["api"] * 4 + ["smtp"] * 4 + ["worker"] * 16),
    ],
)
def test_a_worker_per_core_and_an_api_and_a_relay_per_four(cores: int, expected: list[str]) -> None:
    assert labels(Layout.for_cores(cores, relay=True)) == expected


def test_no_relay_when_both_relay_ports_are_off() -> None:
    off = Settings(processes=4, smtp_relay_port=0, smtp_relay_tls_port=0)
    assert labels(plan(off)) == ["api"] + ["worker"] * 4
    assert labels(plan(Settings(processes=2, smtp_relay_port=0, smtp_relay_tls_port=0))) == [
        "api",
        "worker",
        "worker",
    ]
    assert labels(plan(Settings(processes=4, smtp_relay_port=0)))[:2] == ["api", "smtp"]


def test_one_process_for_one_core_or_chosen_roles() -> None:
    assert plan(Settings(processes=1)) is None
    assert plan(Settings(processes=4, role=parse_roles("worker"))) is None
    assert plan(Settings(processes=4, role=parse_roles("api,smtp"))) is None
    assert labels(plan(Settings(processes=2))) == ["api,smtp", "worker", "worker"]
