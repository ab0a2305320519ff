"""E-mails: ``make_message(name, to, ctx)`` renders ``templates/emails/<name>-subject.txt``,
``<name>-body.txt`` and ``<name>-body.html`` into one message with a plain-text and an HTML part.

Each kind of e-mail is one short function below. Links are absolute, built from ``SITE_URL``
(read with a default, so it is optional: ``http://localhost:8000``).
"""

from __future__ import annotations

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string


def site_url(path: str = "") -> str:
    base = getattr(settings, "SITE_URL", "") or "http://localhost:8000"
    return base.rstrip("/") + path


def make_message(name: str, to: list[str] | str, ctx: dict) -> EmailMultiAlternatives:
    recipients = [to] if isinstance(to, str) else list(to)
    ctx = {"site_url": site_url(), "currency": settings.CURRENCY, **ctx}
    # A subject is one line: template newlines (and any injected ones) must not become headers.
    subject = " ".join(render_to_string(f"emails/{name}-subject.txt", ctx).split())
    text = render_to_string(f"emails/{name}-body.txt", ctx)
    html = render_to_string(f"emails/{name}-body.html", ctx)
    message = EmailMultiAlternatives(subject, text, settings.DEFAULT_FROM_EMAIL, recipients)
    message.attach_alternative(html, "text/html")
    return message


def alert(to: str, *, event, link: str, headers: dict | None = None) -> EmailMultiAlternatives:
    """A budget or rule transition: the subject names the scope and the threshold."""
    message = make_message("alert", to, {"event": event, "details": event.details, "link": link})
    message.extra_headers.update(headers or {})
    return message
