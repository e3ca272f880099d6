# The two commands of README.md#two-commands: `make run` and `make test`. Both work on a fresh machine:
# they create the virtualenv and install everything Galley needs, the test browser included.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
BENCH_INSTALLED := $(VENV)/.installed-bench

.PHONY: run serve test test-pgbouncer test-unit bench chaos lint install browser wordpress faketime pgbouncer clean

run: $(INSTALLED)
	DEBUG=$${DEBUG:-true} $(PY) -m galley.launcher

# The production web server (docs/operations.md#production): gunicorn, static files by whitenoise, DEBUG off. It needs
# SECRET_KEY and DATABASE_URL; it collects the static files first. Migrations are a release step of their
# own (`manage.py migrate`, once per deploy, not once per web host). gunicorn options go in GUNICORN_CMD_ARGS.
serve: $(INSTALLED)
	@test -n "$$SECRET_KEY" || { echo 'make serve: set SECRET_KEY (docs/operations.md#production)' >&2; exit 1; }
	@test -n "$$DATABASE_URL" || { echo 'make serve: set DATABASE_URL (docs/operations.md#production)' >&2; exit 1; }
	DEBUG=false $(PY) manage.py collectstatic --noinput --verbosity 0
	@# prometheus-client's multiprocess files outlive their processes: a server that started on them would
	@# report the previous run's request counts, and every past worker's files would pile up.
	@if [ -n "$${PROMETHEUS_MULTIPROC_DIR:-}" ]; then \
		mkdir -p "$$PROMETHEUS_MULTIPROC_DIR" && rm -f "$$PROMETHEUS_MULTIPROC_DIR"/*.db; fi
	DEBUG=false exec $(VENV)/bin/gunicorn galley.wsgi --bind $${GALLEY_HOST:-127.0.0.1}:$${GALLEY_PORT:-8000} \
		--workers $${WEB_CONCURRENCY:-4} --access-logfile - --forwarded-allow-ips $${FORWARDED_ALLOW_IPS:-127.0.0.1}

# Every browser test's screenshots are kept as test artifacts (tests/browser.py); GALLEY_TEST_SCREENSHOTS=
# (empty) keeps none. The tests run in TEST_WORKERS pytest-xdist processes (docs/testing.md#parallel): most of
# the suite's time is spent waiting for processes it started, so three share two cores well;
# TEST_WORKERS=0 runs them in one process. After the whole suite (no PYTEST_ARGS), and whether or not it
# passed, the second pass (test-pgbouncer) runs; a selection in PYTEST_ARGS runs only what it selects.
TEST_WORKERS ?= 3
test: $(INSTALLED) browser wordpress faketime pgbouncer
	@status=0; \
	GALLEY_TEST_SCREENSHOTS=$${GALLEY_TEST_SCREENSHOTS-var/test-artifacts/screenshots} \
		$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS) || status=1; \
	$(if $(PYTEST_ARGS),,$(MAKE) --no-print-directory test-pgbouncer || status=1;) \
	exit $$status

# The second pass of `make test` (docs/testing.md#pgbouncer): the publishing path's integration tests, the
# handlers' and the JSON API's, again with the test database reached through Debian's PgBouncer in
# transaction pooling (GALLEY_TEST_PGBOUNCER, galley/testing/embedded_database.py), prepared statements off
# and workers polling, as Galley's hosts behind such a pooler run (docs/operations.md#pgbouncer).
# The schema fuzz (test_schema.py, about 110 s of the pass) checks answers' shapes, which no pooler changes.
PGBOUNCER_TESTS := tests/publishing/handlers tests/publishing/api --ignore tests/publishing/api/test_schema.py
test-pgbouncer: $(INSTALLED) pgbouncer
	GALLEY_TEST_PGBOUNCER=transaction $(PY) -m pytest -n $(TEST_WORKERS) \
		-m "integration and not acceptance and not wordpress" $(PGBOUNCER_TESTS)

# The unit layer alone: the tests that need no database and start no process (the `integration` marker,
# tests/conftest.py): no PostgreSQL, browser or WordPress is started; about half a minute.
test-unit: $(INSTALLED)
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

# The benchmarks (python -m tests.benchmarks; not part of `make test`): Galley's figures beside peers
# measured in the same run (django-q2, Procrastinate, a psycopg loop) on their own embedded PostgreSQL,
# about 17 minutes on a quiet 2-core machine. Sizes are BENCH_* variables (printed at the start), e.g.
# `make bench BENCH_ROUNDS=5` or `BENCH_ONLY=throughput,pages make bench`. Needs the bench extra (Procrastinate).
bench: $(BENCH_INSTALLED)
	$(PY) -m tests.benchmarks

# The chaos test (tests/chaos.py) at full size: about 200 briefs for a few minutes, on its own PostgreSQL
# (which it restarts), with SIGKILLed workers and three faulty channels (two reference targets and a WordPress
# of its own, as the WordPress tests start it), a share of the approvals scheduled a few seconds ahead
# (--scheduled-share, 0.3 by default); prints its figures, exits 1 on a broken invariant. Options go
# in CHAOS_ARGS (e.g. CHAOS_ARGS='--briefs 500 --seed 7'); `make test` runs a short one.
chaos: $(INSTALLED) wordpress
	$(PY) -m tests.chaos $(CHAOS_ARGS)

# ruff, the import rules of pyproject.toml (import-linter), and types (mypy with django-stubs, which
# loads the settings: a throwaway SECRET_KEY is enough, nothing connects to a database).
lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	SECRET_KEY=lint-only-not-a-secret $(VENV)/bin/mypy

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

$(BENCH_INSTALLED): $(INSTALLED)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	touch $@

# The web UI is tested in Debian's Chromium, driven by Playwright (which never downloads a browser).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	}

# The WordPress tests (tests/publishing/clients/test_wordpress_plugin.py) run Debian's WordPress on
# PHP's built-in web server and a private MariaDB; tests/wordpress.py starts them per test session.
wordpress:
	@{ command -v php >/dev/null 2>&1 && php -r 'exit(extension_loaded("mysqli") ? 0 : 1);' \
		&& [ -f /usr/share/wordpress/wp-includes/version.php ] \
		&& PATH="$$PATH:/usr/sbin:/sbin" command -v mariadbd >/dev/null 2>&1; } || { \
		echo "Installing Debian's wordpress, php-cli, php-mysql and mariadb-server for the WordPress tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordpress php-cli php-mysql mariadb-server >/dev/null; \
	}

# The clock-skew test of the claim (tests/workers/test_invariant_guards.py) runs a worker whose clock
# Debian's libfaketime moves 30 minutes away from the database's.
faketime:
	@command -v faketime >/dev/null 2>&1 || { \
		echo "Installing Debian's faketime for the clock-skew test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null; \
	}

# The PgBouncer tests (tests/acceptance/test_pgbouncer.py) put Debian's PgBouncer, in transaction and in session
# pooling, between Galley's processes and the test database (tests/pgbouncer.py); test-pgbouncer puts it in
# front of a whole pytest session (galley/testing/pgbouncer.py).
pgbouncer:
	@[ -x /usr/sbin/pgbouncer ] || { \
		echo "Installing Debian's pgbouncer for the PgBouncer tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; \
	}

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
