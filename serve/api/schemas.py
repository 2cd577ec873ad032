"""`/api/v2/schemas` and `/api/v2/schemas/{table}`: table names and column metadata, read from
the column registry (shared.columns) only. Always JSON, with an ETag (serve.caching)."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Response
from marshmallow import EXCLUDE, Schema, ValidationError, fields

from serve import caching
from serve.auth import requires
from serve.errors import Blueprint
from serve.readmodels import table_or_404
from shared.columns import TABLES
from shared.units import EXTRA_KEYS, describe

blp = Blueprint("schemas", __name__, url_prefix="/api/v2/schemas",
                description="Tables and their columns.")


class IncludeList(fields.String):
    """`include=precision,unit` (comma-separated and/or repeated) -> the named EXTRA_KEYS."""

    is_multiple = True

    def _deserialize(  # type: ignore[override]
            self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> tuple[str, ...]:
        values = value if isinstance(value, list | tuple) else [value]
        names = [part.strip().lower() for item in values if isinstance(item, str)
                 for part in item.split(",") if part.strip()]
        unknown = [n for n in names if n not in EXTRA_KEYS]
        if unknown:
            shown = ", ".join(repr(n if len(n) <= 32 else n[:29] + "...") for n in unknown[:5])
            raise ValidationError(f"unknown key {shown}; valid: {', '.join(EXTRA_KEYS)}")
        return tuple(k for k in EXTRA_KEYS if k in names)


class SchemaArgs(Schema):
    """Query parameters of GET /api/v2/schemas/{table}; other keys ignored."""

    class Meta:
        unknown = EXCLUDE

    include = IncludeList(load_default=(), metadata={
        "type": "string", "example": "precision,unit", "description":
        "Extra keys for every record, comma-separated: `precision`, `unit` (opt-in: without"
        " it a record is exactly column_name, data_type, description, as the interface"
        " specifies)"})


class ColumnSchema(Schema):
    """Column metadata record (for the OpenAPI document; keys served in this order;
    precision and unit only when asked for with `include`)."""

    column_name = fields.String(metadata={"description": "Name, usable in select"})
    data_type = fields.String(metadata={"description": "SQL type, e.g. real"})
    description = fields.String(metadata={"description": "Meaning and output unit"})
    precision = fields.Integer(allow_none=True, metadata={
        "description": "Decimals of a value served in `unit` (null: not a number); each unit"
                       " parameter's other units may add decimals (docs/api.md)"})
    unit = fields.String(allow_none=True, metadata={
        "description": "Unit of the value without unit parameters, as in X-Units (null: none)"})


def _json(value: object) -> Response:
    # The registry is fixed for a release: an ETag lets clients revalidate with a 304.
    return caching.conditional(Response(orjson.dumps(value), mimetype="application/json"))


@blp.route("")
@requires("data:read")
@blp.doc(responses={"200": {
    "description": "Table names",
    "content": {"application/json": {"schema": {"type": "array", "items": {"type": "string"}},
                                     "example": list(TABLES)}}}})
def list_tables() -> Response:
    """Names of the data tables, each usable as {table} in /schemas and /data."""
    return _json(list(TABLES))


@blp.route("/<table>")
@requires("data:read")
@blp.arguments(SchemaArgs, location="query", as_kwargs=True)
@blp.response(200, ColumnSchema(many=True), description="Columns of the table")
def table_columns(table: str, include: tuple[str, ...]) -> Response:
    """Columns of one table in table order: column_name, data_type and description, then
    precision and/or unit when named in `include`."""
    return _json([describe(c, include) for c in table_or_404(table).columns])
