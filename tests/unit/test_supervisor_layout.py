"""How many processes of each role ``posthaste serve`` supervises (``supervisor.plan``)."""

from __future__ import annotations

import pytest

from posthaste.config import Settings
from posthaste.supervisor import Layout, plan


@pytest.mark.parametrize(
    ("cores", "expected"),
    [
        (2, Layout(api=1, smtp=1, worker=2)),
        (3, Layout(api=1, smtp=1, worker=3)),
        (4, Layout(api=1, smtp=1, worker=4)),
        (8, Layout(api=2, smtp=2, worker=8)),
        (16, Layout(api=4, smtp=4, worker=16)),
    ],
)
def test_a_worker_per_core_and_an_api_and_a_relay_per_four(cores: int, expected: Layout) -> None:
    assert Layout.for_cores(cores, relay=True) == expected


def test_no_relay_process_when_both_relay_ports_are_off() -> None:
    layout = plan(Settings(processes=4, smtp_relay_port=0, smtp_relay_tls_port=0))
    assert layout == Layout(api=1, smtp=0, worker=4)
    assert plan(Settings(processes=4, smtp_relay_port=0)) == Layout(api=1, smtp=1, worker=4)


def test_one_process_for_one_core_or_one_role() -> None:
    assert plan(Settings(processes=1)) is None
    assert plan(Settings(processes=4, role="worker")) is None
    assert plan(Settings(processes=2)) == Layout(api=1, smtp=1, worker=2)


def test_roles_are_listed_api_first() -> None:
    assert Layout(api=1, smtp=1, worker=2).roles() == ["api", "smtp", "worker", "worker"]
