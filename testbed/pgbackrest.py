"""A pgBackRest repository of a test's own for a testbed PostgresServer (shared.backup renders
and runs it, as in production).

    repo = PgBackRestRepo(tmp / "pgbackrest").attach(pg)   # WAL archive + stanza
    label = repo.backup("full")
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg import sql

from testbed.postgres import PostgresServer
from testbed.process import ServiceError, chown_tree, ensure_traversable


class PgBackRestRepo:
    """A pgBackRest repository of a test's own for a PostgresServer, set up as deploy/services.sh
    sets up the shipped one: the configuration rendered by shared/backup.py for the server's
    data directory, port and socket, PostgreSQL archiving into it (ALTER SYSTEM, so a restored
    copy archives too), the stanza created. Commands run as postgres, like the deploy's.

        repo = PgBackRestRepo(tmp_path / "pgbackrest").attach(pg, archive_timeout=5)
        repo.backup("full"); repo.config  # for SDS_BACKUP_CONFIG
    """

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.config = self.base_dir / "pgbackrest.conf"

    def attach(self, pg: PostgresServer, *, archive_timeout: int = 60,
               cipher_pass: str | None = None) -> PgBackRestRepo:
        """Render the configuration for `pg` (an encrypted repository with `cipher_pass`), turn
        archiving on (a restart), create the stanza."""
        from shared import backup
        from shared.config import Settings

        settings = Settings(backup_archive_timeout=archive_timeout,
                            backup_cipher_pass=cipher_pass)
        for sub in ("", "log", "lock", "spool", "repo"):
            (self.base_dir / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        node = backup.PgNode(str(pg.data_dir), pg.port, str(pg.socket_dir))
        self.config.write_text(backup.render_config(settings, [node], base_dir=str(self.base_dir)))
        self.config.chmod(0o600)
        chown_tree(self.base_dir, "postgres")
        ensure_traversable(self.base_dir, "postgres")
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            for key, value in backup.archive_settings(str(self.config), settings).items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(key), sql.Literal(value)))
        pg.restart()  # archive_mode takes a restart
        self.run("stanza-create", timeout=120)
        return self

    def run(self, *args: str, timeout: float = 600) -> str:
        """One pgbackrest command against the stanza; its output (a failure raises)."""
        from shared import backup

        try:
            return backup.run(str(self.config), *args, timeout=timeout).stdout
        except backup.BackupError as exc:
            raise ServiceError(str(exc)) from None

    def backup(self, kind: str = "full") -> str:
        """Take a backup of `kind`; its label."""
        from shared import backup

        self.run("backup", f"--type={kind}")
        newest = backup.info(str(self.config)).newest()
        assert newest is not None
        return newest.label

    def backup_dir(self, label: str) -> Path:
        """Where the files of backup `label` are in the repository."""
        return self.base_dir / "repo" / "backup" / "sds" / label
