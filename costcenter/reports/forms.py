"""The user's own subscription settings."""

from __future__ import annotations

from zoneinfo import available_timezones

from django import forms

from costcenter.access import sees_all_teams
from costcenter.reports.models import Scope, Subscription, validate_time_zone


class SubscriptionForm(forms.ModelForm):
    time_zone = forms.CharField(
        max_length=64,
        validators=[validate_time_zone],
        help_text="e.g. Europe/Berlin; weeks start Monday 00:00 there",
    )
    send_hour = forms.TypedChoiceField(
        coerce=int, choices=[(hour, f"{hour:02d}:00") for hour in range(24)], initial=9
    )

    class Meta:
        model = Subscription
        fields = ["active", "frequency", "scope", "time_zone", "send_weekday", "send_hour"]
        labels = {"active": "Send me reports", "send_weekday": "Day (weekly)", "send_hour": "Time"}

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        if not sees_all_teams(user):
            # Only org-wide viewers (managers) may receive the whole organisation's report.
            self.fields["scope"].choices = [(Scope.TEAMS.value, Scope.TEAMS.label)]

    def clean_scope(self):
        scope = self.cleaned_data["scope"]
        if scope == Scope.ORG and not sees_all_teams(self.user):
            raise forms.ValidationError("Only org-wide viewers receive the whole organisation's report.")
        return scope


def time_zone_names() -> list[str]:
    return sorted(available_timezones())
