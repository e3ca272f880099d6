from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from galley import health, metrics
from galley.api import api_urls
from galley.ops import views as ops

admin.site.site_header = "Galley operations"
admin.site.site_title = "Galley admin"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("ops/", ops.ops, name="ops"),
    path("ops/live/", ops.ops_live, name="ops_live"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", api_urls()),
    path("", include("approvals.urls")),
    path("", include("publishing.urls")),
]
