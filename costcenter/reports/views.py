"""Report pages: the user's subscription settings, a browser preview, one-click unsubscribe."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from costcenter.emails import site_url
from costcenter.models import UserProfile
from costcenter.reports import images
from costcenter.reports.content import build_report
from costcenter.reports.forms import SubscriptionForm, time_zone_names
from costcenter.reports.mail import context, subscription_id_from
from costcenter.reports.models import ReportDelivery, Subscription
from costcenter.reports.periods import last_complete


def own_subscription(user) -> Subscription:
    """The user's personal subscription, or an unsaved default in the user's time zone."""
    found = Subscription.objects.filter(user=user, email="").first()
    if found is not None:
        return found
    profile = UserProfile.objects.filter(user=user).first()
    return Subscription(user=user, active=False, time_zone=profile.time_zone if profile else "UTC")


@login_required
@require_http_methods(["GET", "POST"])
def subscription_settings(request):
    subscription = own_subscription(request.user)
    form = SubscriptionForm(request.POST or None, instance=subscription, user=request.user)
    if request.method == "POST" and form.is_valid():
        saved = form.save(commit=False)
        saved.user = request.user
        if saved.active:
            saved.unsubscribed_at = None
        saved.save()
        messages.success(request, "Report settings saved." if saved.active else "Reports are off.")
        return redirect("reports:settings")
    recent = ReportDelivery.objects.filter(subscription__user=request.user).order_by("-period_start")[:10]
    return render(
        request,
        "reports/settings.html",
        {"form": form, "subscription": subscription, "deliveries": recent, "zones": time_zone_names()},
    )


@login_required
def preview(request):
    """The signed-in user's report of the last complete period, exactly as the mail's HTML part,
    with the charts as data: URIs (the site's CSP allows ``img-src data:``)."""
    subscription = own_subscription(request.user)
    now = timezone.now()
    period = last_complete(subscription.frequency, subscription.time_zone, now)
    report = build_report(subscription, period, now=now)
    charts, note = (
        images.render(report) if request.GET.get("charts") != "0" else ([], "Charts are off (charts=0).")
    )
    ctx = {
        "site_url": site_url(),
        "currency": settings.CURRENCY,
        **context(report, subscription, charts=charts, charts_note=note, inline=False),
    }
    html = render_to_string("emails/report-body.html", ctx)
    # Like every page (base.html): no favicon request, which would be a 404 in the console.
    return HttpResponse(html.replace("</head>", '<link rel="icon" href="data:,"></head>', 1))


@csrf_exempt  # mail clients POST one-click unsubscribes (RFC 8058) without a CSRF token; the signed token is the credential
@require_http_methods(["GET", "POST"])
def unsubscribe(request, token: str):
    """GET shows one button (link scanners that prefetch URLs must not unsubscribe anyone);
    POST — the button or the mail client's one-click — turns the subscription off."""
    subscription_id = subscription_id_from(token)
    subscription = Subscription.objects.filter(pk=subscription_id).first() if subscription_id else None
    if subscription is None:
        return render(request, "reports/unsubscribe.html", {"invalid": True}, status=404)
    if request.method == "POST":
        if subscription.active:
            Subscription.objects.filter(pk=subscription.pk).update(
                active=False, unsubscribed_at=timezone.now()
            )
        return render(request, "reports/unsubscribe.html", {"done": True, "subscription": subscription})
    return render(request, "reports/unsubscribe.html", {"subscription": subscription, "token": token})
