from __future__ import annotations

from django.urls import path

from approvals import views

app_name = "approvals"
urlpatterns = [
    path("briefs/<str:public_id>/revisions/<int:number>/decision/", views.decide, name="decide"),
    path("briefs/<str:public_id>/revisions/<int:number>/channels/", views.also_publish, name="also_publish"),
    path("briefs/<str:public_id>/revisions/<int:number>/schedule/", views.reschedule, name="reschedule"),
    path(
        "briefs/<str:public_id>/revisions/<int:number>/schedule/cancel/",
        views.cancel_schedule,
        name="cancel_schedule",
    ),
    path("briefs/<str:public_id>/assign/", views.assign, name="assign"),
    path("briefs/<str:public_id>/revisions/<int:number>/comments/", views.comment, name="comment"),
    path("briefs/<str:public_id>/revisions/<int:number>/comments/resolve/", views.resolve, name="resolve"),
    path("inbox/", views.inbox, name="inbox"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/read/", views.mark_read, name="mark_read"),
]
