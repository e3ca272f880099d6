"""Static files for the production server: whitenoise serves what `collectstatic` wrote, under hashed names."""

from __future__ import annotations

import logging
from pathlib import Path

import whitenoise.middleware
from whitenoise.storage import CompressedManifestStaticFilesStorage

logger = logging.getLogger(__name__)


class StaticFilesStorage(CompressedManifestStaticFilesStorage):
    """Hashed, compressed copies once `collectstatic` has run (`make serve` runs it first); plain names before.

    Whitenoise marks hashed names immutable, so browsers cache them for good. A process that has no
    manifest, or a name that is not in it (the test suite, `make run`, a file added since the last
    collectstatic), renders the plain name instead of failing the whole page: the asset may 404, the
    page still answers.
    """

    def stored_name(self, name: str) -> str:
        try:
            return super().stored_name(name)
        except ValueError:
            return name


class WhiteNoiseMiddleware(whitenoise.middleware.WhiteNoiseMiddleware):
    """Whitenoise's middleware, which serves STATIC_ROOT; a process whose STATIC_ROOT was never collected
    (the test suite, `make run`, whose runserver serves static files itself) serves none, without the
    UserWarning whitenoise raises for it (warnings are errors in the tests). `make serve` and the
    service files in docs/deploy always collect first."""

    def add_files(self, root: str, prefix: str | None = None) -> None:
        if self.autorefresh or Path(root).is_dir():
            super().add_files(root, prefix)
        else:
            logger.info("no static files at %s (collectstatic has not run)", root)
