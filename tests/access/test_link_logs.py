"""A one-time link's secret is in its URL path (/dashboard/accept/<secret>), so the access
logs of the edge (nginx, deploy/nginx/nginx.conf) and of gunicorn (serve/gunicorn_hooks.py)
must not hold it: whoever reads a log could otherwise accept an invitation before its
addressee. Real gunicorn behind the shipped nginx edge."""

from __future__ import annotations

from pathlib import Path

import psycopg
import requests

from people import links
from serve.gunicorn_hooks import redact_link_secrets
from shared import audit
from shared.config import Settings
from testbed.apiserver import GunicornServer, edge_api_env
from testbed.nginx import NginxEdge
from tests.support.access_world import World
from tests.support.ingesting import wait_for


def test_the_redaction_keeps_the_rest_of_the_line() -> None:
    line = 'GET /dashboard/accept/sdsl_abc-DEF_123?x=1 HTTP/1.1 "/dashboard/accept/sdsl_z"'
    assert redact_link_secrets(line) == ('GET /dashboard/accept/<redacted>?x=1 HTTP/1.1 '
                                         '"/dashboard/accept/<redacted>"')
    assert redact_link_secrets("/dashboard/login") == "/dashboard/login"


def test_link_secrets_stay_out_of_the_access_logs(fresh_world: World, tmp_path: Path) -> None:
    with psycopg.connect(fresh_world.url) as conn:
        issued = links.invite(conn, Settings(), org=fresh_world.org_a, email="logs@a.example",
                              role="member", teams_only=False, actor=audit.OPERATOR,
                              by_owner=True)
    secret = issued.url.rsplit("/", 1)[1]
    api = GunicornServer().start(edge_api_env(fresh_world.url), tmp_path / "api")
    edge = None
    try:
        edge = NginxEdge().start([f"127.0.0.1:{api.port}"], tmp_path / "edge")
        for base in (f"http://127.0.0.1:{edge.port}", f"http://127.0.0.1:{api.port}"):
            page = requests.get(f"{base}{links.ACCEPT_PATH}{secret}", timeout=30)
            assert page.status_code == 200 and "logs@a.example" in page.text
        # gunicorn writes its line after the answer
        wait_for(lambda: "<redacted>" in api.access_log.read_text(), 10,
                 what="the link's line in the access log")
    finally:
        if edge is not None:
            edge.stop()
        api.stop()
    for log in (edge.access_log, api.access_log):
        text = log.read_text()
        assert f"{links.ACCEPT_PATH}<redacted>" in text, text[-500:]
        assert secret not in text and secret[5:20] not in text
