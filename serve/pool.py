"""The one way to the API's connection pool: `pool()` (the current app's) or `pool(app)`.

`serve.create_app` opens the pool and stores it with `attach`; views, authentication and the
`/data` page all borrow connections from what `pool()` returns.
"""

from __future__ import annotations

from typing import cast

from flask import Flask, current_app
from psycopg_pool import ConnectionPool

# Where the pool lives on the app (tests and benchmarks read it there too).
EXTENSION = "db"


def attach(app: Flask, opened: ConnectionPool) -> None:
    """Make `opened` the pool of `app`."""
    app.extensions[EXTENSION] = opened


def pool(app: Flask | None = None) -> ConnectionPool:
    """The connection pool of `app`, or of the app handling the current request."""
    owner = app if app is not None else cast(
        Flask, current_app._get_current_object())  # type: ignore[attr-defined]
    return cast(ConnectionPool, owner.extensions[EXTENSION])
