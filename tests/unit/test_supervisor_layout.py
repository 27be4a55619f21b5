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
        (2, ["api,smtp,inbound", "worker", "worker"]),
        (3, ["api,smtp,inbound", "worker", "worker", "worker"]),
        (4, ["api", "smtp", "inbound", "worker", "worker", "worker", "worker"]),
        (8, ["api", "api", "smtp", "smtp", "inbound", "inbound"] + ["worker"] * 8),
        (16, ["api"] * 4 + ["smtp"] * 4 + ["inbound"] * 4 + ["worker"] * 16),
    ],
)
def test_a_worker_per_core_and_an_api_a_relay_and_an_mx_per_four(
    cores: int, expected: list[str]
) -> None:
    assert labels(Layout.for_cores(cores, relay=True, inbound=True)) == expected


def test_no_smtp_server_whose_ports_are_off() -> None:
    relay_off = {"smtp_relay_port": 0, "smtp_relay_tls_port": 0}
    assert labels(plan(Settings(processes=4, **relay_off))) == ["api", "inbound"] + ["worker"] * 4
    assert labels(plan(Settings(processes=2, **relay_off)))[0] == "api,inbound"
    assert labels(plan(Settings(processes=4, smtp_relay_port=0)))[:3] == ["api", "smtp", "inbound"]
    assert labels(plan(Settings(processes=4, smtp_inbound_port=0)))[:3] == ["api", "smtp", "worker"]
    everything_off = Settings(processes=2, smtp_inbound_port=0, **relay_off)
    assert labels(plan(everything_off)) == ["api", "worker", "worker"]


def test_one_process_for_one_core_or_chosen_roles() -> None:
    assert plan(Settings(processes=1)) is None
    assert plan(Settings(processes=4, role=parse_roles("worker"))) is None
    assert plan(Settings(processes=4, role=parse_roles("api,smtp"))) is None
    assert labels(plan(Settings(processes=2))) == ["api,smtp,inbound", "worker", "worker"]
