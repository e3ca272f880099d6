"""Comment threads on a revision: post, reply, resolve and reopen; shown on the revision and brief
pages; refusals keep the typed text; the database keeps threads one level deep and comments as written."""

from __future__ import annotations

from html import escape

import pytest
from django.db import IntegrityError, InternalError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from approvals.actions import COMMENT_MAX_CHARS, check_post_comment, check_resolve_thread
from approvals.models import Comment
from publishing.errors import NotFound
from publishing.models import Revision
from tests.web import TO_LOGIN, Outcome, assert_outcome, client_for, db_counts, page_forms, refused
from workers.models import AuditEvent

pytestmark = pytest.mark.django_db


def comment_url(revision: Revision) -> str:
    return reverse("approvals:comment", args=[revision.brief.public_id, revision.number])


def resolve_url(revision: Revision) -> str:
    return reverse("approvals:resolve", args=[revision.brief.public_id, revision.number])


def post(revision: Revision, body: str, *, by: object, reply_to: Comment | None = None) -> Comment:
    """What the comment view does: one durable transaction around the action."""
    with transaction.atomic(durable=True):
        return check_post_comment(
            revision.brief.public_id,
            revision_number=revision.number,
            body=body,
            reply_to=reply_to.pk if reply_to else None,
            acting_user=by,
        )


@pytest.fixture
def revision(brief, revise) -> Revision:
    return revise(brief, "Dockers walked out at dawn.")


@pytest.mark.parametrize("role", ["editor", "approver", "operator", "no_group", "anonymous"])
def test_comment__permission_matrix(role, users, revision):
    path = comment_url(revision)
    outcome = {
        "editor": Outcome(302, writes={"AuditEvent": 1}),
        "approver": Outcome(302, writes={"AuditEvent": 1}),
        "operator": refused("Only members of Editors or Approvers can comment on a revision."),
        "no_group": refused("Only members of Editors or Approvers can comment on a revision."),
        "anonymous": TO_LOGIN,
    }[role]
    before = db_counts()

    response = client_for(users[role]).post(path, {"body": "Which union?"})

    assert_outcome(response, outcome, path=path, before=before)
    if role in ("editor", "approver"):
        thread = Comment.objects.get()
        assert response["Location"] == f"{revision.get_absolute_url()}#comment-{thread.pk}"


def test_thread__comment_reply_and_reply_to_a_reply__one_thread(editor, approver, revision):
    thread = post(revision, "Which union called the strike?", by=approver)
    reply = post(revision, "The dockers' union; added in the next revision.", by=editor, reply_to=thread)

    again = post(revision, "Thanks.", by=approver, reply_to=reply)

    assert reply.parent == thread and again.parent == thread
    assert [c.body for c in thread.replies.order_by("id")] == [reply.body, again.body]
    assert list(AuditEvent.objects.order_by("id").values_list("event_type", flat=True))[-3:] == [
        "comment.posted",
        "comment.replied",
        "comment.replied",
    ]


def test_thread__resolve_then_reopen__audited_and_idempotent(editor, approver, revision):
    thread = post(revision, "Which union?", by=approver)
    reply = post(revision, "Added.", by=editor, reply_to=thread)

    def resolve(resolved: bool, *, via: Comment) -> bool:
        with transaction.atomic(durable=True):
            _thread, changed = check_resolve_thread(
                revision.brief.public_id,
                revision_number=revision.number,
                comment_id=via.pk,
                resolved=resolved,
                acting_user=approver,
            )
        return changed

    assert resolve(True, via=reply)
    thread.refresh_from_db()
    assert thread.resolved_at is not None and thread.resolved_by == approver
    audits = AuditEvent.objects.count()
    assert not resolve(True, via=thread)
    assert AuditEvent.objects.count() == audits

    assert resolve(False, via=thread)
    thread.refresh_from_db()
    assert thread.resolved_at is None and thread.resolved_by is None
    assert list(
        AuditEvent.objects.filter(event_type__in=["comment.resolved", "comment.reopened"])
        .order_by("id")
        .values_list("event_type", flat=True)
    ) == ["comment.resolved", "comment.reopened"]


