"""A receipt per channel (issue 21, point 4): each channel's state read from its own publish and
verify operations and publication, never another channel's; a constant number of queries for any
number of channels; the brief list's "published on N of M channels" and its partial filter."""

from __future__ import annotations

import datetime
import re

import pytest
from django.db import transaction
from django.utils import timezone

from publishing.actions.briefs import check_create_brief
from publishing.identities import PRIMARY_CHANNEL, PUBLISH, VERIFY, publish_key, verify_key
from publishing.models import Brief, Channel, Publication, Revision
from publishing.selectors.briefs import list_briefs
from publishing.selectors.channels import count_published_on, get_channel_receipts
from tests.schedules import database_now
from workers.actions.enqueue import enqueue_operation
from workers.actions.gates import pause_channel
from workers.errors import FailureKind
from workers.models import Operation, OperationStatus

pytestmark = pytest.mark.django_db

S = OperationStatus
HTMX = {"HTTP_HX_REQUEST": "true"}


def add_channel(slug: str, name: str) -> Channel:
    return Channel.objects.create(slug=slug, name=name, base_url=f"http://{slug}.example/")


def send(revision: Revision, channel: str, *, kind: str = PUBLISH) -> Operation:
    """The intent an approval writes for `revision` on `channel` (or its verify)."""
    public_id = revision.brief.public_id
    key = (publish_key if kind == PUBLISH else verify_key)(public_id, revision.number, channel)
    subject = {"subject_type": "brief", "subject_id": public_id, "subject_version": revision.number}
    with transaction.atomic():
        enqueued = enqueue_operation(key=key, kind=kind, payload_hash=revision.payload_hash, channel=channel, **subject)
    return enqueued.operation


def move(operation: Operation, status: str, **fields) -> None:
    """Move the operation as the workers would (the status trigger checks every step)."""
    now = timezone.now()
    if status != S.PENDING and operation.status == S.PENDING:
        Operation.objects.filter(pk=operation.pk).update(
            status=S.RUNNING, lease_owner="w1", lease_expires_at=now + datetime.timedelta(minutes=1), attempts=1
        )
    if status not in (S.PENDING, S.RUNNING):
        finished = {"finished_at": now} if status not in (S.RETRY_WAIT,) else {}
        Operation.objects.filter(pk=operation.pk).update(status=status, lease_owner="", **finished, **fields)


def publication(revision: Revision, channel: str, *, verified: bool) -> Publication:
    return Publication.objects.create(
        brief=revision.brief,
        revision=revision,
        channel=Channel.objects.get(slug=channel),
        operation_key=publish_key(revision.brief.public_id, revision.number, channel),
        payload_hash=revision.payload_hash,
        external_id=f"{channel}-1",
        permalink=f"http://{channel}.example/story/1",
        verified_at=timezone.now() if verified else None,
    )


@pytest.fixture
def revision(brief, revise) -> Revision:
    return revise(brief, "Dockers walked out at dawn.")


@pytest.fixture
def channels() -> list[str]:
    add_channel("partner-feed", "Partner feed")
    add_channel("newsletter", "Newsletter")
    return [PRIMARY_CHANNEL, "partner-feed", "newsletter"]


def states(brief: Brief) -> dict[str, str]:
    return {receipt.channel: receipt.state for receipt in get_channel_receipts(brief)}


