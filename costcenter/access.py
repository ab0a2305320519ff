"""Who may see what. Every page and API row is scoped through these functions."""

from __future__ import annotations

from django.db.models import QuerySet

from costcenter.models import OrgRole, Team, TeamRole


def org_role(user) -> str:
    if not user.is_authenticated:
        return OrgRole.NONE
    if user.is_superuser:
        return OrgRole.ADMIN
    profile = getattr(user, "profile", None)
    return profile.org_role if profile is not None else OrgRole.NONE


def sees_all_teams(user) -> bool:
    """Org-wide viewers (managers), org admins and superusers see every team."""
    return org_role(user) in {OrgRole.VIEWER, OrgRole.ADMIN}


def visible_teams(user) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    if sees_all_teams(user):
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


def team_role(user, team: Team) -> str | None:
    """The user's role in ``team``: org admins act as team admins, org viewers as viewers."""
    role = org_role(user)
    if role == OrgRole.ADMIN:
        return TeamRole.ADMIN
    membership = team.memberships.filter(user=user).first() if user.is_authenticated else None
    if membership is not None:
        return membership.role
    return TeamRole.VIEWER if role == OrgRole.VIEWER else None
