"""Atomic claim, lease, fencing (docs/invariants.md#i8) across hosts: a worker host cut off from
PostgreSQL past its lease writes nothing once the link heals (docs/invariants.md#i4: "worker that lost its lease
while partitioned away"), and the target holds one application (docs/invariants.md#i12: "no duplicate external
effect").

Two worker hosts, each a network namespace joined to this machine (the database host: PostgreSQL
and the reference target) by two veth links, `db` and `lan` (tests/netns.py). Worker A claims the
publish operation and sends it; the target holds the request a few seconds. While it does, A's
`db` link is cut: nothing is refused, nothing answers, as with a pulled cable. A's call to the
target goes on over `lan` and comes back with the target's answer (settings keep a client timeout
far under the lease, so no call can outlast it), but A cannot record it: its fenced finalize stalls
on the cut link, and its lease runs out on the database clock. Worker B, on the other host, takes
the operation over with a higher fencing token (the reconciler expires A's lease first), looks the
key up, adopts what A's request applied, and verifies it. Only then does A's link heal: A's stalled
finalize reaches PostgreSQL, matches no row, and A records on its own attempt that the lease was lost.

"The first writes nothing (its guarded updates match no row), the target sees no second
application, and the attempt row says the lease was lost."
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection
from django.db.models.functions import Now

from publishing.identities import publish_key, verify_key
from tests import netns
from tests.acceptance.test_crash_points import (
    TOKEN,
    Target,
    approve,
    assert_published_exactly_once,
    worker_env,
    write_revision,
)
from tests.acceptance.test_lease_loss import database_state
from tests.processes import Child, child_database_url, kill, process_env, start, wait_for_http, wait_until
from workers.models import Attempt, Operation

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

# The target holds A's request this long before it applies and answers it: the window in which A's
# database link is cut. A's client waits longer than that (TIMEOUT_SECONDS), and settings keep its
# lease above 2.5 x the timeout, so the lease runs out only after A has its answer.
LATENCY_MS = 4000
TIMEOUT_SECONDS = 6
LEASE_SECONDS = 16
# Worker B's lease is not under test: B gets worker_env's defaults, which no loaded CPU overruns.


@pytest.fixture
def network() -> Iterator[netns.Network]:
    """Two worker hosts, "a" and "b" (network namespaces), and their links to this machine; all removed
    at the end, even when the test fails."""
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with netns.Network() as network:
        network.add_host("a")
        network.add_host("b")
        yield network


@pytest.fixture
def database_port(network: netns.Network) -> Iterator[int]:
    """The session's test database, forwarded to the database host's address on the hosts' `db` links."""
    settings = connection.settings_dict
    host, port = settings["HOST"] or "localhost", int(settings["PORT"] or 5432)
    upstream = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    with netns.Forwarder(network.database_address, upstream) as forwarder:
        yield forwarder.port


def database_url(network: netns.Network, port: int) -> str:
    """child_database_url(), but over the network: the database host's address on the `db` links."""
    parts = urlsplit(child_database_url())
    query = "&".join(pair for pair in parts.query.split("&") if pair and not pair.startswith("host="))
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{network.database_address}:{port}" if userinfo else f"{network.database_address}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """processes(name, popen): keep `popen` as a Child logging to tmp_path/<name>.log; killed at the end."""
    children: list[Child] = []

    def keep(name: str, start_one: Callable[[Path], subprocess.Popen[str]]) -> Child:
        log = tmp_path / f"{name}.log"
        children.append(Child(name, start_one(log), log))
        return children[-1]

    yield keep
    for child in children:
        if child.process.poll() is None:
            kill(child.process)


def start_target(processes: Callable[..., Child], network: netns.Network, tmp_path: Path, *faults: str) -> Target:
    """The reference target on the database host's address on the hosts' `lan` links (a free port)."""
    argv = ["-m", "galley.reference_target", "--host", network.service_address, "--port", "0"]
    argv += ["--db", str(tmp_path / "target.sqlite3"), f"--token={TOKEN}", *faults]
    child = processes("target", lambda log: start(argv, env=process_env(), log=log))
    child.wait_for_output("reference target on ")
    url = re.search(r"reference target on (\S+)", child.output()).group(1)  # type: ignore[union-attr]
    wait_for_http(f"{url}/_health", process=child.process)
    return Target(url, child)


def start_worker(processes: Callable[..., Child], host: netns.Host, name: str, *, env: dict[str, str]) -> Child:
    """`run_worker --until-idle` on `host`, with `name` as its worker id."""
    argv = ["manage.py", "run_worker", "--until-idle", "--worker-id", name, "--poll", "0.2"]
    return processes(name, lambda log: host.start(argv, env=env, log=log))


# The worker's startup check sends two GETs (a lookup of a key that does not exist, then the status),
# one data segment each, on a connection the client keeps alive and the publish may reuse.
STARTUP_CHECK_SEGMENTS = 2


def request_sent(host: netns.Host, peer: str) -> bool:
    """Whether a process on `host` has written a whole publish request to `peer`, after its startup
    check, and the peer acknowledged all of it.

    httpx writes a POST's headers and body separately on a TCP_NODELAY socket, so a whole request is
    two data segments, on the startup check's connection or a new one: counted over the host's open
    connections to `peer`. Send-Q 0 means acknowledged.
    """
    connections = [conn for conn in host.tcp_connections(peer) if conn.state == "ESTAB"]
    return sum(conn.data_segments_out for conn in connections) >= STARTUP_CHECK_SEGMENTS + 2 and all(
        conn.send_queue == 0 for conn in connections
    )


