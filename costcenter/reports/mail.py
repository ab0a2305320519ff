"""The report as a MIME message: text/plain and inline-styled text/html alternatives, with the
charts as inline PNGs (``cid:``) in a multipart/related wrapper, and one-click unsubscribe headers
(RFC 2369 ``List-Unsubscribe`` + RFC 8058 ``List-Unsubscribe-Post``).
"""

from __future__ import annotations

from email.mime.image import MIMEImage
from urllib.parse import urlsplit

from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.urls import reverse

from costcenter.emails import make_message, site_url
from costcenter.reports.content import Report, idle_change
from costcenter.reports.images import Chart
from costcenter.reports.models import Subscription

UNSUBSCRIBE_SALT = "costcenter.reports.unsubscribe"


def unsubscribe_token(subscription: Subscription) -> str:
    """A signed, non-expiring token naming the subscription: links in old mails keep working."""
    return signing.dumps({"s": subscription.pk}, salt=UNSUBSCRIBE_SALT, compress=False)


def subscription_id_from(token: str) -> int | None:
    try:
        return int(signing.loads(token, salt=UNSUBSCRIBE_SALT)["s"])
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        return None


def unsubscribe_url(subscription: Subscription) -> str:
    return site_url(reverse("reports:unsubscribe", kwargs={"token": unsubscribe_token(subscription)}))


def context(
    report: Report, subscription: Subscription, *, charts: list, charts_note: str, inline: bool
) -> dict:
    """Template context; ``inline`` images are ``cid:`` references (mail) or data: URIs (preview)."""
    import base64

    images = [
        {
            "cid": chart.cid,
            "title": chart.title,
            "alt": chart.alt,
            "src": f"cid:{chart.cid}"
            if inline
            else "data:image/png;base64," + base64.b64encode(chart.png).decode(),
        }
        for chart in charts
    ]
    return {
        "report": report,
        "subscription": subscription,
        "kpis": report.kpis,
        "idle_change": idle_change(report),
        "charts": images,
        "charts_note": charts_note,
        "unsubscribe_url": unsubscribe_url(subscription) if subscription.pk else "",
        "links": report.links,
    }


def _message_domain() -> str:
    return urlsplit(site_url()).hostname or "localhost"


def build_message(
    report: Report,
    subscription: Subscription,
    *,
    charts: list[Chart],
    charts_note: str,
    delivery_id: int | None = None,
) -> EmailMultiAlternatives:
    ctx = context(report, subscription, charts=charts, charts_note=charts_note, inline=True)
    message = make_message("report", subscription.recipient, ctx)
    if charts:
        # multipart/related around the alternatives: mail clients resolve cid: against its parts.
        message.mixed_subtype = "related"
        for chart in charts:
            image = MIMEImage(chart.png, "png")
            image.add_header("Content-ID", f"<{chart.cid}>")
            image.add_header("Content-Disposition", "inline", filename=f"{chart.cid}.png")
            message.attach(image)
    headers = {"Auto-Submitted": "auto-generated", "X-CostCenter-Report": report.period.first_day.isoformat()}
    if subscription.pk:
        url = unsubscribe_url(subscription)
        headers["List-Unsubscribe"] = f"<{url}>"
        headers["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    if delivery_id is not None:
        # Stable across retries, so a receiver (or a person) can tell a resend from a new report.
        headers["Message-ID"] = f"<costcenter-report-{delivery_id}@{_message_domain()}>"
        headers["X-CostCenter-Delivery"] = str(delivery_id)
    message.extra_headers.update(headers)
    return message
