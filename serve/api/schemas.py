"""`/api/v2/schemas` and `/api/v2/schemas/{table}`: table names and column metadata, read from
the column registry (shared.columns) only. Always JSON, with an ETag (serve.caching)."""

from __future__ import annotations

import orjson
from flask import Response
from marshmallow import Schema, fields

from serve import caching
from serve.auth import requires
from serve.errors import Blueprint
from serve.readmodels import table_or_404
from shared.columns import TABLES
from shared.units import describe

blp = Blueprint("schemas", __name__, url_prefix="/api/v2/schemas",
                description="Tables and their columns.")


class ColumnSchema(Schema):
    """Column metadata record (for the OpenAPI document; keys served in this order)."""

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
@blp.response(200, ColumnSchema(many=True), description="Columns of the table")
def table_columns(table: str) -> Response:
    """Columns of one table: column_name, data_type, description, precision and unit, in
    table order."""
    return _json([describe(c) for c in table_or_404(table).columns])