def segments_received(host: netns.Host, peer: str) -> dict[str, int]:
    """Data segments each of the host's open connections to `peer` has received, by local address."""
    return {conn.local: conn.data_segments_in for conn in host.tcp_connections(peer) if conn.state == "ESTAB"}


def answer_read(host: netns.Host, peer: str, before: dict[str, int]) -> bool:
    """Whether a process on `host` has received data from `peer` since `before` (segments_received) and
    read all of it. The connection stays open: client and target keep it alive for the next call."""
    return any(
        conn.state == "ESTAB" and conn.recv_queue == 0 and conn.data_segments_in > before.get(conn.local, 0)
        for conn in host.tcp_connections(peer)
    )


def test_fencing__partitioned_worker_host_writes_nothing_after_heal(
    network, database_port, processes, tmp_path, editor, approver
):
    host_a, host_b = network.hosts["a"], network.hosts["b"]
    target = start_target(processes, network, tmp_path, "--latency-ms", str(LATENCY_MS))
    target_peer = urlsplit(target.url).netloc
    revision = write_revision(editor)
    approve(revision, approver)
    key = publish_key(revision.brief.public_id, revision.number)
    over_the_network = database_url(network, database_port)

    env_a = worker_env(target, lease=LEASE_SECONDS, timeout=TIMEOUT_SECONDS)
    env_a["DATABASE_URL"] = over_the_network
    worker_a = start_worker(processes, host_a, "worker-a", env=env_a)
    wait_until(
        lambda: Operation.objects.filter(key=key, status="running", lease_owner="worker-a").exists(),
        timeout=120,
        what="worker A's claim",
    )
    # A renewed its lease (the fence check just before the send) and its whole request is at the
    # target, which holds it for LATENCY_MS: cut A's database link now, while the call proceeds.
    wait_until(lambda: request_sent(host_a, target_peer), timeout=60, what="worker A's request sent")
    db_link = host_a.links["db"]
    db_link.cut()
    # The target answers only after LATENCY_MS: whatever A's connections received so far (the startup
    # check's answer, on the connection the publish may reuse) came before.
    received_before_answer = segments_received(host_a, target_peer)
    try:
        wait_until(
            lambda: [row["operation_key"] for row in target.applications()] == [key],
            timeout=60,
            what="the target's application of A's request",
        )
        wait_until(
            lambda: answer_read(host_a, target_peer, received_before_answer),
            timeout=60,
            what="the answer to A's call",
        )
        a_attempt = Attempt.objects.get(operation__key=key)
        claimed = Operation.objects.get(key=key)
        # A had the target's answer only once it was cut off: nothing of it reached the database.
        assert (claimed.status, claimed.lease_owner, claimed.fencing_token) == ("running", "worker-a", 1), (
            f"worker A recorded an outcome before its link was cut: {claimed.status}\n{worker_a.output()}"
        )
        assert (a_attempt.worker_id, a_attempt.fencing_token, a_attempt.finished_at) == ("worker-a", 1, None)

        wait_until(
            lambda: Operation.objects.filter(key=key, lease_expires_at__lt=Now()).exists(),
            timeout=LEASE_SECONDS + 60,
            what="the expiry of A's lease",
        )
        env_b = worker_env(target)
        env_b["DATABASE_URL"] = over_the_network
        worker_b = start_worker(processes, host_b, "worker-b", env=env_b)
        assert worker_b.wait(timeout=180) == 0, worker_b.output()
        assert_published_exactly_once(revision, target)
        taken_over = Operation.objects.get(key=key)
        a_attempt.refresh_from_db()
        # The reconciler closed A's attempt as abandoned; A itself has written nothing since its send.
        assert (a_attempt.error_kind, a_attempt.outcome) == ("lease_expired", "")
        assert worker_a.process.poll() is None, worker_a.output()
        before_heal = database_state(except_worker="worker-a")
    finally:
        db_link.heal()

    # A's stalled finalize reaches PostgreSQL, matches no row (B holds the operation, with a higher
    # token), and A stops.
    assert worker_a.wait(timeout=300) == 0, worker_a.output()
    assert "lease lost" in worker_a.output()

    # A wrote nothing: every row is as B left it, but A's own attempt.
    assert database_state(except_worker="worker-a") == before_heal
    a_attempt.refresh_from_db()
    assert (a_attempt.outcome, a_attempt.error_kind) == (Attempt.Outcome.LEASE_LOST, "lease_lost")
    assert a_attempt.finished_at is not None

    # The target holds one application: A's request; B adopted it.
    assert_published_exactly_once(revision, target)
    assert [application["operation_key"] for application in target.applications()] == [key]
    assert taken_over.result["first_application"] is False
    assert taken_over.result["external_id"] == target.held(key)["id"]

    # The operation belongs to B: a higher fencing token, B's success.
    b_attempts = list(Attempt.objects.filter(operation__key=key, worker_id="worker-b").order_by("number"))
    assert b_attempts, "worker B never attempted"
    assert b_attempts[0].ambiguous  # A's attempt had no outcome: B looked the key up first
    assert b_attempts[-1].outcome == Attempt.Outcome.SUCCEEDED
    assert taken_over.fencing_token == b_attempts[-1].fencing_token > a_attempt.fencing_token
    assert taken_over.status == Operation.Status.SUCCEEDED
    # The verification is B's: in its publish's attempt (no verify operation), or its verify operation's.
    verify_workers = Attempt.objects.filter(operation__key=verify_key(revision.brief.public_id, revision.number))
    assert set(verify_workers.values_list("worker_id", flat=True)) <= {"worker-b"}
    assert taken_over.result["verified_inline"] is not verify_workers.exists()
