"""The quarantine reason codes and what each means: the one place they are defined.

The ingester (ingest/jsonframe.py, ingest/payload.py, ingest/writer.py) writes them into the
quarantine's `reason`; the dashboard's bad-data page explains each code it shows from
`REASONS`, and docs/ingest.md lists them all (tests/ingest/test_payload.py checks it). Here, in
shared/, because serve may not import ingest (the layers contract in pyproject.toml).
"""

from __future__ import annotations

import re

# Whole-message and per-element codes found while framing (ingest/jsonframe.py).
PAYLOAD_TOO_LARGE = "payload_too_large"
NOT_UTF8 = "not_utf8"
BAD_JSON = "bad_json"
# Reason codes, in the order a reading's problems are reported (the first one names the row).
BAD_SHAPE = "bad_shape"
DEVICE_MISMATCH = "device_mismatch"
MISSING_TIME = "missing_time"
BAD_TIME = "bad_time"
OFF_GRID = "off_grid"
FUTURE_TIME = "future_time"
TOO_OLD = "too_old"
WRONG_TYPE = "wrong_type"
NOT_FINITE = "not_finite"
OUT_OF_RANGE = "out_of_range"
NO_VALUES = "no_values"
BAD_TEXT = "bad_text"
DUPLICATE_KEY = "duplicate_key"
SUMMARISED = "rejections_summarised"
INTERNAL_ERROR = "internal_error"

REASONS: dict[str, str] = {
    PAYLOAD_TOO_LARGE: "payload larger than SDS_INGEST_MAX_PAYLOAD (checked before parsing)",
    NOT_UTF8: "payload bytes are not UTF-8",
    BAD_JSON: "payload is not JSON",
    BAD_SHAPE: "JSON is not an object or a non-empty array of objects",
    "bad_topic": "topic is not {prefix}/{device}/readings|health",
    DUPLICATE_KEY: "a reading repeats a JSON key (which value was meant is unknowable)",
    "unknown_device": "no registered device has the topic's name",
    DEVICE_MISMATCH: "the reading's `device` differs from the topic's device",
    MISSING_TIME: "the reading has no `time`",
    BAD_TIME: "`time` is not an ISO 8601 instant with a UTC offset",
    OFF_GRID: "a reading's `time` is not on the 5-minute UTC grid",
    FUTURE_TIME: "`time` is more than SDS_INGEST_MAX_FUTURE seconds ahead of the ingester",
    TOO_OLD: "`time` is older than SDS_INGEST_HORIZON_DAYS",
    WRONG_TYPE: "a field has the wrong JSON type (e.g. a string or boolean for a number)",
    NOT_FINITE: "a number is NaN or Infinity",
    OUT_OF_RANGE: "a value is outside the column's plausible range",
    BAD_TEXT: "a text field (fw) contains control characters",
    NO_VALUES: "a reading carries no measurement at all",
    SUMMARISED: "rejections of one message beyond SDS_INGEST_QUARANTINE_ROWS_PER_MESSAGE, "
                "counted by reason in one row",
    INTERNAL_ERROR: "the ingester failed to decode the message (a bug; logged with a traceback)",
    "db_rejected": "the database refused the message (logged); kept here instead of retried",
}


# A quoted string as the ingester writes one into a detail (Python's repr: '...' or "...",
# with backslash escapes).
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'" + r'|"(?:[^"\\\n]|\\.)*"')
HIDDEN = "'(hidden)'"


def without_quotes(detail: str | None) -> str | None:
    """A quarantine detail with every string the device sent replaced by '(hidden)': for
    users who are not administrators, who do not see payloads (the reason and the field names
    stay)."""
    if detail is None:
        return None
    return _QUOTED.sub(HIDDEN, detail)
