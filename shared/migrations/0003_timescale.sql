-- TimescaleDB: turn the data tables into hypertables. Guarded, so a PostgreSQL without the
-- extension (e.g. a managed service) still gets a working schema with plain tables.
-- The extension itself is created by a superuser (deploy/services.sh); creating it here is
-- attempted only when it is available and the role may.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb')
       AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb')
       -- Without preloading, CREATE EXTENSION ends the session (FATAL), which no handler catches.
       AND current_setting('shared_preload_libraries', true) LIKE '%timescaledb%' THEN
        BEGIN
            CREATE EXTENSION timescaledb;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'timescaledb not created (%), keeping plain tables', SQLERRM;
        END;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb') THEN
        -- Chunk sizes keep each chunk's index in memory at a few thousand devices.
        PERFORM create_hypertable('calibrated', 'time', chunk_time_interval => interval '7 days',
                                  if_not_exists => true, migrate_data => true);
        PERFORM create_hypertable('health', 'time', chunk_time_interval => interval '30 days',
                                  if_not_exists => true, migrate_data => true);
        PERFORM create_hypertable('hourly', 'time', chunk_time_interval => interval '30 days',
                                  if_not_exists => true, migrate_data => true);
        PERFORM create_hypertable('local_hourly', 'time', chunk_time_interval => interval '30 days',
                                  if_not_exists => true, migrate_data => true);
        PERFORM create_hypertable('daily', 'time', chunk_time_interval => interval '365 days',
                                  if_not_exists => true, migrate_data => true);
    END IF;
END
$$;
