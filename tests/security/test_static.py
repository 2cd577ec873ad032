"""Static checks on the source (reliability plan S11, S17).

- S11: secrets are compared in constant time. Every `==`/`!=` in serve/, shared/credentials.py
  and shared/accounts.py is parsed (AST, not grep) and refused when an operand names a digest,
  hash, token, key, secret or password value; `hmac.compare_digest` must be what compares them.
  (tests/access/test_secrets_at_rest.py greps serve/auth.py and shared/credentials.py; this one
  covers every module that handles credentials, and proves it can fail.)
- S17: no live-looking secret is committed. The service's own key and token format (prefix, 43
  URL-safe characters, CRC32 suffix) is searched for in every tracked text file and any match
  whose check suffix is valid is a leak; test fixtures must use values with a wrong check. A
  planted key in a temporary file is found, which tests the scanner itself.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from shared import credentials
from tests.support.figures import Figures

ROOT = Path(__file__).resolve().parents[2]
SECRET_NAME = re.compile(
    r"(digest|hash|token|secret|password|passwd|apikey|api_key|^key$|_key$|^wanted$|^fp$)",
    re.IGNORECASE)
# Names that contain a secret-ish word but hold no secret (identifiers, kinds, counts).
NOT_SECRET = re.compile(r"(_id|_ids|_kind|_type|_name|_ttl|_count|_prefix|_scheme|_len)$|"
                        r"^(token_id|key_id|TOKEN_PREFIX|API_KEY_PREFIX)$", re.IGNORECASE)
SOURCES = [*sorted((ROOT / "serve").rglob("*.py")), ROOT / "shared" / "credentials.py",
           ROOT / "shared" / "accounts.py"]
SECRET_FORMAT = re.compile(r"\b(sdsk_|sdst_)([A-Za-z0-9_-]{43})([0-9a-f]{8})\b")


def _name(node: ast.AST) -> str | None:
    """The identifier an operand ends in: `x`, `a.b.x`, `x[...]`, `x()` -> 'x'."""
    while isinstance(node, ast.Subscript | ast.Call):
        node = node.value if isinstance(node, ast.Subscript) else node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def secret_comparisons(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: code` of each ==/!= whose operand names a secret value."""
    found = []
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            continue
        for operand in (node.left, *node.comparators):
            name = _name(operand)
            if name and SECRET_NAME.search(name) and not NOT_SECRET.search(name):
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
                break
    return found


def test_secret_comparisons_are_constant_time(figures: Figures) -> None:
    found = []
    for path in SOURCES:
        found += secret_comparisons(path.read_text(), str(path.relative_to(ROOT)))
    figures.record("s11_non_constant_time_comparisons", len(found), section="security",
                   title="== / != on secret values in serve/ and shared credential code",
                   target="0", source="tests/security/test_static.py")
    assert found == [], "compare secrets with hmac.compare_digest:\n" + "\n".join(found)
    uses = sum(p.read_text().count("compare_digest") for p in SOURCES)
    assert uses >= 3, "the credential checks no longer use hmac.compare_digest"


def test_the_comparison_check_can_fail() -> None:
    bad = ("def check(row, wanted, token, user):\n"
           "    if row.digest == wanted: pass\n"
           "    if token != user['password_hash']: pass\n"
           "    if creds.value == stored_key: pass\n"
           "    if principal.token_id == other: pass\n"  # an id, not a secret
           "    if scheme == 'bearer': pass\n")
    found = secret_comparisons(bad)
    assert [f.split(":")[1] for f in found] == ["2", "3", "4"], found


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True, timeout=30).stdout.decode()
        return [ROOT / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        # Outside a git checkout (a source tarball): every file but the usual untracked ones.
        skip = {".git", ".venv", ".state", "__pycache__", ".pytest_cache", ".hypothesis"}
        return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.parts)]


def live_secrets(text: str) -> list[str]:
    """Values in `text` in the service's key/token format whose check suffix is valid."""
    out = []
    for match in SECRET_FORMAT.finditer(text):
        value = match.group(0)
        prefix = match.group(1)
        if credentials.well_formed(value, prefix):
            out.append(value[:9] + "...")
    return out


def test_no_live_key_or_token_is_committed(figures: Figures) -> None:
    found = []
    scanned = 0
    for path in _tracked_files():
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary
        scanned += 1
        found += [f"{path.relative_to(ROOT)}: {v}" for v in live_secrets(text)]
    figures.record("s17_secret_findings", len(found), section="security",
                   title="Live-format keys or tokens in tracked files", target="0",
                   source="tests/security/test_static.py")
    assert scanned > 50
    assert found == [], found


def test_the_scanner_finds_a_planted_key(tmp_path: Path) -> None:
    planted = credentials.new_api_key().value
    token = credentials.new_token().value
    fake = "sdsk_" + "A" * 43 + "00000000"  # the fixture style: wrong check suffix
    (tmp_path / "leak.env").write_text(f"KEY={planted}\nT='{token}'\nFAKE={fake}\n")
    found = live_secrets((tmp_path / "leak.env").read_text())
    assert found == [planted[:9] + "...", token[:9] + "..."]
