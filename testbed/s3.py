"""A real S3-compatible server on a free loopback port, for the cold tier's tests: moto's
server mode (S3 only), a separate process from its own venv (.venv-s3, deploy/setup.sh step
5b), reached over HTTP with SigV4-signed requests as any S3 client does.

    s3 = S3Server().start(); s3.create_bucket("cold")
    settings.replace(cold_path="s3://cold/tier", **s3.cold_settings())

What it does not check that AWS S3 would (docs/decisions.md "Cold tier"): it accepts any
credentials and does not verify request signatures, keeps objects in memory (a restart loses
them; a bucket is lost with the process), has no eventual consistency to expose (neither has
AWS since 2020), and does not enforce multipart part sizes as strictly.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.fs as pafs

from testbed.process import REPO, ProcessServer, free_port, port_open, tail, wait_started

MOTO = REPO / ".venv-s3" / "bin" / "moto_server"
# moto takes any credentials; these are what the tests configure, as an operator would.
ACCESS_KEY = "sds-test-key"
SECRET_KEY = "sds-test-secret"  # noqa: S105 (a test server's, accepted whatever it is)
REGION = "us-east-1"


class S3Server(ProcessServer):
    """One moto S3 server in its own directory (its log)."""

    def start(self, base_dir: Path | None = None, *, port: int | None = None) -> S3Server:
        """Start it on `port` (default: a free one) and wait until it accepts connections."""
        if not MOTO.exists():
            raise FileNotFoundError(f"{MOTO} missing: run deploy/setup.sh (step 5b)")
        base = self._prepare_dir(base_dir, "sds-s3-")
        self._port = port or free_port()
        self.log_path = base / "moto.log"
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen([str(MOTO), "-H", "127.0.0.1", "-p", str(self._port)],
                                          stdout=log, stderr=log, cwd=base)
        wait_started(self._proc, lambda: port_open(self.port), what="moto S3 server",
                     timeout=60, log=lambda: tail(self.log_path))
        return self

    @property
    def endpoint(self) -> str:
        """The endpoint URL (SDS_COLD_S3_ENDPOINT)."""
        return f"http://127.0.0.1:{self.port}"

    def cold_settings(self) -> dict[str, str]:
        """The Settings fields that point the cold tier at this server."""
        return {"cold_s3_endpoint": self.endpoint, "cold_s3_region": REGION,
                "cold_s3_key": ACCESS_KEY, "cold_s3_secret": SECRET_KEY}

    def cold_env(self) -> dict[str, str]:
        """The same as SDS_* variables, for a process."""
        return {f"SDS_{k.upper()}": v for k, v in self.cold_settings().items()}

    def filesystem(self) -> pafs.S3FileSystem:
        """A client of this server (pyarrow's), allowed to create buckets."""
        return pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                                 access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
                                 allow_bucket_creation=True, allow_bucket_deletion=True)

    def create_bucket(self, name: str) -> None:
        """Create the bucket `name` (an operator's step before pointing SDS_COLD_PATH at it)."""
        self.filesystem().create_dir(name)

    def objects(self, prefix: str) -> dict[str, int]:
        """The objects under `bucket/prefix` (directory markers left out): key -> size."""
        infos = self.filesystem().get_file_info(
            pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
        return {i.path[len(prefix.rstrip("/")) + 1:]: i.size for i in infos
                if i.type == pafs.FileType.File}
