-- Issue 22: the FAO-56 functions of migration 0061, corrected; aggregate/et.py is still the
-- reference and tests/aggregate/test_et_sql.py holds them equal to it.
--
-- * Daily: Rs/Rso bounded to 0.3..1.0 (ASCE-EWRI 2005 eq. 18), as the hourly function already
--   was. 0061 had only the upper bound: below 0.26 the cloudiness factor 1.35 Rs/Rso - 0.35 of
--   FAO-56 eq. 39 turns negative, net long-wave radiation becomes a gain, and an overcast day
--   (FAO-56 Example 18's weather with Rs 4.5 MJ/m2) gave 2.00 mm instead of 1.735.
-- * Hourly: a polar day (sunset hour angle pi) is not clipped at +-pi, so an hour across solar
--   midnight keeps both halves of its extraterrestrial radiation.
--
-- Rows already stored were computed with the old functions (and the old daily rules of issue
-- 22: hour counts of a missing input, the partial-day ET). The end of this migration marks
-- every stored daily row dirty, so the running aggregate scheduler recomputes them from the
-- readings in its ordinary runs after the upgrade; nobody has to run a backfill.

CREATE OR REPLACE FUNCTION sds_fao56_period_et(t0 timestamptz, t1 timestamptz, tair float8, rh float8,
    wind float8, height float8, swdw float8, lat float8, lon float8, elev float8)
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
    omega float8; ws float8; w1 float8; w2 float8; ra float8 := 0; sun float8;
    rs float8; rso float8; ratio float8; gamma float8; u2 float8; es float8; ea float8;
    rnl float8; rn float8; g float8; delta float8; rate float8;
BEGIN
    IF hours <= 0 THEN
        RETURN NULL;
    END IF;
    -- Solar time angle at the midpoint (eq. 31; UTC, so Lz = 0 and Lm = -lon), in [-pi, pi].
    omega := pi() / 12 * ((clock + lon / 15 + sc) - 12);
    omega := omega - 2 * pi() * round(omega / (2 * pi()));
    ws := acos(greatest(-1.0, least(1.0, -tan(phi) * tan(decl))));          -- eq. 25
    w1 := omega - pi() * hours / 24;                                         -- eqs. 29-30
    w2 := omega + pi() * hours / 24;
    IF ws < pi() THEN           -- clipped to sunrise/sunset; a polar day has neither
        w1 := greatest(w1, -ws);
        w2 := least(w2, ws);
    END IF;
    IF w2 > w1 THEN
        ra := greatest((12 * 60 / pi()) * 0.0820 * dr * ((w2 - w1) * sin(phi) * sin(decl)
              + cos(phi) * cos(decl) * (sin(w2) - sin(w1))), 0);             -- eq. 28
    END IF;
    sun := asin(greatest(-1.0, least(1.0, sin(phi) * sin(decl)
                                          + cos(phi) * cos(decl) * cos(omega))));
    ra := ra / hours;                                     -- MJ/m2/h
    rs := swdw * 3600 / 1e6;                              -- W/m2 -> MJ/m2/h
    rso := (0.75 + 2e-5 * elev) * ra;                     -- eq. 37
    ratio := CASE WHEN sun > 0.3 AND rso > 0 THEN greatest(0.3, least(rs / rso, 1.0))
                  ELSE 0.8 END;
    gamma := 0.665e-3 * 101.3 * ((293 - 0.0065 * elev) / 293) ^ 5.26;       -- eqs. 7-8
    u2 := CASE WHEN abs(height - 2) < 1e-9 THEN wind
               ELSE wind * 4.87 / ln(67.8 * height - 5.42) END;              -- eq. 47
    es := 0.6108 * exp(17.27 * tair / (tair + 237.3));                       -- eq. 11
    ea := es * rh;
    rnl := 2.043e-10 * (tair + 273.16) ^ 4 * (0.34 - 0.14 * sqrt(greatest(ea, 0)))
           * (1.35 * ratio - 0.35);                                          -- eq. 39, hourly
    rn := (1 - 0.23) * rs - rnl;
    g := CASE WHEN ra > 0 THEN 0.1 * rn ELSE 0.5 * rn END;                   -- eqs. 45-46
    delta := 4098 * es / (tair + 237.3) ^ 2;                                 -- eq. 13
    rate := (0.408 * delta * (rn - g) + gamma * 37 / (tair + 273) * u2 * (es - ea))
            / (delta + gamma * (1 + 0.34 * u2));                             -- eq. 53
    RETURN greatest(rate, 0) * hours;
END $$;

-- Daily method (eq. 6, G = 0) from Tmax, Tmin, RHmax, RHmin (ea by eq. 17), mean wind, the
-- day's measured short-wave energy Rs (MJ/m2), latitude, elevation and local day of year.
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
    ratio := CASE WHEN rso > 0 THEN greatest(0.3, least(rs / rso, 1.0)) ELSE 0.8 END;
    rnl := 4.903e-9 * ((tmax + 273.16) ^ 4 + (tmin + 273.16) ^ 4) / 2
           * (0.34 - 0.14 * sqrt(greatest(ea, 0))) * (1.35 * ratio - 0.35);  -- eq. 39
    rn := (1 - 0.23) * rs - rnl;
    et0 := (0.408 * delta * rn + gamma * 900 / (tmean + 273) * u2 * (es - ea))
           / (delta + gamma * (1 + 0.34 * u2));                              -- eq. 6
    RETURN greatest(et0, 0);
END $$;

-- Every stored daily bucket, marked for the scheduler (docs/aggregate.md, "Upgrades that change
-- a rule"). Hourly and local hourly rows change only at polar-day solar midnight, where Rs/Rso
-- is not used and Ra is small: those are marked too, at the latitudes where the sun can stay
-- up (|lat| > 90 - 23.45).
INSERT INTO rollup_dirty (rollup, device, bucket)
SELECT 'daily', device, time FROM daily
ON CONFLICT DO NOTHING;
INSERT INTO rollup_dirty (rollup, device, bucket)
SELECT t.rollup, t.device, t.time FROM (
    SELECT 'hourly' AS rollup, device, time, location FROM hourly
    UNION ALL SELECT 'local_hourly', device, time, location FROM local_hourly) t
JOIN locations l ON l.id = t.location
WHERE abs(l.lat) > 66.5
ON CONFLICT DO NOTHING;