def test_receipts__one_per_channel_sent_to__each_channels_state_from_its_own_operations(brief, revision, channels):
    queued, sending, waiting, published, verified, stuck, cancelled = (
        add_channel(slug, slug.title()).slug for slug in ("q", "s", "w", "p", "v", "n", "c")
    )
    operations = {
        slug: send(revision, slug) for slug in (queued, sending, waiting, published, verified, stuck, cancelled)
    }
    soon = timezone.now() + datetime.timedelta(minutes=3)
    move(operations[sending], S.RUNNING)
    move(operations[waiting], S.RETRY_WAIT, last_error_kind=FailureKind.TIMEOUT, next_attempt_at=soon)
    move(operations[published], S.SUCCEEDED)
    publication(revision, published, verified=False)
    move(operations[verified], S.SUCCEEDED)
    publication(revision, verified, verified=True)
    move(operations[stuck], S.CONFLICT, last_error_kind=FailureKind.KEY_CONFLICT, needs_operator=True)
    Operation.objects.filter(pk=operations[cancelled].pk).update(
        status=S.CANCELLED, finished_at=timezone.now(), last_error_message="cancelled by an operator: wrong desk"
    )

    receipts = {receipt.channel: receipt for receipt in get_channel_receipts(brief)}

    assert {slug: receipt.state for slug, receipt in receipts.items()} == {
        queued: "queued",
        sending: "sending",
        waiting: "waiting",
        published: "published",
        verified: "verified",
        stuck: "needs_operator",
        cancelled: "cancelled",
    }
    assert receipts[waiting].why == "W is not answering"  # the receipt names its own channel
    assert receipts[waiting].until == soon
    assert receipts[verified].permalink == "http://v.example/story/1"
    assert receipts[verified].verified_at is not None
    assert receipts[stuck].why.startswith("Needs an operator: N holds another text under this story's key")
    assert receipts[cancelled].why == "cancelled by an operator: wrong desk"
    assert {receipt.revision for receipt in receipts.values()} == {1}
    # Channels that were not sent this revision (the brief's others, added later) have no receipt.
    assert PRIMARY_CHANNEL not in receipts


def test_receipts__failed_verification_on_one_channel__needs_an_operator_there_only(brief, revision, channels):
    for slug in channels:
        move(send(revision, slug), S.SUCCEEDED)
        publication(revision, slug, verified=slug != "partner-feed")
    check = send(revision, "partner-feed", kind=VERIFY)
    move(check, S.DEAD, last_error_kind=FailureKind.VERIFICATION_MISMATCH, needs_operator=True)

    assert states(brief) == {PRIMARY_CHANNEL: "verified", "partner-feed": "needs_operator", "newsletter": "verified"}


def test_receipts__newer_revision_sent__receipts_are_the_newer_ones_and_superseded_ones_say_so(
    brief, revision, revise, channels
):
    older = {slug: send(revision, slug) for slug in channels}
    for operation in older.values():
        Operation.objects.filter(pk=operation.pk).update(
            status=S.SUPERSEDED, finished_at=timezone.now(), last_error_message="revision 2 replaces it"
        )
    newer = revise(brief, "Dockers walked out at dawn, in the rain.")
    send(newer, PRIMARY_CHANNEL)

    assert [(r.channel, r.revision, r.state) for r in get_channel_receipts(brief)] == [(PRIMARY_CHANNEL, 2, "queued")]
    first = get_channel_receipts(brief, revision.number)
    assert {(r.channel, r.state, r.why) for r in first} == {
        (slug, "superseded", "revision 2 replaces it") for slug in channels
    }


def test_receipts__primary_channel_first_then_by_name(brief, revision, channels):
    for slug in reversed(channels):
        send(revision, slug)

    assert [receipt.name for receipt in get_channel_receipts(brief)][1:] == ["Newsletter", "Partner feed"]
    assert get_channel_receipts(brief)[0].channel == PRIMARY_CHANNEL


@pytest.mark.parametrize("count", [1, 6])
def test_receipts__constant_queries_for_any_number_of_channels(brief, revision, count, django_assert_num_queries):
    slugs = [PRIMARY_CHANNEL] + [add_channel(f"extra-{n}", f"Extra {n}").slug for n in range(count - 1)]
    for slug in slugs:
        move(send(revision, slug), S.SUCCEEDED)
        publication(revision, slug, verified=True)

    with django_assert_num_queries(2):  # the operations; the channels with their publications
        receipts = get_channel_receipts(brief)

    assert len(receipts) == count


def test_receipts__nothing_sent__none_in_one_query(brief, revision, django_assert_num_queries):
    with django_assert_num_queries(1):
        assert get_channel_receipts(brief) == []


