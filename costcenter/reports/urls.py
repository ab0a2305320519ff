from django.urls import path

from costcenter.reports import views

app_name = "reports"
urlpatterns = [
    path("", views.subscription_settings, name="settings"),
    path("preview/", views.preview, name="preview"),
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
]
