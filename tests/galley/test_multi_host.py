"""A multi-host deployment (issue 12 item 4, docs/operations.md#several-hosts): one PostgreSQL, one web
process, and two worker hosts each running `manage.py qcluster`; publications spread across both hosts.

This machine plays the database host (PostgreSQL, the reference target) and the web host (gunicorn, as
`make serve` runs it). Each worker host is a network namespace with a hostname of its own (so its
worker ids, hostname:pid, say which host did the work), reaching PostgreSQL and the target over its
links (tests/netns.py), configured only through the environment docs/configuration.md lists. Approvers approve
through the web process's decision form; its commits ring the doorbell, and both hosts' clusters
claim from the same tables. Every publication is applied once, verified once, and both hosts did some.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest
from django.test import Client

from publishing.identities import publish_key, verify_key
from publishing.models import Brief
from tests import netns
from tests.acceptance import test_worker_partition as partition
from tests.acceptance.test_crash_points import TOKEN, worker_env, write_revision
from tests.processes import Child, child_database_url, free_port, process_env, start, stop, wait_for_http, wait_until
from tests.web import form_values
from workers.models import Attempt, Operation

# The worker hosts, their forwarded database port and process bookkeeping, as in the partition test.
network = partition.network
database_port = partition.database_port
processes = partition.processes

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PUBLICATIONS = 20
# Each target call takes this long, and each host keeps few calls in flight: neither host can take
# every operation before the other claims some.
TARGET_LATENCY_MS = 150
CALLS_PER_HOST = 2


def start_cluster(keep, host: netns.Host, hostname: str, *, env: dict[str, str]) -> Child:
    """`manage.py qcluster` on `host`, in a UTS namespace of its own named `hostname`."""
    script = f"hostname {shlex.quote(hostname)} && exec {shlex.quote(sys.executable)} manage.py qcluster"

    def popen(log: Path) -> subprocess.Popen[str]:
        with open(log, "a") as out:
            return subprocess.Popen(
                host.command("unshare", "--uts", "sh", "-c", script),
                cwd=netns.BASE_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )

    return keep(hostname, popen)


def start_web(keep, *, env: dict[str, str]) -> str:
    """gunicorn on a free port of this machine, as `make serve` runs it; its base URL."""
    port = free_port()
    argv = ["-m", "gunicorn", "galley.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2"]
    child = keep("web", lambda log: start(argv, env=env, log=log))
    base = f"http://127.0.0.1:{port}"
    wait_for_http(f"{base}/readyz", process=child.process, timeout=120)
    return base


def approve_through_the_web(base: str, session_cookie: str, revision) -> None:
    with httpx.Client(base_url=base, cookies={"sessionid": session_cookie}, timeout=30) as browser:
        page = browser.get(revision.get_absolute_url())
        assert page.status_code == 200, page.text[:2000]
        values = form_values(page, containing="payload_hash")
        values["decision"] = "approved"
        answer = browser.post(
            f"/briefs/{revision.brief.public_id}/revisions/{revision.number}/decision/",
            data=values,
            headers={"X-CSRFToken": browser.cookies.get("csrftoken", "")},
        )
        assert answer.status_code == 302, answer.text[:2000]


def test_two_worker_hosts__publications_spread_across_both(
    network, database_port, processes, tmp_path, editor, approver
):
    target = partition.start_target(processes, network, tmp_path, "--latency-ms", str(TARGET_LATENCY_MS))
    web = start_web(
        processes,
        env=process_env(
            DATABASE_URL=child_database_url(),
            DEBUG="false",
            SECURE_COOKIES="false",  # plain HTTP in this test; production serves HTTPS
            GALLEY_TARGET_URL=target.url,
            GALLEY_TARGET_TOKEN=TOKEN,
        ),
    )
    clusters = []
    for name in ("a", "b"):
        env = worker_env(target, GALLEY_Q_WORKERS="1", GALLEY_WORKER_CONCURRENCY=str(CALLS_PER_HOST))
        env["DATABASE_URL"] = partition.database_url(network, database_port)
        clusters.append(start_cluster(processes, network.hosts[name], f"host-{name}", env=env))
    for cluster in clusters:
        cluster.wait_for_output("running.", timeout=120)

    revisions = [write_revision(editor, title=f"Harbour strike, day {day}") for day in range(1, PUBLICATIONS + 1)]
    approver_session = Client()
    approver_session.force_login(approver)
    for revision in revisions:
        approve_through_the_web(web, approver_session.cookies["sessionid"].value, revision)

    briefs = Brief.objects.filter(id__in=[revision.brief_id for revision in revisions])
    wait_until(
        lambda: briefs.filter(published_revision_number=1).count() == PUBLICATIONS,
        timeout=240,
        what=f"{PUBLICATIONS} briefs published\n" + "\n".join(cluster.output()[-3000:] for cluster in clusters),
    )

    # Each publication applied once at the target and verified once: in its publish's attempt (no verify
    # operation), or by its verify operation.
    keys = [publish_key(revision.brief.public_id, 1) for revision in revisions]
    assert sorted(row["operation_key"] for row in target.applications()) == sorted(keys)
    verify_keys = [verify_key(revision.brief.public_id, 1) for revision in revisions]
    operations = Operation.objects.filter(key__in=keys + verify_keys)
    assert set(operations.values_list("status", flat=True)) == {"succeeded"}
    assert Operation.objects.filter(key__in=keys).count() == PUBLICATIONS
    succeeded = Attempt.objects.filter(operation__in=operations, outcome=Attempt.Outcome.SUCCEEDED)
    assert Counter(succeeded.values_list("operation__key", flat=True)) == dict.fromkeys(
        operations.values_list("key", flat=True), 1
    )

    # Both hosts did some of the work: worker ids are hostname:pid.
    by_host = Counter(worker_id.split(":")[0] for worker_id in succeeded.values_list("worker_id", flat=True))
    assert set(by_host) == {"host-a", "host-b"}, by_host

    for cluster in clusters:
        assert cluster.process.poll() is None, cluster.output()
        assert stop(cluster.process) == 0, cluster.output()