def test_resolve_view__redirects_to_thread(approver, revision):
    thread = post(revision, "Which union?", by=approver)

    response = client_for(approver).post(resolve_url(revision), {"comment": str(thread.pk), "resolved": "1"})

    assert response.status_code == 302
    assert response["Location"] == f"{revision.get_absolute_url()}#comment-{thread.pk}"
    thread.refresh_from_db()
    assert thread.resolved_by == approver


def test_pages__threads_on_revision_and_brief_pages(editor, approver, revision):
    thread = post(revision, "Which union called the strike?", by=approver)
    post(revision, "The dockers' union.", by=editor, reply_to=thread)

    page = client_for(editor).get(revision.get_absolute_url())
    assertContains(page, f'id="comment-{thread.pk}"')
    assertContains(page, "Which union called the strike?")
    assertContains(page, escape("The dockers' union."))
    assertContains(page, "Resolve thread")
    assertContains(page, 'id="comment-form"')

    brief_page = client_for(approver).get(revision.brief.get_absolute_url())
    assertContains(brief_page, f'href="{revision.get_absolute_url()}#comment-{thread.pk}">Revision 1</a>', html=False)
    assertContains(brief_page, escape("The dockers' union."))


def test_pages__operator_sees_threads_without_forms(operator, approver, revision):
    post(revision, "Which union?", by=approver)

    page = client_for(operator).get(revision.get_absolute_url())

    assertContains(page, "Which union?")
    assertNotContains(page, 'id="comment-form"')
    assertNotContains(page, "Resolve thread")


# --- refusals: a clear message, nothing written, the typed text kept -----------------------------------


@pytest.mark.parametrize(
    ("body", "message", "shown"),
    [
        ("   ", "Comment is required.", ""),
        ("a\x00b", "Comment contains a NUL character, which cannot be stored.", "a\x00b"),
        (
            "x" * (COMMENT_MAX_CHARS + 1),
            f"Comment is {COMMENT_MAX_CHARS + 1:,} characters long; the limit is {COMMENT_MAX_CHARS:,}.",
            "x" * (COMMENT_MAX_CHARS + 1),
        ),
    ],
)
def test_comment__bad_text__400_message_and_text_kept(body, message, shown, approver, revision):
    before = db_counts(), Comment.objects.count()

    response = client_for(approver).post(comment_url(revision), {"body": body})

    assertContains(response, escape(message), status_code=400)
    assert (db_counts(), Comment.objects.count()) == before
    if shown:
        assert f'id="new-comment" rows="3">{escape(shown)}</textarea>' in response.content.decode()


def test_reply__bad_text__kept_in_that_threads_reply_form(approver, revision):
    thread = post(revision, "Which union?", by=approver)

    response = client_for(approver).post(
        comment_url(revision), {"body": "y" * (COMMENT_MAX_CHARS + 5), "reply_to": str(thread.pk)}
    )

    content = response.content.decode()
    assert response.status_code == 400
    assert f'id="reply-{thread.pk}" rows="2">{"y" * (COMMENT_MAX_CHARS + 5)}</textarea>' in content
    assert 'id="new-comment" rows="3"></textarea>' in content


def test_comment__not_utf8__400_names_the_field_and_writes_nothing(approver, revision):
    before = Comment.objects.count()

    response = client_for(approver).post(
        comment_url(revision), b"body=caf%E9", content_type="application/x-www-form-urlencoded"
    )

    assertContains(response, "Comment: the text sent is not valid UTF-8", status_code=400)
    assert Comment.objects.count() == before


@pytest.mark.parametrize("reply_to", ["abc", "-1", "99999999999999999999", "0"])
def test_reply__to_no_comment__refused_text_kept(reply_to, approver, revision):
    response = client_for(approver).post(comment_url(revision), {"body": "Still here.", "reply_to": reply_to})

    assert response.status_code in (400, 404)
    assertContains(response, "Still here.", status_code=response.status_code)
    assert not Comment.objects.exists()


