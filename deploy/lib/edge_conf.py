"""The edge's nginx config rendered from deploy/nginx/nginx.conf: the one place that writes the
upstream server lines, for deploy/run.sh (`python3 deploy/lib/edge_conf.py DIR LISTEN ADDR...`
prints the config) and for the tests' NginxEdge (testbed/services.py imports `render`).
Standard library only: run.sh calls it with the system python3."""

from __future__ import annotations

import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1] / "nginx" / "nginx.conf"
# A refused or reset connection marks an instance down for 1 s (its requests go on to the next
# one, proxy_next_upstream); short, so that a restarted instance is back at once and two
# failures in a row rarely leave no instance.
SERVER_OPTIONS = "max_fails=1 fail_timeout=1s"


def render(directory: str, listen: str, upstreams: list[str], template: str | None = None) -> str:
    """deploy/nginx/nginx.conf with @DIR@, @LISTEN@ and @UPSTREAMS@ filled."""
    text = TEMPLATE.read_text() if template is None else template
    servers = "\n".join(f"        server {u} {SERVER_OPTIONS};" for u in upstreams)
    return (text.replace("@DIR@", directory).replace("@LISTEN@", listen)
            .replace("@UPSTREAMS@", servers))


def main(argv: list[str]) -> int:
    """CLI: DIR LISTEN ADDR... -> the rendered config on stdout."""
    if len(argv) < 3:
        print("usage: edge_conf.py DIR LISTEN HOST:PORT...", file=sys.stderr)
        return 2
    sys.stdout.write(render(argv[0], argv[1], argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
