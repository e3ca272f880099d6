"""Settings for the peers that run in Django: (c), django-q2's no-op tasks, and the naive pipelines
(naive/, in django-q2 and in Procrastinate). Galley's settings (its database and persistent connections,
its Q_CLUSTER: ORM broker, 4 workers, poll 0.2 s) without Galley's own apps, so that `manage.py qcluster`
is django-q2 alone: no Galley code runs in its processes (Galley's workers app starts its drain service in
each of them). The bench's naive app (one unmanaged model) is installed instead."""

from galley.settings import *  # noqa: F403
from galley.settings import INSTALLED_APPS, MIDDLEWARE

GALLEY_APPS = ("workers", "publishing", "approvals")
INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in GALLEY_APPS] + ["tests.benchmarks.naive"]
# galley.metrics also holds the /metrics view, which reads Galley's tables through its apps' selectors.
MIDDLEWARE = [name for name in MIDDLEWARE if not name.startswith((*GALLEY_APPS, "galley.metrics"))]
ROOT_URLCONF = __name__  # no URLs: Galley's would import its apps
urlpatterns: list[object] = []
