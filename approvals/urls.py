from __future__ import annotations

from django.urls import path

from approvals import views

app_name = "approvals"
urlpatterns = [
    path("briefs/<str:public_id>/revisions/<int:number>/decision/", views.decide, name="decide"),
]
