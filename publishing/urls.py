from __future__ import annotations

from django.urls import path

from publishing import views

app_name = "publishing"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    # The live partials htmx polls (publishing.live); each checks roles as its page does.
    path("live/briefs/", views.dashboard_live, name="dashboard_live"),
    path("briefs/<str:public_id>/live/", views.brief_live, name="brief_live"),
    path("briefs/<str:public_id>/revisions/<int:number>/live/", views.revision_live, name="revision_live"),
    path("briefs/new/", views.brief_new, name="brief_new"),
    path("briefs/<str:public_id>/", views.brief_detail, name="brief"),
    path("briefs/<str:public_id>/edit/", views.revision_edit, name="revision_edit"),
    # The edit page's script: autosave, heartbeat (presence), take over (publishing.actions.drafts).
    path("briefs/<str:public_id>/draft/", views.draft_save, name="draft_save"),
    path("briefs/<str:public_id>/draft/presence/", views.draft_presence, name="draft_presence"),
    path("briefs/<str:public_id>/draft/take-over/", views.draft_take_over, name="draft_take_over"),
    # The legal-review flag (publishing.actions.legal): raised by editors and approvers, lifted by Legal.
    path("briefs/<str:public_id>/legal-review/", views.legal_review_flag, name="legal_review_flag"),
    path("briefs/<str:public_id>/legal-review/lift/", views.legal_review_lift, name="legal_review_lift"),
    # Retraction (publishing.actions.retractions): approvers, through its confirm page.
    path("briefs/<str:public_id>/retract/", views.brief_retract, name="brief_retract"),
    path("briefs/<str:public_id>/source/", views.brief_source_edit, name="source_edit"),
    path("briefs/<str:public_id>/suggestions/<int:run_number>/use/", views.use_suggestion, name="use_suggestion"),
    path("briefs/<str:public_id>/revisions/<int:number>/", views.revision_detail, name="revision"),
    path("briefs/<str:public_id>/revisions/<int:number>/restore/", views.revision_restore, name="revision_restore"),
    path("briefs/<str:public_id>/compare/", views.revision_compare, name="compare"),
]
