from django.apps import AppConfig


class NaiveConfig(AppConfig):
    name = "tests.benchmarks.naive"
    label = "naive"
    default_auto_field = "django.db.models.BigAutoField"