def test_reply__to_a_parent_that_does_not_exist__refused_kept_apart_never_a_new_thread(approver, revision):
    thread = post(revision, "Which union?", by=approver)
    missing = thread.pk + 1000

    response = client_for(approver).post(comment_url(revision), {"body": "The dockers'.", "reply_to": str(missing)})

    assert response.status_code == 404
    forms = {form["_attrs"].get("id"): form for form in page_forms(response)}
    refused = forms["refused-reply"]
    assert refused["body"] == "The dockers'."  # kept, in a form of its own that says it was not posted
    assert "reply_to" not in refused  # posting it again makes a new thread only when the author says so
    assert forms["comment-form"]["body"] == ""  # the new-thread form is not pre-filled with the reply
    assertContains(
        response,
        escape(f"Your reply was not posted: comment {missing} is not on revision 1"),
        status_code=404,
    )
    assertContains(response, "Post it as a new thread instead", status_code=404)
    assert list(Comment.objects.values_list("pk", flat=True)) == [thread.pk]


def test_reply__to_a_comment_of_another_revision__not_found(approver, brief, revise, revision):
    thread = post(revision, "Which union?", by=approver)
    second = revise(brief, "Dockers returned at noon.")

    with pytest.raises(NotFound), transaction.atomic():
        check_post_comment(
            brief.public_id, revision_number=second.number, body="Hm.", reply_to=thread.pk, acting_user=approver
        )


@pytest.mark.parametrize("comment", ["", "abc", "99999999999999999999"])
def test_resolve__no_such_comment__refused(comment, approver, revision):
    response = client_for(approver).post(resolve_url(revision), {"comment": comment, "resolved": "1"})

    assert response.status_code in (400, 404)


# --- the database's guards -----------------------------------------------------------------------------


def test_db__reply_to_a_reply__refused(editor, approver, revision):
    thread = post(revision, "Which union?", by=approver)
    reply = post(revision, "The dockers'.", by=editor, reply_to=thread)

    with pytest.raises(IntegrityError, match="is not a thread of revision"), transaction.atomic():
        Comment.objects.create(revision=revision, parent=reply, author=approver, body="Nested.")


def test_db__reply_on_another_revision__refused(approver, brief, revise, revision):
    thread = post(revision, "Which union?", by=approver)
    second = revise(brief, "Dockers returned at noon.")

    with pytest.raises(IntegrityError, match="is not a thread of revision"), transaction.atomic():
        Comment.objects.create(revision=second, parent=thread, author=approver, body="Elsewhere.")


def test_db__comment_text_never_changes(approver, revision):
    thread = post(revision, "Which union?", by=approver)

    with (
        pytest.raises((IntegrityError, InternalError), match="only a thread's resolution may change"),
        transaction.atomic(),
    ):
        Comment.objects.filter(id=thread.pk).update(body="Rewritten.")


def test_db__empty_comment_and_resolved_reply__refused(editor, approver, revision):
    thread = post(revision, "Which union?", by=approver)
    reply = post(revision, "The dockers'.", by=editor, reply_to=thread)

    with pytest.raises(IntegrityError, match="comment_body_not_empty"), transaction.atomic():
        Comment.objects.create(revision=revision, author=approver, body="")
    with pytest.raises(IntegrityError, match="comment_only_threads_resolved"), transaction.atomic():
        Comment.objects.filter(id=reply.pk).update(resolved_at=timezone.now(), resolved_by=approver)


def test_query_count__revision_and_brief_pages__independent_of_threads_and_replies(
    editor, approver, revision, django_assert_num_queries
):
    client = client_for(editor)
    first = post(revision, "Which union?", by=approver)
    post(revision, "The dockers'.", by=editor, reply_to=first)
    with CaptureQueriesContext(connection) as revision_page:
        client.get(revision.get_absolute_url())
    with CaptureQueriesContext(connection) as brief_page:
        client.get(revision.brief.get_absolute_url())
    for n in range(5):
        thread = post(revision, f"Point {n}.", by=approver)
        for m in range(3):
            post(revision, f"Answer {n}.{m}.", by=editor, reply_to=thread)

    with django_assert_num_queries(len(revision_page)):
        assertContains(client.get(revision.get_absolute_url()), "Answer 4.2.")
    with django_assert_num_queries(len(brief_page)):
        assertContains(client.get(revision.brief.get_absolute_url()), "Answer 4.2.")
