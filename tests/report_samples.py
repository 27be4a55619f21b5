"""Bounce and complaint reports as they arrive: written from RFC 3464's and RFC 5965's examples
and from the shapes Gmail, Outlook (Exchange Online and JMRP) and Yahoo send, addressed to
``verp`` and about a message sent to ``rcpt``."""

from __future__ import annotations

VERP = "bounces+token@send.acme.test"


def _crlf(text: str) -> bytes:
    return text.replace("\r\n", "\n").replace("\n", "\r\n").encode()


def rfc3464_failed(rcpt: str = "louisl@larry.slip.umd.edu", verp: str = VERP) -> bytes:
    """RFC 3464 appendix B.1 ("simple DSN"), addressed to our VERP return path."""
    return _crlf(f"""Date: Thu, 7 Jul 1994 17:16:05 -0400
From: Mail Delivery Subsystem <MAILER-DAEMON@CS.UTK.EDU>
Message-Id: <199407072116.RAA14128@CS.UTK.EDU>
Subject: Returned mail: Cannot send message for 5 days
To: <{verp}>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
              boundary="RAA14128.773615765/CS.UTK.EDU"

--RAA14128.773615765/CS.UTK.EDU

   ----- The following addresses had delivery problems -----
<{rcpt}>  (unrecoverable error)

--RAA14128.773615765/CS.UTK.EDU
content-type: message/delivery-status

Reporting-MTA: dns; cs.utk.edu

Original-Recipient: rfc822;{rcpt}
Final-Recipient: rfc822;{rcpt}
Action: failed
Status: 4.0.0
Diagnostic-Code: smtp; 426 connection timed out
Last-Attempt-Date: Thu, 7 Jul 1994 17:15:49 -0400

--RAA14128.773615765/CS.UTK.EDU
content-type: message/rfc822

[original message goes here]

--RAA14128.773615765/CS.UTK.EDU--
""")


def gmail_user_unknown(rcpt: str = "no.such.user@gmail.com", verp: str = VERP) -> bytes:
    """Gmail's "Address not found" bounce: a text part, the DSN, the original's headers."""
    return _crlf(f"""Delivered-To: {verp}
Return-Path: <>
From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>
To: {verp}
Auto-Submitted: auto-replied
Subject: Delivery Status Notification (Failure)
Message-ID: <5f1a.2c.bounce@mx.google.com>
MIME-Version: 1.0
Content-Type: multipart/report; boundary="000000000000d2b0d705f1a2"; report-type=delivery-status

--000000000000d2b0d705f1a2
Content-Type: multipart/related; boundary="000000000000d2b3a205f1a2"

--000000000000d2b3a205f1a2
Content-Type: text/plain; charset="UTF-8"

** Address not found **

Your message wasn't delivered to {rcpt} because the address couldn't be found.

--000000000000d2b3a205f1a2--
--000000000000d2b0d705f1a2
Content-Type: message/delivery-status

Reporting-MTA: dns; googlemail.com
Received-From-MTA: dns; mx.acme.test
Arrival-Date: Wed, 25 Nov 2026 10:00:00 -0800 (PST)
X-Original-Message-ID: <order-1@acme.test>

Final-Recipient: rfc822; {rcpt}
Action: failed
Status: 5.1.1
Remote-MTA: dns; gmail-smtp-in.l.google.com. (142.250.1.26, the server for the domain gmail.com.)
Diagnostic-Code: smtp; 550-5.1.1 The email account that you tried to reach does not exist.
 Please try double-checking the recipient's email address for typos or
 unnecessary spaces. https://support.google.com/mail/?p=NoSuchUser
Last-Attempt-Date: Wed, 25 Nov 2026 10:00:01 -0800 (PST)

--000000000000d2b0d705f1a2
Content-Type: text/rfc822-headers

From: Acme <hello@acme.test>
To: {rcpt}
Subject: Your order

--000000000000d2b0d705f1a2--
""")


def outlook_ndr(rcpts: tuple[str, ...], status: str = "5.1.10", verp: str = VERP) -> bytes:
    """Exchange Online's non-delivery report, one block per recipient, a delayed one too."""
    blocks = "".join(
        f"""
Final-Recipient: rfc822;{rcpt}
Action: {"delayed" if n else "failed"}
Status: {"4.4.7" if n else status}
Diagnostic-Code: smtp;550 {status} RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP
 address lookup
Remote-MTA: dns;BN8NAM12FT011.mail.protection.outlook.com
"""
        for n, rcpt in enumerate(rcpts)
    )
    return _crlf(f"""From: postmaster@outlook.com
To: <{verp}>
Date: Wed, 25 Nov 2026 18:00:00 +0000
Content-Type: multipart/report; report-type=delivery-status;
\tboundary="b4fcc7e9-42b3-4f3a-93ce-f6c1d7b9bf11"
MIME-Version: 1.0
Message-ID: <ee4d1c2a@BN8NAM12HT011.mail.protection.outlook.com>
Subject: Undeliverable: Your order
Auto-Submitted: auto-replied

--b4fcc7e9-42b3-4f3a-93ce-f6c1d7b9bf11
Content-Type: multipart/alternative;
\tboundary="c2d1f7f3-1b4b-4b5e-9a65-0b7f0e3b7a10"

--c2d1f7f3-1b4b-4b5e-9a65-0b7f0e3b7a10
Content-Type: text/plain; charset="us-ascii"

Your message to {rcpts[0]} couldn't be delivered.

--c2d1f7f3-1b4b-4b5e-9a65-0b7f0e3b7a10--

--b4fcc7e9-42b3-4f3a-93ce-f6c1d7b9bf11
Content-Type: message/delivery-status

Reporting-MTA: dns;BN8NAM12HT011.mail.protection.outlook.com
Received-From-MTA: dns;mx.acme.test
Arrival-Date: Wed, 25 Nov 2026 18:00:00 +0000
{blocks}
--b4fcc7e9-42b3-4f3a-93ce-f6c1d7b9bf11
Content-Type: message/rfc822

From: Acme <hello@acme.test>
To: {rcpts[0]}
Subject: Your order

Thanks.

--b4fcc7e9-42b3-4f3a-93ce-f6c1d7b9bf11--
""")


