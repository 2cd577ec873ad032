"""One way to make a database: the roles, owner and extensions of a deployment, then the
migrations run as the deployment's login role.

deploy/services.sh makes the service's database from deploy/db/roles.sql and
deploy/db/extensions.sql and `deploy/run.sh` migrates it as the login role `sds`, a
non-superuser that owns everything and is a member of the processes' roles. The tests and the
benchmarks make theirs here, from the same files and as the same role, so a policy that
recurses for a non-superuser owner, a missing grant or an owner that differs fails in the suite
and not in the field (issue 30: the suite had migrated as the superuser, which row-level
security never applies to).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from admin import migrate

DEPLOY_DB = Path(__file__).resolve().parent.parent / "deploy" / "db"
ROLES_SQL = DEPLOY_DB / "roles.sql"
EXTENSIONS_SQL = DEPLOY_DB / "extensions.sql"
# The deployment's login role (deploy/db/roles.sql): owner of the database, migrator, and the
# role every process connects as before SET ROLE.
LOGIN_ROLE = "sds"


def as_role(url: str, role: str = LOGIN_ROLE) -> str:
    """`url` with its user replaced by `role` (the test clusters trust loopback connections)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def with_dbname(url: str, dbname: str) -> str:
    """`url` pointing at database `dbname` on the same server."""
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname))


def bootstrap_roles(admin_url: str) -> None:
    """Create the deployment's roles on the cluster of `admin_url` (a superuser URL)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(ROLES_SQL.read_text())  # type: ignore[arg-type]  # a trusted file of ours


def provision(admin_url: str) -> str:
    """Make the existing database of `admin_url` (a superuser URL) what deploy/services.sh and
    `deploy/run.sh` make: the roles, the login role as its owner, the extensions, and the
    migrations applied as the login role. Returns the login role's URL of that database."""
    bootstrap_roles(admin_url)
    dbname = urlsplit(admin_url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
            sql.Identifier(dbname), sql.Identifier(LOGIN_ROLE)))
        conn.execute(EXTENSIONS_SQL.read_text())  # type: ignore[arg-type]  # a trusted file
    url = as_role(admin_url)
    migrate.upgrade(url)
    return url


def create(admin_url: str, dbname: str) -> str:
    """CREATE DATABASE `dbname` OWNER sds on the cluster of `admin_url` (a superuser URL to any
    database there), provisioned as deployed; returns the login role's URL of it."""
    bootstrap_roles(admin_url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
            sql.Identifier(dbname), sql.Identifier(LOGIN_ROLE)))
    return provision(with_dbname(admin_url, dbname))


def clone(admin_url: str, template: str, dbname: str) -> str:
    """CREATE DATABASE `dbname` from the provisioned database `template`, owned by the login
    role like its template's objects; returns the login role's URL of it."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
            sql.Identifier(dbname), sql.Identifier(template), sql.Identifier(LOGIN_ROLE)))
    return as_role(with_dbname(admin_url, dbname))
