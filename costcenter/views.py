"""Dashboard pages: parse the request, call one selector, render. Login is required everywhere."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone

from costcenter import charts, selectors
from costcenter.access import sees_all_teams


@login_required
def overview(request):
    catalog = selectors.catalog_overview(user=request.user, at=timezone.now())
    return render(
        request,
        "costcenter/overview.html",
        {
            "catalog": catalog,
            "gpus_chart": charts.gpus_by_pool(catalog.pools),
            "sees_all": sees_all_teams(request.user),
        },
    )


@login_required
def team_list(request):
    return render(request, "costcenter/teams.html", {"teams": selectors.team_rows(user=request.user)})


@login_required
def team_detail(request, slug: str):
    found = selectors.team_detail(user=request.user, slug=slug)
    if found is None:
        # Hidden and missing teams answer alike, so ids cannot be probed.
        raise Http404("No such team")
    team, members = found
    return render(request, "costcenter/team_detail.html", {"team": team, "members": members})
