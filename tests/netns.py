"""Worker hosts for acceptance tests: Linux network namespaces joined to this machine by veth links.

This machine (the root namespace) plays the database host: PostgreSQL, reached through a `Forwarder`
on `Network.database_address`, and the services every host uses (the reference target), bound to
`Network.service_address`. Each worker host is a network namespace with two point-to-point veth
links to it, so that one can be cut without the other:

    db    the host's only route to `database_address`
    lan   the host's only route to `service_address`

    with Network() as network:
        host = network.add_host("a")
        worker = host.start(["manage.py", "run_worker"], env=..., log=...)
        host.links["db"].cut()     # silence, as a pulled cable: nothing is refused, nothing answers
        host.links["db"].heal()

Every host's link of a kind carries the same root address (Linux lets one address sit on several
devices), so every host reaches PostgreSQL and the target at the same URL, as on a real network.
A cut takes the root end of the veth down: the host's packets to that address are dropped
silently, its open TCP connections stall and retransmit, and they resume after the heal.

Needs root and iproute2 (`ip netns`); `unavailable()` says why not, for a skip. Everything is
removed by `close()`: the namespaces (with the host ends of their links), the root ends, and any
process still running in a namespace (only the ones this module started live there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import ipaddress
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

BASE_DIR = Path(__file__).resolve().parents[1]

# Private addresses for the links; one /24 per Network, chosen where this machine has nothing.
_POOL = ipaddress.IPv4Network("10.231.0.0/16")
_LOCK_FILE = Path(tempfile.gettempdir()) / "galley-netns.lock"
_names = iter(range(1_000_000))

# Linux 6.15+: TCP_RTO_MAX_MS caps the retransmission back-off, so that a connection notices a healed
# link within a second instead of after its back-off (which doubles up to two minutes). Older
# kernels keep the default back-off: the tests only wait longer.
_TCP_RTO_MAX_MS = 44
_RTO_MAX_SYSCTL = Path("/proc/sys/net/ipv4/tcp_rto_max_ms")
# With retransmissions once a second, the default tcp_retries2 (15) gives up after about 15 s, where a
# real host's connections survive a partition of about 15 min. 255, the most Linux allows, is about
# four minutes at that pace: longer than any partition of these tests. The forwarder's sockets say
# it directly (TCP_USER_TIMEOUT).
_HOST_TCP_RETRIES = 255
_FORWARDER_GIVE_UP_MS = 600_000


def _ip(*args: str) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def unavailable() -> str | None:
    """Why worker hosts cannot be made here (a reason to skip), or None."""
    if os.geteuid() != 0:
        return "worker hosts are network namespaces: creating them needs root"
    if shutil.which("ip") is None:
        return "worker hosts need `ip` from iproute2 (apt-get install iproute2)"
    probe = f"galley-probe-{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except RuntimeError as exc:
        return f"`ip netns add` does not work here: {exc}"
    _ip("netns", "del", probe)
    return None


@dataclass
class Link:
    """A veth pair between the database host (root end) and a worker host (host end)."""

    kind: str
    root_device: str
    host_device: str
    root_address: str
    host_address: str

    def cut(self) -> None:
        """Down the root end: the host's packets on this link are dropped, nothing is answered."""
        _ip("link", "set", "dev", self.root_device, "down")

    def heal(self) -> None:
        """Up the root end again; the kernel restores the link's route with it."""
        _ip("link", "set", "dev", self.root_device, "up")


@dataclass(frozen=True)
class TcpConnection:
    """One line of `ss -tin` in a host: state, bytes received but not yet read, unacknowledged bytes,
    data segments sent and received."""

    state: str
    local: str
    peer: str
    recv_queue: int
    send_queue: int
    data_segments_out: int
    data_segments_in: int = 0