def test_published_on__counts_verified_channels_of_the_newest_sent_revision(brief, revision, channels):
    for slug in channels:
        move(send(revision, slug), S.SUCCEEDED)
    publication(revision, PRIMARY_CHANNEL, verified=True)
    publication(revision, "partner-feed", verified=True)
    publication(revision, "newsletter", verified=False)  # applied, not read back yet: not counted

    counted = count_published_on(brief)

    assert (counted.published, counted.channels, counted.partial) == (2, 3, True)
    assert str(counted) == "published on 2 of 3 channels"


def test_partial_filter__only_briefs_published_on_some_channels_not_all(editor, revise, channels):
    def brief_on(verified: list[str], sent: list[str]) -> Brief:
        made = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
        revision = revise(made, "Dockers walked out.")
        for slug in sent:
            move(send(revision, slug), S.SUCCEEDED)
            if slug in verified:
                publication(revision, slug, verified=True)
        return made

    partial = brief_on(verified=[PRIMARY_CHANNEL], sent=channels)
    brief_on(verified=channels, sent=channels)  # on every channel
    brief_on(verified=[], sent=channels)  # on none yet
    brief_on(verified=[PRIMARY_CHANNEL], sent=[PRIMARY_CHANNEL])  # one channel, published
    brief_on(verified=[], sent=[])  # never sent

    listed = list_briefs(partly_published=True)

    assert [b.public_id for b in listed] == [partial.public_id]
    assert len(listed) == 1
    assert (listed[0].receipt_published, listed[0].receipt_channels) == (1, 3)


def test_dashboard__says_published_on_2_of_3_and_filters_by_partial_publication(client, editor, revise, channels):
    partial = check_create_brief(title="Harbour strike", source_material="", acting_user=editor)
    revision = revise(partial, "Dockers walked out.")
    for slug in channels:
        move(send(revision, slug), S.SUCCEEDED)
        publication(revision, slug, verified=slug != "newsletter")
    whole = check_create_brief(title="Ferry strike", source_material="", acting_user=editor)
    client.force_login(editor)

    everything = client.get("/").content.decode()
    filtered = client.get("/", {"publication": "partial"}).content.decode()

    assert "Published on 2 of 3 channels" in everything
    assert whole.public_id in everything
    assert partial.public_id in filtered
    assert whole.public_id not in filtered
    assert '<option value="partial" selected>' in filtered


def test_brief_page__receipts_card_per_channel__redrawn_by_the_live_poll(client, editor, brief, revision, channels):
    operations = {slug: send(revision, slug) for slug in channels}
    client.force_login(editor)
    live = f"/briefs/{brief.public_id}/live/"

    first = client.get(live, **HTMX).content.decode()
    move(operations["partner-feed"], S.SUCCEEDED)
    publication(revision, "partner-feed", verified=True)
    later = client.get(live, **HTMX).content.decode()
    page = client.get(brief.get_absolute_url()).content.decode()

    receipt = r'<li class="receipt" data-channel="{}" data-state="{}">'
    for slug in channels:
        assert re.search(receipt.format(re.escape(slug), "queued"), first)
    assert re.search(receipt.format("partner-feed", "verified"), later)
    assert re.search(receipt.format("newsletter", "queued"), later)
    assert 'id="channel-receipts"' in page
    assert "Published on 1 of 3 channels." in later
    assert "http://partner-feed.example/story/1" in later


def test_revision_page__keeps_the_primary_publication_card_beside_the_receipts(
    client, editor, brief, revision, channels
):
    for slug in channels:
        send(revision, slug)
    client.force_login(editor)

    page = client.get(f"/briefs/{brief.public_id}/revisions/1/").content.decode()

    assert 'id="publication" data-state="publishing"' in page
    assert 'data-channel="newsletter" data-state="queued"' in page


def test_revision_page__keeps_polling_while_another_channel_is_under_way(
    client, editor, brief, revision, revise, channels
):
    move(send(revision, PRIMARY_CHANNEL), S.SUCCEEDED)
    publication(revision, PRIMARY_CHANNEL, verified=True)
    partner = send(revision, "partner-feed")
    revise(brief, "Dockers walked out at dawn, in the rain.")  # revision 1 is no longer current
    client.force_login(editor)
    live = f"/briefs/{brief.public_id}/revisions/1/live/"

    assert client.get(live, **HTMX).status_code == 200  # the partner feed may still change
    move(partner, S.SUCCEEDED)
    publication(revision, "partner-feed", verified=True)
    assert client.get(live, **HTMX).status_code == 286  # nothing left to change: htmx stops polling


