"""aiosmtpd's logger as the SMTP servers set it up (``smtp.session.quiet_mail_log``): its
per-command lines left out below DEBUG before a record is made, every other line as before."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from aiosmtpd import smtp as aiosmtpd_smtp

from posthaste.smtp.session import MailLog, quiet_mail_log


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[logging.LogRecord]]:
    """The records ``mail.log`` makes, as its filters and handlers would get them."""
    quiet_mail_log()
    mail_log = logging.getLogger("mail.log")
    records: list[logging.LogRecord] = []
    make = mail_log.makeRecord

    def making(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        records.append(record)
        return record

    monkeypatch.setattr(mail_log, "makeRecord", making)
    root = logging.getLogger()
    level = root.level
    yield records
    root.setLevel(level)


def test_it_is_aiosmtpds_own_logger() -> None:
    quiet_mail_log()
    quiet_mail_log()
    mail_log = logging.getLogger("mail.log")
    assert aiosmtpd_smtp.log is mail_log and isinstance(mail_log, MailLog)


def test_per_command_lines_make_no_record_below_debug(made: list[logging.LogRecord]) -> None:
    logging.getLogger().setLevel(logging.INFO)
    log = aiosmtpd_smtp.log
    log.info("%r sender: %s", ("127.0.0.1", 1), "a@b.test")
    log.info("%r recip: %s", ("127.0.0.1", 1), "c@d.test")
    aiosmtpd_smtp.sanitized_log(log.info, "%r >> %r", ("127.0.0.1", 1), b"MAIL FROM:<a@b.test>")
    assert made == []
    log.info("Peer: %r", ("127.0.0.1", 1))
    [record] = made
    assert record.getMessage() == "Peer: ('127.0.0.1', 1)"
    assert record.funcName == "test_per_command_lines_make_no_record_below_debug"
    assert record.pathname == __file__


def test_per_command_lines_are_kept_at_debug(made: list[logging.LogRecord]) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    log = aiosmtpd_smtp.log
    aiosmtpd_smtp.sanitized_log(log.info, "%r >> %r", ("127.0.0.1", 1), b"AUTH PLAIN c2VjcmV0")
    log.info("%r recip: %s", ("127.0.0.1", 1), "c@d.test")
    assert [r.getMessage() for r in made] == [
        "('127.0.0.1', 1) >> b'AUTH PLAIN ********'",
        "('127.0.0.1', 1) recip: c@d.test",
    ]
    # The caller is aiosmtpd's function, as without MailLog.
    assert made[0].funcName == "sanitized_log" and made[0].pathname == aiosmtpd_smtp.__file__
