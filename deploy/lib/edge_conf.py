"""The edge's nginx config rendered from deploy/nginx/nginx.conf: the one place that writes the
upstream server lines, for deploy/run.sh (`python3 deploy/lib/edge_conf.py DIR LISTEN ADDR...`
prints the config) and for the tests' NginxEdge (testbed/nginx.py imports `render`).
Standard library only: run.sh calls it with the system python3."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1] / "nginx" / "nginx.conf"
REPO = Path(__file__).resolve().parents[2]
# The dashboard's static files, which the edge serves itself (serve/web/assets.py).
STATIC = REPO / "serve" / "web" / "static"

# A refused or reset connection marks an instance down for 1 s (its requests go on to the next
# one, proxy_next_upstream); short, so that a restarted instance is back at once and two
# failures in a row rarely leave no instance.
SERVER_OPTIONS = "max_fails=1 fail_timeout=1s"


def _asset_version() -> str:
    """serve/web/assetversion.py's digest of STATIC, loaded by path (standard library only; the
    system python3 running this has no virtualenv and the repository is not on its path)."""
    spec = importlib.util.spec_from_file_location(
        "sds_assetversion", REPO / "serve" / "web" / "assetversion.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.digest(STATIC))


def render(directory: str, listen: str, upstreams: list[str], template: str | None = None) -> str:
    """deploy/nginx/nginx.conf with @DIR@, @LISTEN@, @UPSTREAMS@, @STATIC@ and @ASSET_VERSION@
    (the static files' version now, as the API computes it when it starts) filled."""
    text = TEMPLATE.read_text() if template is None else template
    servers = "\n".join(f"        server {u} {SERVER_OPTIONS};" for u in upstreams)
    return (text.replace("@DIR@", directory).replace("@LISTEN@", listen)
            .replace("@UPSTREAMS@", servers).replace("@STATIC@", str(STATIC))
            .replace("@ASSET_VERSION@", _asset_version()))


def main(argv: list[str]) -> int:
    """CLI: DIR LISTEN ADDR... -> the rendered config on stdout."""
    if len(argv) < 3:
        print("usage: edge_conf.py DIR LISTEN HOST:PORT...", file=sys.stderr)
        return 2
    sys.stdout.write(render(argv[0], argv[1], argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
