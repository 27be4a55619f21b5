"""How many processes of each role ``posthaste serve`` supervises (``supervisor.plan``)."""

from __future__ import annotations

import pytest

from posthaste.config import Settings
from posthaste.supervisor import Layout, plan


@pytest.mark.parametrize(
    ("cores", "expected"),
    [
        (2, Layout(api=1, smtp=1, worker=2, inbound=1)),
        (3, Layout(api=1, smtp=1, worker=3, inbound=1)),
        (4, Layout(api=1, smtp=1, worker=4, inbound=1)),
        (8, Layout(api=2, smtp=2, worker=8, inbound=2)),
        (16, Layout(api=4, smtp=4, worker=16, inbound=4)),
    ],
)
def test_a_worker_per_core_and_an_api_a_relay_and_an_mx_per_four(
    cores: int, expected: Layout
) -> None:
    assert Layout.for_cores(cores, relay=True, inbound=True) == expected


def test_no_relay_process_when_both_relay_ports_are_off() -> None:
    layout = plan(Settings(processes=4, smtp_relay_port=0, smtp_relay_tls_port=0))
    assert layout == Layout(api=1, smtp=0, worker=4, inbound=1)
    assert plan(Settings(processes=4, smtp_relay_port=0)) == Layout(
        api=1, smtp=1, worker=4, inbound=1
    )


def test_no_inbound_process_when_the_inbound_port_is_off() -> None:
    layout = plan(Settings(processes=4, smtp_inbound_port=0))
    assert layout == Layout(api=1, smtp=1, worker=4, inbound=0)


def test_one_process_for_one_core_or_one_role() -> None:
    assert plan(Settings(processes=1)) is None
    assert plan(Settings(processes=4, role="worker")) is None
    assert plan(Settings(processes=2)) == Layout(api=1, smtp=1, worker=2, inbound=1)


def test_roles_are_listed_api_first() -> None:
    roles = Layout(api=1, smtp=1, worker=2, inbound=1).roles()
    assert roles == ["api", "smtp", "inbound", "worker", "worker"]
