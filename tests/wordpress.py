"""A real WordPress for tests: Debian 12's packages, a private MariaDB, PHP's built-in web server.

    with running_wordpress() as wp:
        httpx.get(wp.rest("galley/v1/status"), auth=wp.auth)

What it does, all inside one temporary directory that is removed at exit:

- ensures the packages (`wordpress php-cli php-mysql mariadb-server`, what `make wordpress` installs),
  installing them with apt-get when one is missing (about 3 minutes, once per machine);
- starts its own MariaDB: `mariadb-install-db` into a temporary datadir, then `mariadbd` on a private
  socket with networking off (it never touches a MariaDB already running on the machine), and an
  init file that creates the database and its user;
- builds a private document root: a symlink to every entry of Debian's /usr/share/wordpress except
  wp-config.php (Debian's reads /etc/wordpress/config-<host>.php; ours is written here) and
  wp-content (ours: Debian's themes and plugins linked, Galley's plugin linked into mu-plugins);
  the router and the install script define ABSPATH as that document root, so WordPress reads our
  wp-config.php even though PHP resolves the symlinks;
- installs WordPress from PHP (`wp_install`, mail suppressed), with pretty permalinks `/%postname%/`,
  an administrator and a subscriber, each with an application password (WP_ENVIRONMENT_TYPE=local
  allows those over plain HTTP);
- serves it with `php -S 127.0.0.1:<free port>` and a router script, with several workers
  (PHP_CLI_SERVER_WORKERS) so concurrent requests really run concurrently.

Nothing is written outside the temporary directory; the packages are the only machine-wide change.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parents[1]
PLUGIN = BASE_DIR / "publishing" / "clients" / "wordpress" / "galley-publishing.php"
WORDPRESS_SOURCE = Path("/usr/share/wordpress")
PACKAGES = ("wordpress", "php-cli", "php-mysql", "mariadb-server")
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"

# A throwaway database: durability buys nothing, start-up time does.
MARIADB_FAST = (
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=64M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    "--innodb-flush-method=nosync",
    "--skip-innodb-buffer-pool-load-at-startup",
    "--skip-innodb-buffer-pool-dump-at-shutdown",
    "--sync-frm=0",
)
SERVER_WORKERS = 8
START_TIMEOUT = 60.0


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + SBIN)


def missing_packages() -> list[str]:
    """What is missing for running_wordpress(), as the package names to install."""
    missing = []
    if not (WORDPRESS_SOURCE / "wp-includes" / "version.php").is_file():
        missing.append("wordpress")
    if _which("php") is None:
        missing.append("php-cli")
    if not _php_has_mysqli():
        missing.append("php-mysql")
    if _which("mariadbd") is None or _which("mariadb-install-db") is None or _which("mariadb") is None:
        missing.append("mariadb-server")
    return missing


def _php_has_mysqli() -> bool:
    php = _which("php")
    if php is None:
        return False
    result = subprocess.run(
        [php, "-r", "echo extension_loaded('mysqli') ? 'yes' : 'no';"], capture_output=True, text=True
    )
    return result.stdout.strip() == "yes"


def ensure_packages() -> None:
    """Install Debian's WordPress, PHP and MariaDB with apt-get when one is missing (as `make wordpress`)."""
    if not missing_packages():
        return
    if os.geteuid() != 0:
        raise RuntimeError(
            f"WordPress tests need the Debian packages {' '.join(PACKAGES)} (missing: {missing_packages()}); "
            "run `make wordpress` as root"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        result = subprocess.run(argv, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
    still = missing_packages()
    if still:
        raise RuntimeError(f"apt-get installed {' '.join(PACKAGES)} but these are still missing: {still}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _php_string(value: str) -> str:
    """A PHP single-quoted string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass
class WordPress:
    """A running WordPress. `user`/`app_password` are an administrator's; `subscriber*` cannot publish."""

    url: str
    user: str
    app_password: str
    subscriber: str
    subscriber_password: str
    root: Path
    socket: Path
    db_name: str
    db_user: str
    db_password: str
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def auth(self) -> httpx.BasicAuth:
        return httpx.BasicAuth(self.user, self.app_password)

    def rest(self, path: str) -> str:
        """The URL of a REST route: rest("galley/v1/status") -> <url>/wp-json/galley/v1/status."""
        return f"{self.url}/wp-json/{path.lstrip('/')}"

    def sql(self, query: str) -> list[list[str]]:
        """Rows of a query run in WordPress's database (through the private socket), as strings."""
        client = _which("mariadb")
        if client is None:
            raise RuntimeError("the mariadb client is missing")
        result = subprocess.run(
            [
                client,
                "--no-defaults",
                f"--socket={self.socket}",
                f"--user={self.db_user}",
                "--batch",
                "--skip-column-names",
                "--raw",
                "--execute",
                query,
                self.db_name,
            ],
            env={**os.environ, "MYSQL_PWD": self.db_password},
            capture_output=True,
            text=True,
            timeout=30,
        )
        if result.returncode != 0:
            raise RuntimeError(f"mariadb failed on {query!r}: {result.stderr}")
        return [line.split("\t") for line in result.stdout.splitlines()]

    def column(self, query: str) -> list[str]:
        """The values of a one-column query, in order."""
        rows = self.sql(query)
        if any(len(row) != 1 for row in rows):
            raise RuntimeError(f"{query!r} returned {rows!r}, not one column")
        return [value for (value,) in rows]

    def scalar(self, query: str) -> str:
        values = self.column(query)
        if len(values) != 1:
            raise RuntimeError(f"{query!r} returned {values!r}, not one value")
        (value,) = values
        return value

    def quote(self, value: str) -> str:
        """A SQL string literal, for sql() and scalar()."""
        return _sql_string(value)

    def log_tail(self, characters: int = 4000) -> str:
        parts = []
        for name, path in self.logs.items():
            if path.exists():
                parts.append(f"--- {name} ({path}) ---\n{path.read_text(errors='replace')[-characters:]}")
        return "\n".join(parts)


def _start(
    argv: list[str], *, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)


def _stop(process: subprocess.Popen[bytes], *, timeout: float = 10) -> None:
    """SIGTERM to the process group (php -S forks its workers), then SIGKILL what is left."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _tail(path: Path, characters: int = 3000) -> str:
    return path.read_text(errors="replace")[-characters:] if path.exists() else "(no log)"


def _start_mariadb(tmp: Path, stack: contextlib.ExitStack, *, db_name: str, db_user: str, db_password: str) -> Path:
    datadir, sock, log = tmp / "mysql", tmp / "mysqld.sock", tmp / "mysqld.log"
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    install = subprocess.run(
        [
            _which("mariadb-install-db") or "mariadb-install-db",
            "--no-defaults",
            f"--datadir={datadir}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
            "--skip-name-resolve",
            "--force",
            *as_root,
            *MARIADB_FAST,
        ],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed:\n{install.stdout[-3000:]}{install.stderr[-3000:]}")
    init = tmp / "init.sql"
    init.write_text(
        f"CREATE DATABASE IF NOT EXISTS `{db_name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_520_ci;\n"
        f"CREATE USER IF NOT EXISTS {_sql_string(db_user)}@'localhost' IDENTIFIED BY {_sql_string(db_password)};\n"
        f"GRANT ALL PRIVILEGES ON `{db_name}`.* TO {_sql_string(db_user)}@'localhost';\n"
    )
    server = _start(
        [
            _which("mariadbd") or "mariadbd",
            "--no-defaults",
            f"--datadir={datadir}",
            f"--socket={sock}",
            "--skip-networking",
            f"--pid-file={tmp / 'mysqld.pid'}",
            f"--log-error={log}",
            f"--init-file={init}",
            "--skip-log-bin",
            "--max-connections=200",
            *as_root,
            *MARIADB_FAST,
        ],
        log=tmp / "mysqld.out",
    )
    stack.callback(_stop, server, timeout=20)
    deadline = time.monotonic() + START_TIMEOUT
    probe = [
        _which("mariadb") or "mariadb",
        "--no-defaults",
        f"--socket={sock}",
        f"--user={db_user}",
        "--execute",
        "SELECT 1",
        db_name,
    ]
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"mariadbd exited with {server.returncode}:\n{_tail(log)}")
        if sock.exists():
            ready = subprocess.run(probe, env={**os.environ, "MYSQL_PWD": db_password}, capture_output=True)
            if ready.returncode == 0:
                return sock
        if time.monotonic() > deadline:
            raise RuntimeError(f"mariadbd did not accept connections within {START_TIMEOUT} s:\n{_tail(log)}")
        time.sleep(0.05)


def _build_site(tmp: Path) -> Path:
    """The document root: Debian's WordPress linked entry by entry, our own wp-content and (later) wp-config.php."""
    site = tmp / "site"
    site.mkdir()
    for entry in WORDPRESS_SOURCE.iterdir():
        if entry.name not in {"wp-config.php", "wp-content"}:
            (site / entry.name).symlink_to(entry)
    content = site / "wp-content"
    for name in ("mu-plugins", "uploads", "upgrade"):
        (content / name).mkdir(parents=True)
    (content / "themes").symlink_to(WORDPRESS_SOURCE / "wp-content" / "themes")
    (content / "plugins").symlink_to(WORDPRESS_SOURCE / "wp-content" / "plugins")
    (content / "mu-plugins" / PLUGIN.name).symlink_to(PLUGIN)
    (tmp / "router.php").write_text(ROUTER.replace("__SITE__", _php_string(str(site) + "/")))
    return site


SALT_NAMES = (
    "AUTH_KEY",
    "SECURE_AUTH_KEY",
    "LOGGED_IN_KEY",
    "NONCE_KEY",
    "AUTH_SALT",
    "SECURE_AUTH_SALT",
    "LOGGED_IN_SALT",
    "NONCE_SALT",
)


def _write_config(
    site: Path, *, url: str, sock: Path, db: dict[str, str], salts: dict[str, str], test_faults: bool
) -> None:
    """wp-config.php; written again (same database, same salts) when the server has to move to another port."""
    keys = "".join(f"define({_php_string(name)}, {_php_string(value)});\n" for name, value in salts.items())
    (site / "wp-config.php").write_text(
        "<?php\n"
        "// Written by tests/wordpress.py for one test run; removed with its temporary directory.\n"
        f"define('DB_NAME', {_php_string(db['name'])});\n"
        f"define('DB_USER', {_php_string(db['user'])});\n"
        f"define('DB_PASSWORD', {_php_string(db['password'])});\n"
        f"define('DB_HOST', {_php_string('localhost:' + str(sock))});\n"
        "define('DB_CHARSET', 'utf8mb4');\n"
        "define('DB_COLLATE', '');\n"
        f"{keys}"
        "$table_prefix = 'wp_';\n"
        f"define('WP_HOME', {_php_string(url)});\n"
        f"define('WP_SITEURL', {_php_string(url)});\n"
        "define('WP_CONTENT_DIR', __DIR__ . '/wp-content');\n"
        f"define('WP_CONTENT_URL', {_php_string(url + '/wp-content')});\n"
        "define('WP_ENVIRONMENT_TYPE', 'local');\n"
        "define('DISABLE_WP_CRON', true);\n"
        "define('AUTOMATIC_UPDATER_DISABLED', true);\n"
        "define('WP_AUTO_UPDATE_CORE', false);\n"
        "define('WP_HTTP_BLOCK_EXTERNAL', true);\n"
        # WP_DEBUG stays off: WordPress 6.1 on PHP 8.2 logs pages of deprecation notices.
        "define('WP_DEBUG', false);\n"
        f"define('GALLEY_PUBLISHING_TEST_FAULTS', {'true' if test_faults else 'false'});\n"
        "if (!defined('ABSPATH')) { define('ABSPATH', __DIR__ . '/'); }\n"
        "require_once ABSPATH . 'wp-settings.php';\n"
    )


# PHP's built-in web server calls this for every request: real files are served (PHP files run),
# everything else goes to WordPress's index.php, as Apache's rewrite rules would do.
ROUTER = r"""<?php
define('ABSPATH', __SITE__);
$path = rawurldecode((string) parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH));
if (strpos($path, '..') !== false) {
    http_response_code(400);
    return true;
}
$file = ABSPATH . ltrim($path, '/');
if ($path !== '/' && is_dir($file) && is_file(rtrim($file, '/') . '/index.php')) {
    $path = rtrim($path, '/') . '/index.php';
    $file = ABSPATH . ltrim($path, '/');
}
if ($path !== '/' && is_file($file)) {
    if (substr($file, -4) !== '.php') {
        return false;
    }
    $_SERVER['SCRIPT_NAME'] = $_SERVER['PHP_SELF'] = $path;
    $_SERVER['SCRIPT_FILENAME'] = $file;
    chdir(dirname($file));
    require $file;
    return true;
}
$_SERVER['SCRIPT_NAME'] = $_SERVER['PHP_SELF'] = '/index.php';
$_SERVER['SCRIPT_FILENAME'] = ABSPATH . 'index.php';
chdir(ABSPATH);
require ABSPATH . 'index.php';
return true;
"""

INSTALL = r"""<?php
// Installs WordPress non-interactively; prints the application passwords as JSON.
$_SERVER['HTTP_HOST'] = __HOST__;
$_SERVER['SERVER_NAME'] = '127.0.0.1';
$_SERVER['SERVER_PORT'] = __PORT__;
$_SERVER['REQUEST_URI'] = '/';
$_SERVER['REQUEST_METHOD'] = 'GET';
$_SERVER['SERVER_PROTOCOL'] = 'HTTP/1.1';
define('WP_INSTALLING', true);
define('ABSPATH', __SITE__);

// Pluggable: defined before WordPress loads, so no installation mail is sent.
function wp_mail($to, $subject, $message, $headers = '', $attachments = array()) {
    return true;
}

require ABSPATH . 'wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';

// No HTTP while installing: wp_install() probes the (not yet served) site for pretty permalinks.
add_filter('pre_http_request', function () {
    return new WP_Error('http_request_failed', 'No HTTP requests while installing.');
});

$installed = wp_install('Galley WordPress', __USER__, 'galley@example.invalid', false, '', wp_slash(__PASSWORD__));
$admin = get_user_by('id', $installed['user_id']);
if (!$admin) {
    fwrite(STDERR, "wp_install created no user\n");
    exit(1);
}
global $wp_rewrite;
$wp_rewrite->set_permalink_structure('/%postname%/');
$wp_rewrite->flush_rules(false);

$subscriber_id = wp_insert_user(array(
    'user_login' => __SUBSCRIBER__,
    'user_pass'  => wp_generate_password(24),
    'user_email' => 'reader@example.invalid',
    'role'       => 'subscriber',
));
if (is_wp_error($subscriber_id)) {
    fwrite(STDERR, $subscriber_id->get_error_message() . "\n");
    exit(1);
}
$passwords = array();
foreach (array('admin' => $admin->ID, 'subscriber' => $subscriber_id) as $who => $id) {
    $created = WP_Application_Passwords::create_new_application_password($id, array('name' => 'galley-tests'));
    if (is_wp_error($created)) {
        fwrite(STDERR, $created->get_error_message() . "\n");
        exit(1);
    }
    $passwords[$who] = $created[0];
}
echo json_encode($passwords);
"""


def _install(tmp: Path, site: Path, *, port: int, user: str, password: str, subscriber: str) -> dict[str, str]:
    script = tmp / "install.php"
    script.write_text(
        INSTALL.replace("__HOST__", _php_string(f"127.0.0.1:{port}"))
        .replace("__PORT__", _php_string(str(port)))
        .replace("__SITE__", _php_string(str(site) + "/"))
        .replace("__USER__", _php_string(user))
        .replace("__PASSWORD__", _php_string(password))
        .replace("__SUBSCRIBER__", _php_string(subscriber))
    )
    result = subprocess.run(
        [_which("php") or "php", "-d", "display_errors=stderr", str(script)],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"installing WordPress failed ({result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    try:
        # The JSON is the last line; WordPress may print notices before it.
        return json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(
            f"the install script printed no passwords:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        ) from None


def _serve(tmp: Path, site: Path, *, port: int, stack: contextlib.ExitStack) -> subprocess.Popen[bytes]:
    log = tmp / "php-server.log"
    server = _start(
        [
            _which("php") or "php",
            "-d",
            "display_errors=0",
            "-d",
            "log_errors=1",
            "-d",
            f"error_log={tmp / 'php-errors.log'}",
            "-d",
            "memory_limit=256M",
            "-d",
            "opcache.enable_cli=1",
            "-S",
            f"127.0.0.1:{port}",
            "-t",
            str(site),
            str(tmp / "router.php"),
        ],
        log=log,
        env={**os.environ, "PHP_CLI_SERVER_WORKERS": str(SERVER_WORKERS)},
        cwd=site,
    )
    stack.callback(_stop, server)
    return server


def _wait_until_serving(wp: WordPress, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"php -S exited with {server.returncode}:\n{wp.log_tail()}")
        try:
            response = httpx.get(wp.rest("galley/v1/status"), auth=wp.auth, timeout=5)
            if response.status_code == 200:
                return
            raise RuntimeError(
                f"GET galley/v1/status answered {response.status_code}: {response.text[:500]}\n{wp.log_tail()}"
            )
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"WordPress did not answer within {START_TIMEOUT} s\n{wp.log_tail()}")
        time.sleep(0.05)


def _serve_on_a_free_port(
    tmp: Path, site: Path, *, port: int, stack: contextlib.ExitStack, configure: Callable[[str], None]
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start php -S on `port`, or on another free port if that one was taken meanwhile; (url, process)."""
    for _attempt in range(5):
        url = f"http://127.0.0.1:{port}"
        configure(url)
        server = _serve(tmp, site, port=port, stack=stack)
        listening = f"Development Server ({url}) started"
        deadline = time.monotonic() + START_TIMEOUT
        while server.poll() is None and listening not in _tail(tmp / "php-server.log", 100_000):
            if time.monotonic() > deadline:
                raise RuntimeError(f"php -S did not start within {START_TIMEOUT} s")
            time.sleep(0.02)
        if server.poll() is None:
            return url, server
        if "Address already in use" not in _tail(tmp / "php-server.log", 500):
            raise RuntimeError(f"php -S exited with {server.returncode}:\n{_tail(tmp / 'php-server.log')}")
        port = free_port()
    raise RuntimeError("php -S found no free port in 5 attempts")


@contextlib.contextmanager
def running_wordpress(*, test_faults: bool = True) -> Iterator[WordPress]:
    """A fresh WordPress with Galley's plugin, stopped and removed at exit.

    test_faults defines GALLEY_PUBLISHING_TEST_FAULTS in wp-config.php (the plugin's test-only fault).
    """
    ensure_packages()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="galley-wp-")))
        db = {"name": "wordpress", "user": "wordpress", "password": secrets.token_hex(16)}
        salts = {name: secrets.token_hex(32) for name in SALT_NAMES}
        sock = _start_mariadb(tmp, stack, db_name=db["name"], db_user=db["user"], db_password=db["password"])
        site = _build_site(tmp)

        def configure(url: str) -> None:
            _write_config(site, url=url, sock=sock, db=db, salts=salts, test_faults=test_faults)

        port = free_port()
        configure(f"http://127.0.0.1:{port}")
        user, subscriber = "galley", "reader"
        passwords = _install(tmp, site, port=port, user=user, password=secrets.token_urlsafe(18), subscriber=subscriber)
        # WP_HOME and WP_SITEURL live in wp-config.php, so moving to another port needs no reinstall.
        url, server = _serve_on_a_free_port(tmp, site, port=port, stack=stack, configure=configure)
        wp = WordPress(
            url=url,
            user=user,
            app_password=passwords["admin"],
            subscriber=subscriber,
            subscriber_password=passwords["subscriber"],
            root=site,
            socket=sock,
            db_name=db["name"],
            db_user=db["user"],
            db_password=db["password"],
            logs={
                "php -S": tmp / "php-server.log",
                "PHP errors": tmp / "php-errors.log",
                "mariadbd": tmp / "mysqld.log",
            },
        )
        _wait_until_serving(wp, server)
        yield wp