def test_revision_page__publication_card_is_the_primary_channels__another_channels_publication_never_stands_in(
    client, editor, brief, revision, channels
):
    """The card speaks of the website (the primary channel's operations): the partner feed verified
    first leaves it publishing, with no permalink of the partner feed's as the website's."""
    send(revision, PRIMARY_CHANNEL)
    move(send(revision, "partner-feed"), S.SUCCEEDED)
    publication(revision, "partner-feed", verified=True)
    client.force_login(editor)

    page = client.get(f"/briefs/{brief.public_id}/revisions/1/").content.decode()

    assert 'id="publication" data-state="publishing"' in page
    assert 'data-testid="permalink"' not in page
    assert 'data-channel="partner-feed" data-state="verified"' in page


def test_i15_receipt__overdue_schedule__says_scheduled_for_overdue_by_and_why_it_waits(
    client, editor, brief, revision, channels, settings
):
    """The overdue rule (publishing.selectors.overdue) on the brief page: only the late channel's receipt
    says so, with its T, how late it is and its channel's 429 pause until when."""
    settings.GALLEY_SCHEDULE_LATENESS_SECONDS = 60
    operations = {slug: send(revision, slug) for slug in channels}
    for slug in ("partner-feed", "newsletter"):
        ago = 150 if slug == "partner-feed" else 30  # the newsletter's T is within the lateness
        Operation.objects.filter(id=operations[slug].id).update(
            scheduled_for=database_now() - datetime.timedelta(seconds=ago)
        )
    until = pause_channel("partner-feed", seconds=180, reason="the target answered 429")

    receipts = {receipt.channel: receipt for receipt in get_channel_receipts(brief)}
    late = receipts["partner-feed"]
    assert (late.state, late.overdue_by) == ("queued", "2 min")
    assert late.overdue_why == f"partner-feed waiting: the target answered 429 until {until:%H:%M:%S} UTC"
    assert receipts["newsletter"].overdue_by == receipts[PRIMARY_CHANNEL].overdue_by == ""
    client.force_login(editor)
    page = client.get(brief.get_absolute_url()).content.decode()
    assert re.search(
        r'scheduled for <time datetime="[^"]+">\d\d:\d\d</time> — <strong>overdue by 2 min</strong>; '
        r"partner-feed waiting: the target answered 429 until",
        page,
    )
    assert page.count('data-testid="receipt-overdue"') == 1


def test_dashboard__schedule_filter__scheduled_and_overdue_briefs(client, editor, revise, settings):
    """ "Scheduled": a schedule no worker has claimed yet (T ahead or just passed); "overdue": the overdue rule's."""
    settings.GALLEY_SCHEDULE_LATENESS_SECONDS = 60
    briefs = {}
    for name, ago in (("ahead", -600), ("overdue", 600), ("unscheduled", None), ("fired", -600)):
        brief = check_create_brief(title=f"Story {name}", source_material="", acting_user=editor)
        publish = send(revise(brief, f"{name}."), PRIMARY_CHANNEL)
        if ago is not None:
            Operation.objects.filter(id=publish.id).update(
                scheduled_for=database_now() - datetime.timedelta(seconds=ago)
            )
        if name == "fired":
            move(publish, S.RUNNING)
        briefs[name] = brief.public_id
    client.force_login(editor)

    def listed(schedule: str) -> set[str]:
        html = client.get("/", {"schedule": schedule}).content.decode()
        return {name for name, public_id in briefs.items() if f"/briefs/{public_id}/" in html}

    assert listed("scheduled") == {"ahead", "overdue"}
    assert listed("overdue") == {"overdue"}
    assert listed("") == set(briefs)
    assert '<option value="overdue" selected>' in client.get("/", {"schedule": "overdue"}).content.decode()
