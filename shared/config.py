"""Settings read once from the environment (`SDS_*` variables); the only reader of os.environ.

Each field maps to the variable `SDS_<FIELD NAME IN UPPER CASE>`; its metadata holds the
documentation shown by `sds config` and copied into docs/settings.md. Fields marked secret are
hidden in `repr` and never logged.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "SDS_"


def _f(default: Any, doc: str, *, secret: bool = False) -> Any:
    return field(default=default, metadata={"doc": doc, "secret": secret})


@dataclass(frozen=True, slots=True)
class Settings:
    """Effective configuration of one process. Tests build it directly."""

    # --- database ---
    database_url: str = _f(
        "postgresql://sds@127.0.0.1:25432/sds",
        "libpq URL of the PostgreSQL (TimescaleDB) database", secret=True)
    db_pool_min: int = _f(1, "Connections each process keeps open")
    db_pool_max: int = _f(8, "Most connections each process opens")
    statement_timeout_ms: int = _f(30000, "Per-statement time limit for API queries (ms)")
    database_read_url: str | None = _f(
        None, "libpq URL of a hot standby the API reads /data pages from (unset: all reads go "
        "to SDS_DATABASE_URL); writes always go to SDS_DATABASE_URL", secret=True)
    read_max_staleness: float = _f(
        10.0, "Most seconds the standby may lag behind the primary for a read to be served from "
        "it; past this the API reads from the primary and says so in X-Read-Source")
    db_roles: bool = _f(
        True, "Switch each process to its NOLOGIN database role (sds_api, sds_auth, sds_ingest, "
        "sds_aggregate; docs/security.md) with SET ROLE; off: everything runs as the login role")

    # --- MQTT broker ---
    mqtt_host: str = _f("127.0.0.1", "Broker host")
    mqtt_port: int = _f(1883, "Broker port")
    mqtt_username: str | None = _f("ingester", "Broker user name of the ingester")
    mqtt_password: str | None = _f(None, "Broker password of the ingester", secret=True)
    mqtt_client_id: str = _f(
        "ingester", "Fixed client id: the broker keeps its session (the shipped broker uses the "
        "user name as client id, so keep it equal to SDS_MQTT_USERNAME)")
    mqtt_protocol: str = _f(
        "5", "MQTT version the ingester and simulator speak: 5 (mosquitto) or 3.1.1 (the "
        "RabbitMQ cluster profile; RabbitMQ 3.10 has no MQTT 5)")
    mqtt_failover: str = _f(
        "", "More brokers of the same cluster as host:port,host:port: every reconnect moves "
        "to the next one (the RabbitMQ cluster profile's other nodes; empty: only "
        "SDS_MQTT_HOST:SDS_MQTT_PORT)")
    mqtt_tls_ca: str | None = _f(None, "CA file; when set the ingester connects with TLS")
    mqtt_keepalive: int = _f(30, "MQTT keepalive (s)")
    mqtt_session_expiry: int = _f(
        7 * 24 * 3600, "MQTT 5 session expiry (s): how long the broker queues for the ingester")
    topic_prefix: str = _f("sensors", "First topic level: {prefix}/{device}/readings|health")
    broker_passwd_file: str | None = _f(
        None, "mosquitto password file the API writes device logins into (the dashboard's "
        "fleet forms and POST /api/v2/devices; deploy/run.sh: .state/mosquitto/passwd). Unset: "
        "the API adds no device and changes no password (sds device does)")
    broker_pid_file: str | None = _f(
        None, "pid file of the mosquitto the API reloads after a login change (unset: "
        "mosquitto.pid beside SDS_BROKER_PASSWD_FILE)")
    device_mqtt_address: str | None = _f(
        None, "host:port devices connect to, shown in a new device's configuration line "
        "(unset: the host name the dashboard was reached at, and SDS_MQTT_PORT)")

    # --- ingest ---
    ingest_batch_size: int = _f(500, "Most messages per database transaction")
    ingest_flush_interval: float = _f(0.25, "Longest a received message waits for commit (s)")
    ingest_max_payload: int = _f(
        1536 * 1024, "Largest accepted payload (bytes): the largest legitimate message, a week's "
        "backlog of 2016 readings with every field in its longest JSON form, is 1,393,056 bytes "
        "(docs/ingest.md \"Message size\"); the shipped broker refuses packets over this plus "
        "4 KiB (deploy/mosquitto/durable.conf max_packet_size)")
    ingest_max_future: int = _f(300, "How far in the future a reading may be (s)")
    ingest_horizon_days: int = _f(400, "Oldest accepted reading (days before now)")
    ingest_shards: int = _f(
        1, "Ingester shards sharing the stream through the MQTT 5 shared subscription "
        "$share/{SDS_INGEST_SHARE_GROUP}/{prefix}/# (1: one ingester, plain subscription; at "
        "most 16). Shard k "
        "logs in as SDS_MQTT_USERNAME-k with client id SDS_MQTT_CLIENT_ID-k. deploy/run.sh "
        "starts one per core when unset (1 with SDS_BROKER=rabbitmq-cluster)")
    ingest_shard: int = _f(
        0, "This process's shard, 1..SDS_INGEST_SHARDS (deploy/run.sh sets it; 0 with one shard)")
    ingest_share_group: str | None = _f(
        None, "Secret name of the shards' shared subscription group (letters, digits, - and _, "
        "at least 16): mosquitto lets any client join a group it can name, so the name is a "
        "per-install secret (deploy/services.sh generates it; docs/security.md). Required "
        "with SDS_INGEST_SHARDS > 1", secret=True)
    ingest_quarantine_rows_per_message: int = _f(
        100, "Most quarantine rows one message may create; further rejected readings of it "
        "are counted by reason in one summary row")
    ingest_quarantine_payload_max: int = _f(
        4096, "Bytes of a quarantined payload kept: a longer payload keeps this prefix, its size "
        "and its SHA-256")
    ingest_quarantine_device_hourly_bytes: int = _f(
        1024 * 1024, "Quarantine one device may fill per clock hour (bytes kept plus a per-row "
        "overhead; registered devices each, all other senders together): past it the device's "
        "rejections are counted by reason in quarantine_unkept, not kept, and "
        "sds_ingest_quarantine_unkept_total{device} rises (0: no budget)")
    ingest_quarantine_device_total_bytes: int = _f(
        32 * 1024 * 1024, "Quarantine one device may fill within SDS_QUARANTINE_RETENTION_DAYS, "
        "counted like the hourly budget (0: only the hourly budget)")
    quarantine_retention_days: int = _f(
        30, "Quarantine rows older than this are deleted by the ingester, hourly (0: kept "
        "until `sds quarantine purge`)")
    audit_retention_days: int = _f(
        365, "Audit log entries older than this are deleted by the scheduler, hourly (0: kept "
        "for ever)")
    ingest_receive_maximum: int = _f(
        1000, "MQTT 5 Receive Maximum the ingester asks for: unacknowledged messages the broker "
        "may send it at once (overrides mosquitto's max_inflight_messages for this client)")
    ingest_db_watchdog: float = _f(
        30.0, "Longest a batch's database write may hang (s): past it the ingester breaks the "
        "connection (nothing is acked) and retries the batch on a new one")
    ingest_lock_timeout: float = _f(
        30.0, "Leader lock lease (s): PostgreSQL ends the lock session of an ingester that "
        "stayed silent this long (frozen or cut off), so a standby can take over")
    fault_at: str | None = _f(
        None, "Test-only fault point where the ingester SIGKILLs itself: after_receive, "
        "after_insert_before_commit or after_commit_before_ack (empty: off)")
    fault_every: int = _f(1, "Test-only: the fault fires at every Nth pass of the fault point")
    fault_signal: str = _f(
        "KILL", "Test-only: what the fault point does to the process: KILL (SIGKILL) or STOP "
        "(SIGSTOP, frozen until a SIGCONT)")
    metrics_port: int = _f(9108, "Prometheus metrics port of the ingester (0 disables)")
    metrics_bind: str = _f("127.0.0.1", "Address the metrics endpoints bind to")

    # --- aggregate ---
    aggregate_interval: int = _f(60, "Seconds between rollup runs")
    low_quality_pct: float = _f(80.0, "sample_pct below this marks a rollup row low_quality")
    aggregate_metrics_port: int = _f(9109, "Prometheus metrics port of the scheduler (0 off)")

    # --- data lifecycle (docs/operations.md "Data lifecycle") ---
    retention_calibrated_days: int = _f(
        0, "Raw calibrated readings older than this many days are exported, then dropped "
        "(0: kept forever); organisations may override it (sds storage policy); rollups are kept")
    retention_health_days: int = _f(
        0, "Health reports older than this many days are exported, then dropped (0: kept "
        "forever); organisations may override it")
    retention_export_dir: str | None = _f(
        None, "Directory the CSV.gz export of rows about to be dropped is written to (by device "
        "and month); retention drops nothing while it is unset")
    retention_interval: int = _f(3600, "Seconds between retention runs of the scheduler")
    hot_days: int = _f(
        430, "Cold tier (docs/operations.md \"Cold tier\"): calibrated readings in whole months "
        "older than this many days move to Parquet files under SDS_COLD_PATH, by the "
        "scheduler every SDS_COLD_INTERVAL s (0: off). The default keeps the rollups' "
        "re-aggregation window hot: SDS_INGEST_HORIZON_DAYS (400) plus retention's 2-day margin "
        "plus 28 days (docs/decisions.md \"Cold tier\")")
    cold_path: str = _f(
        ".state/cold", "Where the cold tier's Parquet files live: a directory (a second disk or "
        "a network mount), or s3://bucket/prefix for S3-compatible object storage (the "
        "SDS_COLD_S3_* settings; docs/operations.md \"Cold tier\")")
    cold_interval: int = _f(3600, "Seconds between the scheduler's cold tier runs (at least 60)")
    cold_s3_endpoint: str | None = _f(
        None, "S3 endpoint URL of the cold tier, scheme://host[:port] (e.g. "
        "https://s3.eu-west-1.amazonaws.com, http://backup.example:9000; unset: AWS for "
        "SDS_COLD_S3_REGION); buckets are addressed by path when it is set")
    cold_s3_region: str = _f("us-east-1", "S3 region of the cold tier's bucket")
    cold_s3_key: str | None = _f(
        None, "S3 access key of the cold tier (unset: the AWS default chain: AWS_* variables, "
        "~/.aws, an instance role)", secret=True)
    cold_s3_secret: str | None = _f(None, "S3 secret access key of the cold tier", secret=True)

    # --- alerts (docs/alerts.md) ---
    alert_sweep_interval: float = _f(
        30.0, "Seconds between the alert evaluator's sweeps (silent devices, a missed NOTIFY)")
    alert_max_age: int = _f(
        86400, "Readings and buckets older than this many seconds when they arrive are not "
        "evaluated by alert rules (a backlog does not raise alerts about last week)")
    alert_event_retention_days: int = _f(
        365, "Alert events (notifications) older than this many days are deleted (0: kept)")
    alert_max_rules: int = _f(
        200, "Alert rules one organisation may have (inactive ones count; delete rules to make "
        "room); the next POST /alerts is 409 (0: no cap)")
    alerts_metrics_port: int = _f(9112, "Prometheus metrics port of the alert evaluator (0 off)")

    # --- backups (pgBackRest; docs/operations.md "Backups and restore") ---
    backup_config: str | None = _f(
        None, "The pgBackRest configuration file the processes and `sds backup` use "
        "(deploy/services.sh renders it into .state/pgbackrest/ and names it in "
        ".state/secrets.env); unset: no backups are scheduled and `sds backup` refuses")
    state_dir: str | None = _f(
        None, "The deployment's .state directory (deploy/services.sh names it in "
        ".state/secrets.env): `sds` keeps the recovery kit of its files (shared/recovery.py)")
    recovery_key: str | None = _f(
        None, "Fernet key sealing the recovery kit in the database (generated into "
        ".state/secrets.env; keep a copy off the machine: a whole-machine recovery needs it)",
        secret=True)
    backup_cipher_pass: str | None = _f(
        None, "Passphrase encrypting the backup repository (pgBackRest aes-256-cbc): set it "
        "for a new repository that leaves the machine (a second host, S3); an existing "
        "unencrypted repository cannot be encrypted in place. Keep it off the machine with "
        "SDS_RECOVERY_KEY: a restore needs it", secret=True)
    backup_repo_type: str = _f(
        "posix", "Where the backup repository lives: posix (a directory: the embedded default "
        "under .state/pgbackrest/repo, or a second disk or network mount), s3 (S3-compatible "
        "object storage) or sftp (a second host; needs a pgBackRest built with libssh2, which "
        "Debian bookworm's 2.45 is not)")
    backup_repo_path: str | None = _f(
        None, "Repository directory (posix, sftp) or path inside the bucket (s3); unset: "
        ".state/pgbackrest/repo (posix), /sds (s3, sftp)")
    backup_s3_endpoint: str | None = _f(
        None, "S3 endpoint host[:port] (s3), e.g. s3.eu-west-1.amazonaws.com")
    backup_s3_bucket: str | None = _f(None, "S3 bucket (s3)")
    backup_s3_region: str = _f("us-east-1", "S3 region (s3)")
    backup_s3_key: str | None = _f(None, "S3 access key (s3)", secret=True)
    backup_s3_secret: str | None = _f(None, "S3 secret access key (s3)", secret=True)
    backup_s3_uri_style: str = _f(
        "host", "S3 addressing: host (bucket.endpoint) or path (endpoint/bucket, as MinIO and "
        "most self-hosted stores want)")
    backup_s3_verify_tls: bool = _f(True, "Check the S3 endpoint's TLS certificate")
    backup_sftp_host: str | None = _f(None, "Repository host (sftp)")
    backup_sftp_user: str = _f("pgbackrest", "User on the repository host (sftp)")
    backup_sftp_key_file: str | None = _f(
        None, "Private key file of user postgres for the repository host (sftp)")
    backup_retention_full: int = _f(
        2, "Full backups kept; older ones, and the WAL only they need, are expired")
    backup_retention_diff: int = _f(6, "Differential backups kept")
    backup_full_cron: str = _f(
        "0 1 * * 0", "When the scheduler takes a full backup (crontab fields, UTC)")
    backup_diff_cron: str = _f(
        "0 1 * * 1-6", "When the scheduler takes a differential backup (crontab fields, UTC)")
    backup_archive_timeout: int = _f(
        60, "PostgreSQL's archive_timeout (s): a WAL segment is archived at the latest this "
        "long after its first write, which bounds what a lost disk loses while the WAL stream "
        "is down (docs/operations.md)")

    # --- HTTP API ---
    edge_bind: str = _f(
        "127.0.0.1:8080", "Address the edge (nginx, deploy/nginx/nginx.conf) listens on for "
        "clients; deploy/run.sh starts it in front of the API instances")
    api_instances: int = _f(
        1, "API instances (gunicorn) deploy/run.sh starts behind the edge, which balances them")
    demo_history_days: int = _f(
        500, "Days of 5-minute history deploy/run.sh's demo starts with (first run only): more "
        "than SDS_HOT_DAYS fills the cold tier at once; fewer make the first run quicker (0: "
        "the demo starts empty and fills from the simulator)")
    http_bind: str = _f(
        "127.0.0.1:8081", "Address gunicorn binds to; deploy/run.sh gives API instance k this "
        "port + k - 1")
    http_workers: int = _f(
        5, "gunicorn worker processes (of each API instance); more than "
        "SDS_API_USER_CONCURRENCY, so one user's requests never hold them all")
    api_metrics_port: int = _f(
        9110, "Prometheus metrics port of the API (its gunicorn master, all workers summed; "
        "on SDS_METRICS_BIND, never through the edge); deploy/run.sh gives API instance k this "
        "port + k - 1 (0 disables)")

    # --- monitoring (deploy/prometheus/, docs/operations.md "Monitoring and alerts") ---
    prometheus_port: int = _f(9190, "Port of the Prometheus server deploy/run.sh starts")
    alertmanager_port: int = _f(9193, "Port of the Alertmanager deploy/run.sh starts")
    node_exporter_port: int = _f(
        9191, "Port of node_exporter (the filesystem holding .state, the supervisors' .prom "
        "files)")
    alert_webhook_url: str = _f(
        "http://127.0.0.1:9199/alerts", "Where Alertmanager posts operator alerts (its webhook "
        "JSON); point it at your paging bridge")
    token_ttl: int = _f(24 * 3600, "Bearer token lifetime (s)")
    public_url: str = _f(
        "http://127.0.0.1:8080", "The service's address as its users reach it (the edge): "
        "invitation and password-reset links start with it, never with a request's Host")
    invite_ttl: int = _f(7 * 24 * 3600, "How long an invitation link works (s)")
    reset_ttl: int = _f(3600, "How long a password-reset link works (s)")
    apikey_query_enabled: bool = _f(
        False, "Accept the deprecated ?apikey= query form (sunset 2021-05-14)")
    apikey_retrievable: bool = _f(
        True, "Owners (basic or bearer) read their API keys' values in GET /apikeys and PUT "
        "answers, as the interface spec says; needs SDS_APIKEY_SEAL_KEYS. false: keys are "
        "shown once, at creation, and listed masked")
    apikey_seal_keys: str | None = _f(
        None, "Comma-separated Fernet keys sealing the stored copy of each API key: the first "
        "seals, all open (rotation: docs/auth.md); unset: keys are shown once", secret=True)
    basic_auth_cache_ttl: int = _f(60, "Seconds a verified basic credential is remembered")
    login_max_failures: int = _f(10, "Failed logins per account (any address) before throttling")
    login_window: int = _f(300, "Window (s) for counting failed logins")
    login_address_max_failures: int = _f(
        50, "Failed logins from one client address (any accounts) before throttling")
    api_rate_limit: int = _f(
        1200, "Requests each API key, and each user with basic or bearer credentials, may make "
        "per SDS_API_RATE_WINDOW, counted in the database for all workers (0: no limit)")
    api_rate_window: int = _f(60, "Window (s) of the per-key and per-user request rate limit")
    api_user_rate_limit: int = _f(
        2400, "Requests each user may make per SDS_API_RATE_WINDOW over all their API keys and "
        "tokens together, so more keys buy no more requests (0: no limit)")
    api_org_rate_limit: int = _f(
        6000, "Requests each organisation may make per SDS_API_RATE_WINDOW over all its users "
        "(0: no limit)")
    api_user_concurrency: int = _f(
        4, "Requests of one user (any keys or tokens) in flight at once on one host; the next "
        "is 429 (0: no cap)")
    api_org_concurrency: int = _f(
        8, "Requests of one organisation in flight at once on one host; the next is 429 "
        "(0: no cap)")
    api_heavy_rows: int = _f(
        2400, "A GET whose estimated cost is more rows served than this is a heavy page: it "
        "needs one of SDS_API_HEAVY_SLOTS. The cost of a /data page is its rows, or for an "
        "aggregated page its buckets plus an eighth of the readings of its window; 2400 is "
        "the largest default page, so a page without limit= is never heavy")
    api_heavy_slots: int = _f(
        1, "Heavy pages served at once on one host (all API instances and workers); the next "
        "gets 503 with Retry-After, so the other workers keep answering /health and small "
        "requests. Keep it below SDS_HTTP_WORKERS x SDS_API_INSTANCES (0: no pool)")
    api_slot_dir: str | None = _f(
        None, "Directory of the lock files that count requests in flight (unset: one under the "
        "system's temporary directory per database)")
    api_max_keys_per_user: int = _f(
        20, "API keys one user may hold (deactivated ones count; delete keys to make room); "
        "the next POST /apikeys is 409 (0: no cap)")
    trusted_proxy_hops: int = _f(
        0, "Reverse proxies in front of the API whose X-Forwarded-For is trusted for the "
        "client address (0: use the socket peer)")
    cors_origin: str = _f("*", "Access-Control-Allow-Origin value")
    cursor_secret: str | None = _f(
        None, "Key for the HMAC that makes /data cursors tamper-evident; every worker and host "
        "must share it (unset: a random key kept in the database is used)", secret=True)

    # --- dashboard (docs/dashboard.md) ---
    dashboard_cookie_secure: bool = _f(
        False, "Send the dashboard's session cookie over HTTPS only (set it when a TLS proxy "
        "fronts the service)")
    dashboard_silent_intervals: int = _f(
        3, "A device is flagged silent on the dashboard after this many of its reporting "
        "intervals without a message")
    dashboard_low_battery_pct: float = _f(
        20.0, "Battery charge (%) below which the dashboard flags a device")

    # --- alert delivery (docs/alerts.md "Channels") ---
    delivery_workers: int = _f(
        4, "Deliveries the deliverer (python -m alerts.delivery) sends at once, each on its own "
        "database connection")
    delivery_sweep_interval: float = _f(
        2.0, "Seconds between the deliverer's sweeps for due retries and events it was not "
        "told of (it also wakes at once on each new event)")
    delivery_retry_base: float = _f(
        5.0, "First retry delay of a failed delivery (s); each further retry doubles it, with "
        "jitter, up to SDS_DELIVERY_RETRY_CAP")
    delivery_retry_cap: float = _f(7200.0, "Longest delay between two attempts of a delivery (s)")
    delivery_max_attempts: int = _f(
        15, "Attempts of one delivery before it is given up (state failed): with the default "
        "backoff they spread over 4.4 to 8.8 hours")
    channel_max_failures: int = _f(
        15, "Failed attempts in a row after which a channel is disabled (its admins are told "
        "by a channel_disabled notification)")
    delivery_stall_timeout: float = _f(
        120.0, "Seconds the deliverer may go without a worker or its fan-out loop completing a "
        "round (the database gone, every worker hung) before it exits with status 1 for its "
        "supervisor to start it again; a worker thread that ended makes it exit at once")
    delivery_metrics_port: int = _f(9107, "Prometheus metrics port of the deliverer (0 off)")
    webhook_timeout: float = _f(
        10.0, "Longest a webhook attempt may take, connecting, sending and reading the answer (s)")
    webhook_max_response: int = _f(65536, "Most bytes of a webhook receiver's answer read")
    webhook_allow_private: bool = _f(
        False, "Let webhooks target loopback, private, link-local and other non-public "
        "addresses (off, the default and the demo's: refused at creation and at delivery; the "
        "tests turn it on for their receivers on loopback)")
    alerts_mqtt_username: str = _f(
        "alerts-publisher", "Broker account the deliverer publishes alerts with")
    alerts_mqtt_password: str | None = _f(
        None, "Broker password of SDS_ALERTS_MQTT_USERNAME", secret=True)

    # --- outgoing email (alerts, invitations and password resets: shared/mail.py) ---
    smtp_host: str | None = _f(None, "SMTP server for outgoing email (unset: no email is sent)")
    smtp_port: int = _f(25, "SMTP server port")
    smtp_security: str = _f(
        "starttls", "none, starttls (upgrade a plain connection; refused if the server does not "
        "offer it) or tls (TLS from the first byte, usually port 465)")
    smtp_username: str | None = _f(None, "SMTP login (unset: no AUTH)")
    smtp_password: str | None = _f(None, "SMTP password", secret=True)
    smtp_from: str = _f("sds@localhost", "From address of outgoing email")
    smtp_timeout: float = _f(20.0, "Longest an SMTP conversation may stall (s)")

    # --- logging ---
    log_level: str = _f("INFO", "Log level of every process")
    log_repeat_interval: float = _f(
        60.0, "A traceback of the same cause (same place, same exception raised at the same "
        "line) is written at most once per this many seconds per process, the next one with "
        "the count dropped (0: every one)")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Build settings from `SDS_*` variables; unknown values raise ValueError naming them."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            key = PREFIX + f.name.upper()
            if key in environ:
                try:
                    values[f.name] = _parse(hints[f.name], environ[key])
                except ValueError as exc:
                    raise ValueError(f"{key}: {exc}") from None
        return cls(**values)

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown = "***" if f.metadata.get("secret") and value else repr(value)
            parts.append(f"{f.name}={shown}")
        return f"Settings({', '.join(parts)})"

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (tests, CLI overrides)."""
        return dataclasses.replace(self, **changes)


def _parse(hint: Any, raw: str) -> Any:
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = True, args[0]
    if optional and raw == "":
        return None
    if hint is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"expected a boolean, got {raw!r}")
    if hint is int:
        return int(raw)
    if hint is float:
        return float(raw)
    return raw


def documented() -> list[tuple[str, str, str, bool]]:
    """(variable, default, description, secret) for every setting, for docs and `sds config`."""
    rows = []
    for f in dataclasses.fields(Settings):
        rows.append((PREFIX + f.name.upper(), repr(f.default), f.metadata["doc"],
                     bool(f.metadata.get("secret"))))
    return rows


def markdown_table() -> str:
    """The settings table of docs/settings.md (a test keeps the page equal to it)."""
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for var, default, doc, secret in documented():
        shown = "(generated by deploy/run.sh)" if secret and default == "None" else (
            "`" + default.strip("'") + "`")
        lines.append(f"| `{var}` | {shown} | {doc.replace('|', '/')} |")
    return "\n".join(lines)
