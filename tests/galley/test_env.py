"""DATABASE_URL into Django's DATABASES entry (galley.env.database_config), including libpq's host lists."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from galley.env import database_config


def test_database_config__one_host__host_port_user_and_query():
    config = database_config("postgresql://galley:s%40cret@db.example:6432/news?sslmode=require")
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("news", "galley", "s@cret")
    assert (config["HOST"], config["PORT"], config["OPTIONS"]) == ("db.example", "6432", {"sslmode": "require"})


def test_database_config__socket_folder_in_the_query__host_is_the_folder():
    config = database_config("postgresql://postgres@/postgres?host=/run/postgresql")
    assert (config["HOST"], config["PORT"], config["USER"]) == ("/run/postgresql", "", "postgres")
    assert config["OPTIONS"] == {}


def test_database_config__several_hosts__libpq_lists_and_session_attrs_kept():
    config = database_config(
        "postgresql://postgres@127.0.0.1:5432,127.0.0.1:5433/galley?target_session_attrs=read-write"
    )
    assert (config["HOST"], config["PORT"]) == ("127.0.0.1,127.0.0.1", "5432,5433")
    assert config["OPTIONS"] == {"target_session_attrs": "read-write"}


def test_database_config__several_hosts_some_without_port__empty_entry_is_the_default_port():
    config = database_config("postgresql://u:p@primary,[::1]:5433,replica/db")
    assert (config["HOST"], config["PORT"], config["PASSWORD"]) == ("primary,::1,replica", ",5433,", "p")


def test_database_config__several_hosts_no_port__no_port_list():
    assert database_config("postgresql://u@a,b/db")["PORT"] == ""


def test_database_config__port_not_a_number__refused_naming_it():
    with pytest.raises(ImproperlyConfigured, match="'x5432'"):
        database_config("postgresql://u@a:x5432/db")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@/postgres?host=/run/postgresql",
        "postgresql://galley:s%40cret@db.example:6432/news?sslmode=require",
        "postgresql://postgres@127.0.0.1:5432,127.0.0.1:5433/galley?target_session_attrs=read-write",
        "postgresql://u@primary,[::1]:5433/db",
    ],
)
def test_database_config__url_a_child_process_gets__same_settings(url, monkeypatch):
    from django.db import connections

    from tests.processes import child_database_url

    config = database_config(url)
    monkeypatch.setattr(connections["default"], "settings_dict", config)
    assert database_config(child_database_url()) == config
