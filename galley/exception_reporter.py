"""Django's error reports and its DEBUG error page, with their filter on whatever DEBUG says.

Django leaves variables marked `sensitive_variables` (an API token in its check), sensitive POST
fields and request headers such as Authorization unfiltered when DEBUG is on ("your site is not safe
anyway"); `make run` serves with DEBUG on, and its error page would show a token in full. With this
filter they read as stars there too; every other variable and setting shows as Django shows it.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.views.debug import SafeExceptionReporterFilter


class ExceptionReporterFilter(SafeExceptionReporterFilter):
    def is_active(self, request: HttpRequest | None) -> bool:
        return True
