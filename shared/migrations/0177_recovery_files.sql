-- The recovery kit (issue 32; docs/decisions.md "Recovery kit"): what a whole-machine loss
-- needs besides the database itself (secrets.env with the seal key and passwords, the broker's
-- password file or RabbitMQ definitions with every device's and alert reader's hashed
-- credentials, the demo's stamp, the operator's profiles and settings), each file sealed with
-- SDS_RECOVERY_KEY (Fernet), a key the database never holds. In the database so that the WAL
-- archive, every backup, a standby and Patroni carry it with the data it belongs to.
CREATE TABLE recovery_files (
    name       text PRIMARY KEY,            -- path relative to .state
    sealed     bytea NOT NULL,              -- Fernet token of the file's bytes
    updated_at timestamptz NOT NULL DEFAULT now()
);
