"""OpenAPI description of `/api/v2/data/{table}`'s answers (headers, bodies, examples)."""

from __future__ import annotations

_HEADERS_DOC = {
    "X-Cursor-Next": {"description": "Send as cursor= (same other parameters) for the next "
                                     "page; absent on the last page", "schema": {"type": "string"}},
    "X-Units": {"description": "Unit codes in effect for the measurement classes present, "
                               "e.g. C,mb,pct,mm", "schema": {"type": "string"}},
    "X-Aggregated-From": {"description": "With interval= or points=: the table the buckets "
                                         "were read from (calibrated, hourly or daily)",
                          "schema": {"type": "string", "enum": ["calibrated", "hourly", "daily"]}},
    "X-Aggregation-Interval": {"description": "With interval= or points=: the bucket width "
                                              "in effect, e.g. 12h", "schema": {"type": "string"}},
    "Access-Control-Allow-Origin": {"schema": {"type": "string"}},
}
RESPONSES_DOC = {
    "200": {
        "description": "Rows in time order (then device). JSON: a bare array of objects; CSV "
                       "(Accept: text/csv): a header line, then one line per row. With "
                       "interval= or points=, one row per bucket and device: each column by "
                       "its registry rule, a mean followed by <name>_min and <name>_max, then "
                       "samples, expected and complete (docs/api.md \"Aggregation\").",
        "headers": _HEADERS_DOC,
        "content": {
            "application/json": {
                "schema": {"type": "array", "items": {"type": "object"}},
                "example": [{"time": "2019-07-01T00:00:00Z", "device": "A000101",
                             "tair": 21.3, "rh": 65.2,
                             "local_time": "2019-06-30T19:00:00-0500"}]},
            "text/csv": {"schema": {"type": "string"},
                         "example": "time,device,tair\n2019-07-01T00:00:00+0000,A000101,21.3\n"},
        },
    },
    "404": {"description": "Unknown table, device or location"},
}
