from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from costcenter import views

admin.site.site_header = "CostCenter administration"
admin.site.site_title = "CostCenter"

urlpatterns = [
    path("", views.overview, name="cc-overview"),
    path("teams/", views.team_list, name="cc-teams"),
    path("teams/<slug:slug>/", views.team_detail, name="cc-team"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