def rfc5965_arf(rcpt: str = "user@example.com", verp: str = VERP) -> bytes:
    """RFC 5965 appendix B.2 (a complaint with the original message attached)."""
    return _crlf(f"""From: <abusedesk@example.com>
Date: Thu, 8 Mar 2005 17:40:36 EDT
Subject: FW: Earn money
To: <{verp}>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
     boundary="part1_13d.2e68ed54_boundary"

--part1_13d.2e68ed54_boundary
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP
192.0.2.1 on Thu, 8 Mar 2005 14:00:00 EDT.
For more information about this format please see
http://www.mipassoc.org/arf/.

--part1_13d.2e68ed54_boundary
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: SomeGenerator/1.0
Version: 1
Original-Mail-From: <somespammer@example.net>
Original-Rcpt-To: <{rcpt}>
Arrival-Date: Thu, 8 Mar 2005 14:00:00 EDT
Reporting-MTA: dns; mail.example.com
Source-IP: 192.0.2.1
Authentication-Results: mail.example.com;
               spf=fail smtp.mail=somespammer@example.com
Reported-Domain: example.net
Reported-Uri: http://example.net/earn_money.html
Reported-Uri: mailto:user@example.com
Removal-Recipient: user@example.com

--part1_13d.2e68ed54_boundary
Content-Type: message/rfc822
Content-Disposition: inline

From: <somespammer@example.net>
Received: from mailserver.example.net (mailserver.example.net
        [192.0.2.1]) by example.com with ESMTP id M63d4137594e46;
        Thu, 08 Mar 2005 14:00:00 -0400
To: <Undisclosed Recipients>
Subject: Earn money
MIME-Version: 1.0
Content-type: text/plain
Message-ID: 8787KJKJ3K4J3K4J3K4J3.mail@example.net
Date: Thu, 02 Sep 2004 12:31:03 -0500

Spam Spam Spam
Spam Spam Spam
Spam Spam Spam
Spam Spam Spam
--part1_13d.2e68ed54_boundary--
""")


def yahoo_arf(rcpt: str = "someone@yahoo.com", verp: str = VERP) -> bytes:
    """Yahoo's complaint feedback loop: ARF, the recipient shown in the enclosed headers only."""
    return _crlf(f"""From: Yahoo! Mail AntiSpam Feedback <feedback@arf.mail.yahoo.com>
To: {verp}
Subject: FW: Your order
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="----=_Part_1"

------=_Part_1
Content-Type: text/plain; charset=us-ascii

This is an email abuse report for an email message received from IP 198.51.100.7.

------=_Part_1
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: Yahoo!-Mail-Feedback/2.0
Version: 0.1
Original-Mail-From: <{verp}>
Arrival-Date: Wed, 25 Nov 2026 10:00:00 -0800
Reported-Domain: acme.test
Authentication-Results: mta1000.mail.gq1.yahoo.com from=acme.test; domainkeys=neutral; dkim=pass

------=_Part_1
Content-Type: text/rfc822-headers

Received: from 198.51.100.7 by mta1000.mail.gq1.yahoo.com with SMTP
From: Acme <hello@acme.test>
To: {rcpt}
Subject: Your order
Message-ID: <order-1@acme.test>

------=_Part_1--
""")


def outlook_jmrp(verp: str = VERP) -> bytes:
    """Microsoft's JMRP: ARF with the complaining recipient redacted."""
    return _crlf(f"""From: staff@hotmail.com
To: {verp}
Subject: complaint about message from 198.51.100.7
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="07B7061D2E6F5D5"

--07B7061D2E6F5D5
Content-Type: text/plain

This is an email abuse report for an email message received from IP 198.51.100.7

--07B7061D2E6F5D5
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: Hotmail FBL
Version: 0.1
Original-Mail-From: <{verp}>
Arrival-Date: Wed, 25 Nov 2026 10:00:00 -0800
Source-IP: 198.51.100.7

--07B7061D2E6F5D5
Content-Type: message/rfc822
Content-Disposition: inline

X-HmXmrOriginalRecipient: <removed>
From: Acme <hello@acme.test>
To: removedrecipient@hotmail.com
Subject: Your order

Thanks.

--07B7061D2E6F5D5--
""")


def out_of_office(verp: str = VERP) -> bytes:
    """An auto-reply (RFC 3834) sent to the return path, as Exchange does."""
    return _crlf(f"""From: Ann <ann@example.com>
To: <{verp}>
Subject: Automatic reply: Your order
Auto-Submitted: auto-replied
X-Auto-Response-Suppress: All
Content-Type: text/plain; charset=utf-8

I am out of the office until Monday.
""")


def plain_reply(verp: str = VERP) -> bytes:
    """A person's reply to the return path: neither a report nor an auto-reply."""
    return _crlf(f"""From: Ann <ann@example.com>
To: <{verp}>
Subject: Re: Your order

Where is it?
""")
