"""`manage.py check_target` against a real reference target: it says what it found, or exactly
what is wrong, and exits non-zero then."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from galley.reference_target import ReferenceTarget
from tests.processes import free_port

TOKEN = "check-target-token"


@pytest.fixture
def target(tmp_path: Path, settings) -> Iterator[ReferenceTarget]:
    with ReferenceTarget(db_path=tmp_path / "target.sqlite3", token=TOKEN) as target:
        settings.GALLEY_TARGET_KIND = "reference"
        settings.GALLEY_TARGET_URL = target.url
        settings.GALLEY_TARGET_TOKEN = TOKEN
        yield target


def test_check_target__reference_target__ok(target):
    out = StringIO()
    call_command("check_target", stdout=out)
    assert (
        out.getvalue()
        == f"target ok: §7.4 target at {target.url}: it answers the protocol and accepts GALLEY_TARGET_TOKEN\n"
    )
    assert target.ledger() == []


def test_check_target__wrong_token__says_which_setting(target, settings):
    settings.GALLEY_TARGET_TOKEN = "not-the-token"
    with pytest.raises(CommandError, match=r"not ready: The target refused our credentials; check GALLEY_TARGET_TOKEN"):
        call_command("check_target")


def test_check_target__nothing_listening__says_so(settings):
    settings.GALLEY_TARGET_URL = f"http://127.0.0.1:{free_port()}"
    settings.GALLEY_TARGET_TOKEN = TOKEN
    with pytest.raises(CommandError, match=r"not ready: Connection to the target failed"):
        call_command("check_target")
