from __future__ import annotations

from django.urls import path

from publishing import views

app_name = "publishing"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("briefs/new/", views.brief_new, name="brief_new"),
    path("briefs/<str:public_id>/", views.brief_detail, name="brief"),
    path("briefs/<str:public_id>/edit/", views.revision_edit, name="revision_edit"),
    path("briefs/<str:public_id>/source/", views.brief_source_edit, name="source_edit"),
    path("briefs/<str:public_id>/suggestions/<int:run_number>/use/", views.use_suggestion, name="use_suggestion"),
    path("briefs/<str:public_id>/revisions/<int:number>/", views.revision_detail, name="revision"),
]
