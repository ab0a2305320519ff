"""Dashboard pages: parse the request, call one selector, render. Login is required everywhere."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from costcenter import charts, dashboards, selectors
from costcenter.access import sees_all_teams


def _budgets_url() -> str | None:
    try:
        return reverse("cc-budgets")
    except NoReverseMatch:
        return None


@login_required
def overview(request):
    """KPIs of a period against the one before, spend over time, top movers, budgets; the catalog."""
    from costcenter.page_views import _period_form, _selected, explorer_link

    now = timezone.now()
    period, problem = dashboards.period_or_default(request.GET, now=now)
    stack_by = request.GET.get("stack_by") or "model"
    problems = [problem] if problem else []
    if stack_by not in dashboards.DIMENSIONS:
        problems.append(f"stack_by: unknown dimension {stack_by!r}")
        stack_by = "model"
    filters = dashboards.parse_filters(request.GET, user=request.user)
    data = dashboards.overview(user=request.user, period=period, stack_by=stack_by, filters=filters)
    following = "team" if stack_by == "model" else "model"
    for mover in data.movers:
        mover.url = explorer_link(
            period=period,
            group_by=(following,),
            filters=[
                *(f for f in filters if f[0] != stack_by),
                (stack_by, ("" if mover.value is None else mover.value,)),
            ],
        )
    largest = max((abs(mover.delta) for mover in data.movers), default=0)
    for mover in data.movers:
        mover.width = round(float(abs(mover.delta) / largest) * 100) if largest else 0
    budgets, budget_count = dashboards.budget_glance(user=request.user, now=now)
    catalog = selectors.catalog_overview(user=request.user, at=now)
    return render(
        request,
        "costcenter/overview.html",
        {
            "data": data,
            "period": period,
            "period_form": _period_form(period),
            "problems": problems,
            "stack_by": stack_by,
            "dimensions": [(d, dashboards.DIMENSION_LABELS[d]) for d in dashboards.DIMENSIONS],
            "selected": _selected(filters),
            "filters": filters,
            "spend_chart": charts.spend_over_time(
                data.series_rows,
                dimension=stack_by,
                label_of=dashboards.label_of,
                unallocated_by_day=data.unallocated_by_day,
            ),
            "explore_url": explorer_link(period=period, group_by=(stack_by,), filters=filters),
            "budgets_url": _budgets_url(),
            "budgets": budgets,
            "budget_count": budget_count,
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
