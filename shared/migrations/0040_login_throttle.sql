-- Failed-login counters shared by every API worker, so throttling holds across processes.
-- Subjects (an account's lower-cased email, a client address) are stored as SHA-256 digests:
-- the table never holds attacker-chosen text or the list of addresses that tried.

CREATE TABLE login_failures (
    kind         text NOT NULL CHECK (kind IN ('account', 'address')),
    subject      bytea NOT NULL,
    failures     integer NOT NULL,
    first_failed timestamptz NOT NULL,
    last_failed  timestamptz NOT NULL,
    PRIMARY KEY (kind, subject)
);