@dataclass
class Host:
    """A worker host: a network namespace whose only routes go over its links."""

    name: str
    namespace: str
    links: dict[str, Link] = field(default_factory=dict)

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def run(self, *argv: str) -> str:
        """Run a command in the host; its standard output. Raises if it fails."""
        result = subprocess.run(self.command(*argv), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{argv} in {self.namespace} failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def start(
        self, argv: list[str], *, env: Mapping[str, str], log: Path, cwd: Path = BASE_DIR
    ) -> subprocess.Popen[str]:
        """Start `python <argv>` in the host, in its own process group, output to `log`.

        `ip netns exec` replaces itself with the program, so the Popen's pid is Python's.
        """
        with open(log, "a") as out:
            return subprocess.Popen(
                self.command(sys.executable, *argv),
                cwd=cwd,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )

    def tcp_connections(self, peer: str) -> list[TcpConnection]:
        """The host's TCP connections to `peer` ("address:port"), as `ss` sees them in the host."""
        connections: list[TcpConnection] = []
        # A line per socket, then (indented) its details, which a socket in TIME-WAIT does not have.
        for line in self.run("ss", "-tinH", "dst", peer).splitlines():
            if not line[:1].isspace():
                state, recv_q, send_q, local, remote, *_ = line.split()
                connections.append(TcpConnection(state, local, remote, int(recv_q), int(send_q), 0))
            elif connections:
                counts = {name: int(count) for name, count in re.findall(r"\bdata_segs_(in|out):(\d+)", line)}
                connections[-1] = dataclasses.replace(
                    connections[-1], data_segments_out=counts.get("out", 0), data_segments_in=counts.get("in", 0)
                )
        return connections

    def pids(self) -> list[int]:
        return [int(pid) for pid in _ip("netns", "pids", self.namespace).split()]


class Network:
    """The database host (this machine's root namespace) and the worker hosts joined to it."""

    def __init__(self) -> None:
        self._tag = f"{os.getpid()}x{next(_names)}"  # names what this process made, for a stray-link hunt
        self.hosts: dict[str, Host] = {}
        self._root_devices: list[str] = []
        self._lock = open(_LOCK_FILE, "a")  # noqa: SIM115 -- held until the first host owns the addresses
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        hosts = self._free_subnet().hosts()
        self.database_address = str(next(hosts))
        self.service_address = str(next(hosts))
        self._free = hosts

    def _free_subnet(self) -> ipaddress.IPv4Network:
        in_use = _ip("-4", "-o", "addr", "show") + _ip("-4", "route", "show", "table", "all")
        candidates = list(_POOL.subnets(new_prefix=24))
        random.shuffle(candidates)
        for subnet in candidates:
            prefix = ".".join(str(subnet.network_address).split(".")[:3]) + "."
            if prefix not in in_use:
                return subnet
        raise RuntimeError(f"no free /24 left in {_POOL}")

    def add_host(self, name: str) -> Host:
        """A new namespace with a `db` and a `lan` link to this machine, each its only route to its address."""
        index = len(self.hosts)
        host = Host(name, f"galley-{self._tag}-{name}")
        _ip("netns", "add", host.namespace)
        self.hosts[name] = host
        host.run("ip", "link", "set", "dev", "lo", "up")
        for kind, root_address in (("db", self.database_address), ("lan", self.service_address)):
            root_device = f"gy{self._tag}{index}{kind[0]}"  # at most 15 characters: 7 for a pid
            host_address = str(next(self._free))
            _ip("link", "add", root_device, "type", "veth", "peer", "name", kind, "netns", host.namespace)
            self._root_devices.append(root_device)
            _ip("addr", "add", f"{root_address}/32", "peer", f"{host_address}/32", "dev", root_device)
            _ip("link", "set", "dev", root_device, "up")
            host.run("ip", "addr", "add", f"{host_address}/32", "peer", f"{root_address}/32", "dev", kind)
            host.run("ip", "link", "set", "dev", kind, "up")
            host.links[kind] = Link(kind, root_device, kind, root_address, host_address)
        if _RTO_MAX_SYSCTL.exists():
            host.run("sysctl", "-qw", "net.ipv4.tcp_rto_max_ms=1000", f"net.ipv4.tcp_retries2={_HOST_TCP_RETRIES}")
        self._unlock()  # the addresses are on devices now: another Network sees them as in use
        return host

    def _unlock(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def close(self) -> None:
        """Kill what still runs in the hosts (only processes started here), then remove hosts and links."""
        self._unlock()
        for host in self.hosts.values():
            with contextlib.suppress(RuntimeError):
                for pid in host.pids():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", host.namespace)
        for device in self._root_devices:  # gone with their peers already, unless a process kept a namespace
            with contextlib.suppress(RuntimeError):
                _ip("link", "del", "dev", device)

    def __enter__(self) -> Network:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Forwarder:
    """A TCP forwarder on `address` (a free port) to `upstream`: a (host, port) or a unix socket path.

    It stands for the database host's PostgreSQL port, so that worker hosts reach this session's
    test database over their links. Its sockets retransmit at least once a second and give up only
    after ten minutes, like the hosts' (see Network), so a cut link stalls them and a heal resumes them.
    """

    def __init__(self, address: str, upstream: tuple[str, int] | str) -> None:
        self.upstream = upstream
        self._listener = socket.create_server((address, 0))
        self.address, self.port = self._listener.getsockname()[:2]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="netns-forwarder", daemon=True)

    def __enter__(self) -> Forwarder:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the listener and every forwarded connection (the database sees its clients go)."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._thread.join(timeout=10)

    def _accept(self) -> None:
        while True:
            try:
                client, _address = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = self._connect_upstream()
            except OSError:
                client.close()
                continue
            _tune(client)
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), name="netns-forwarder-pump", daemon=True).start()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.upstream)
            return server
        return socket.create_connection(self.upstream)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Copy both ways until either side closes, then close both."""
        peers = {client: server, server: client}
        try:
            while True:
                readable, _, _ = select.select(list(peers), [], [])
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return  # a side failed, or close() closed them
        finally:
            for sock in peers:
                with contextlib.suppress(OSError):
                    sock.close()


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, _FORWARDER_GIVE_UP_MS)
    with contextlib.suppress(OSError):  # before Linux 6.15: the default back-off
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_RTO_MAX_MS, 1000)
