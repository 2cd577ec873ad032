-- The last ET seams of issue 35 (docs/aggregate.md, "The ET seams").
--
-- * Polar twilight: on a polar-night day (Rso = 0) whose pyranometer reads a little light
--   (Rs > 0) the daily method took the night ratio 0.8 and served 0.06-0.10 mm where pyet and
--   refet both give 0: they bound Rs/Rso = Rs/0 to 1.0. The daily function now does too; 0/0
--   (no light at all) keeps 0.8.
-- * gdd is NULL, not 0.0, on a day without an air temperature reading (GREATEST ignores NULL;
--   the rule is in aggregate/statements.py).
-- * A whole day (>= 80 % of its slots) with a gap in its radiation readings summed only the
--   energy measured: a 3.6 h midday gap took a clear day's ET from 3.88 to 3.09 mm, unflagged.
--   The daily method now fills the missing slots at the day's measured Rs/Rso: its Rs is the
--   measured energy times (the day's Ra) / (the Ra of the slots measured), hour by hour
--   (aggregate/et_statements.py, `rs_fill`), from the period Ra below (eqs. 28-33, the same
--   geometry as sds_fao56_period_et).

-- Extraterrestrial radiation Ra (MJ/m2) over [t0, t1) at lat/lon, eqs. 28-33: the geometry of
-- sds_fao56_period_et (0090), alone.
CREATE OR REPLACE FUNCTION sds_fao56_period_ra(t0 timestamptz, t1 timestamptz, lat float8,
    lon float8)
RETURNS float8 LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    hours float8 := date_part('epoch', t1 - t0) / 3600;
    mid timestamp := (t0 + (t1 - t0) / 2) AT TIME ZONE 'UTC';
    doy integer := date_part('doy', mid);
    phi float8 := radians(lat);
    dr float8 := 1 + 0.033 * cos(2 * pi() / 365 * doy);                     -- eq. 23
    decl float8 := 0.409 * sin(2 * pi() / 365 * doy - 1.39);                 -- eq. 24
    b float8 := 2 * pi() * (doy - 81) / 364;                                 -- eq. 33
    sc float8 := 0.1645 * sin(2 * b) - 0.1255 * cos(b) - 0.025 * sin(b);     -- eq. 32
    clock float8 := date_part('hour', mid) + date_part('minute', mid) / 60
                    + date_part('second', mid) / 3600;
    omega float8; ws float8; w1 float8; w2 float8;
BEGIN
    IF hours <= 0 THEN
        RETURN NULL;
    END IF;
    omega := pi() / 12 * ((clock + lon / 15 + sc) - 12);                     -- eq. 31
    omega := omega - 2 * pi() * round(omega / (2 * pi()));
    ws := acos(greatest(-1.0, least(1.0, -tan(phi) * tan(decl))));          -- eq. 25
    w1 := omega - pi() * hours / 24;                                         -- eqs. 29-30
    w2 := omega + pi() * hours / 24;
    IF ws < pi() THEN
        w1 := greatest(w1, -ws);
        w2 := least(w2, ws);
    END IF;
    IF w2 <= w1 THEN
        RETURN 0;
    END IF;
    RETURN greatest((12 * 60 / pi()) * 0.0820 * dr * ((w2 - w1) * sin(phi) * sin(decl)
           + cos(phi) * cos(decl) * (sin(w2) - sin(w1))), 0);                -- eq. 28
END $$;

CREATE OR REPLACE FUNCTION sds_fao56_daily_et(tmax float8, tmin float8, rh_max float8, rh_min float8,
    wind float8, height float8, rs float8, lat float8, elev float8, doy integer)
RETURNS float8 LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    tmean float8 := (tmax + tmin) / 2;
    gamma float8 := 0.665e-3 * 101.3 * ((293 - 0.0065 * elev) / 293) ^ 5.26;
    u2 float8 := CASE WHEN abs(height - 2) < 1e-9 THEN wind
                      ELSE wind * 4.87 / ln(67.8 * height - 5.42) END;
    e_tmax float8 := 0.6108 * exp(17.27 * tmax / (tmax + 237.3));
    e_tmin float8 := 0.6108 * exp(17.27 * tmin / (tmin + 237.3));
    es float8 := (e_tmax + e_tmin) / 2;
    ea float8 := (e_tmin * rh_max + e_tmax * rh_min) / 2;                    -- eq. 17
    delta float8 := 4098 * 0.6108 * exp(17.27 * tmean / (tmean + 237.3)) / (tmean + 237.3) ^ 2;
    phi float8 := radians(lat);
    dr float8 := 1 + 0.033 * cos(2 * pi() / 365 * doy);
    decl float8 := 0.409 * sin(2 * pi() / 365 * doy - 1.39);
    ws float8 := acos(greatest(-1.0, least(1.0, -tan(phi) * tan(decl))));
    ra float8 := (24 * 60 / pi()) * 0.0820 * dr * (ws * sin(phi) * sin(decl)
                 + cos(phi) * cos(decl) * sin(ws));                          -- eq. 21
    rso float8 := (0.75 + 2e-5 * elev) * ra;
    ratio float8; rnl float8; rn float8; et0 float8;
BEGIN
    -- Rso = 0 (polar night): Rs/Rso is +infinity, bounded to 1.0, when the pyranometer read
    -- some twilight anyway (as pyet and refet take it); 0/0 is undefined: the night ratio 0.8.
    ratio := CASE WHEN rso > 0 THEN greatest(0.3, least(rs / rso, 1.0))
                  WHEN rs > 0 THEN 1.0 ELSE 0.8 END;
    rnl := 4.903e-9 * ((tmax + 273.16) ^ 4 + (tmin + 273.16) ^ 4) / 2
           * (0.34 - 0.14 * sqrt(greatest(ea, 0))) * (1.35 * ratio - 0.35);  -- eq. 39
    rn := (1 - 0.23) * rs - rnl;
    et0 := (0.408 * delta * rn + gamma * 900 / (tmean + 273) * u2 * (es - ea))
           / (delta + gamma * (1 + 0.34 * u2));                              -- eq. 6
    RETURN greatest(et0, 0);
END $$;

-- The rows each rule changes, marked for the scheduler (docs/aggregate.md, "Upgrades that
-- change a rule"): days without a temperature reading, lit days beyond the polar circles (the
-- only ones that can have Rso = 0 and Rs > 0), and whole days with radiation gaps.
INSERT INTO rollup_dirty (rollup, device, bucket)
SELECT 'daily', d.device, d.time FROM daily d LEFT JOIN locations l ON l.id = d.location
WHERE (d.maxt IS NULL AND d.gdd IS NOT NULL) OR (abs(l.lat) > 66.5 AND d.swdw > 0)
   OR (NOT d.low_quality AND d.sample_pct < 1 AND d.swdw IS NOT NULL)
ON CONFLICT DO NOTHING;
