"""Device names: a name of dots only ('.', '..', '...') cannot be reached by path, so it is
refused, by people.accounts and by the database's own constraint (migration 0085)."""

from __future__ import annotations

import psycopg
import pytest

from people import accounts
from shared import places
from shared.errors import BadParameter


@pytest.mark.parametrize("name", [".", "..", "...", "." * 64])
def test_dots_only_names_are_refused_with_the_rule(conn: psycopg.Connection, name: str) -> None:
    org = accounts.create_org(conn, name=f"Dots {len(name)}")
    with pytest.raises(BadParameter, match="not dots only"):
        places.register_device(conn, org=org, name=name)


def test_the_database_refuses_them_too(conn: psycopg.Connection) -> None:
    org = accounts.create_org(conn, name="Dots db")
    with pytest.raises(psycopg.errors.CheckViolation, match="devices_name_not_only_dots"):
        with conn.transaction():
            conn.execute("INSERT INTO devices (org_id, name) VALUES (%s, '..')", (org,))


@pytest.mark.parametrize("name", [".a", "a.", "a..b", "v1.2", "_", "-"])
def test_names_with_dots_and_more_are_kept(conn: psycopg.Connection, name: str) -> None:
    org = accounts.create_org(conn, name=f"Dotted {name}")
    places.register_device(conn, org=org, name=name)
    assert places.DEVICE_NAME.match(name)
