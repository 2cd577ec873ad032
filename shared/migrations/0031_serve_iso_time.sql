-- ISO 8601 text of an instant as the API writes it in CSV: `2019-06-30T20:00:00-0400`
-- (offset without colon, fractional seconds only when present). /data?Accept=text/csv is
-- produced by COPY, so these format `time` (offset interval '0': `+0000`) and `local_time`
-- in the database; the JSON path formats the same text in Python (serve.render).

-- Wall-clock part: YYYY-MM-DDTHH:MI:SS[.US]
CREATE FUNCTION sds_iso_wall(local timestamp) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN to_char(local, 'YYYY-MM-DD"T"HH24:MI:SS')
    || CASE WHEN mod(date_part('microseconds', local)::integer, 1000000) = 0 THEN ''
            ELSE to_char(local, '.US') END;

-- Offset part from seconds east of UTC: +0000, -0400, +0545, -070001 (seconds when present).
CREATE FUNCTION sds_iso_offset(seconds integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN seconds < 0 THEN '-' ELSE '+' END
    || lpad((abs(seconds) / 3600)::text, 2, '0')
    || lpad((mod(abs(seconds), 3600) / 60)::text, 2, '0')
    || CASE WHEN mod(abs(seconds), 60) = 0 THEN '' ELSE lpad(mod(abs(seconds), 60)::text, 2, '0') END;

-- In an IANA zone (daylight-saving aware).
CREATE FUNCTION sds_iso_time(t timestamptz, zone text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN sds_iso_wall(t AT TIME ZONE zone)
    || sds_iso_offset(extract(epoch FROM (t AT TIME ZONE zone) - (t AT TIME ZONE 'UTC'))::integer);

-- At a flat offset (interval east of UTC, ISO sign convention).
CREATE FUNCTION sds_iso_time(t timestamptz, off interval) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN sds_iso_wall(t AT TIME ZONE off) || sds_iso_offset(extract(epoch FROM off)::integer);
