"""The API tokens page: create a token (shown once) and revoke your own tokens."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from costcenter.models import ApiToken, TokenScope
from costcenter.tokens import api_token_create, api_token_revoke

EXPIRY_CHOICES = [("30", "30 days"), ("90", "90 days"), ("365", "1 year"), ("", "Never")]


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, help_text="e.g. the service that will use it")
    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.READ)
    expires_days = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES, coerce=int, empty_value=None, required=False, initial="90"
    )


@never_cache  # the page may carry a freshly created token: never keep it in a cache
@login_required
@require_http_methods(["GET", "POST"])
def token_list(request):
    """GET lists your tokens; POST creates one, or revokes one when the form names ``revoke``."""
    if request.method == "POST" and "revoke" in request.POST:
        return _revoke(request, request.POST["revoke"])
    form = ApiTokenForm(request.POST or None)
    new_token: str | None = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            days = form.cleaned_data["expires_days"]
            _, new_token = api_token_create(
                user=request.user,
                scope=form.cleaned_data["scope"],
                name=form.cleaned_data["name"],
                expires_at=timezone.now() + timedelta(days=days) if days else None,
            )
            # Rendered, not redirected: the token must not pass through the session or messages,
            # and this response is the only place it ever appears.
            form = ApiTokenForm()
        else:
            status = 400
    tokens = ApiToken.objects.filter(user=request.user)
    return render(
        request,
        "costcenter/tokens.html",
        {"form": form, "new_token": new_token, "tokens": tokens, "now": timezone.now()},
        status=status,
    )


def _revoke(request, token_id: str):
    if not token_id.isdigit():
        raise Http404("No such token")
    # Other users' tokens answer 404 exactly like missing ones, so ids cannot be probed.
    token = get_object_or_404(ApiToken, pk=int(token_id), user=request.user)
    api_token_revoke(token=token, by_user=request.user)
    messages.success(request, f"Token {token.prefix}… revoked; requests using it now get 401.")
    return redirect("cc-tokens")
