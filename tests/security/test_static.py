"""Static checks on the source (reliability plan S11, S17).

- S11: secrets are compared in constant time. Every `==`/`!=` in serve/ and people/ is
  parsed (AST, not grep) and refused when an operand names a digest,
  hash, token, key, secret or password value; `hmac.compare_digest` must be what compares them.
  (tests/access/test_secrets_at_rest.py greps serve/auth.py and people/credentials.py; this one
  covers every module that handles credentials, and proves it can fail.)
- S17: no live-looking secret is committed. detect-secrets scans every tracked file with its
  vendor detectors plus tests/security/secret_plugin.py, which knows the service's own key and
  token format (prefix, 43 URL-safe characters, CRC32 suffix) and reports only values whose
  check suffix is valid; test fixtures must use values with a wrong check. Planted secrets in a
  temporary file are found, which tests the scanner configuration itself.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from people import credentials
from tests.support.figures import Figures

ROOT = Path(__file__).resolve().parents[2]
SECRET_NAME = re.compile(
    r"(digest|hash|token|secret|password|passwd|apikey|api_key|^key$|_key$|^wanted$|^fp$)",
    re.IGNORECASE)
# Names that contain a secret-ish word but hold no secret (identifiers, kinds, counts).
NOT_SECRET = re.compile(r"(_id|_ids|_kind|_type|_name|_ttl|_count|_prefix|_scheme|_len)$|"
                        r"^(token_id|key_id|TOKEN_PREFIX|API_KEY_PREFIX)$", re.IGNORECASE)
SOURCES = [*sorted((ROOT / "serve").rglob("*.py")), *sorted((ROOT / "people").rglob("*.py"))]


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


# Generic detectors left out: the keyword and entropy heuristics report the deliberate test
# passwords and labels (27 findings when last tried, none a secret), and public IP addresses
# are not secrets. Everything else detect-secrets knows (AWS, GitHub, private keys, JWT, ...)
# runs, plus the plugin for this service's own keys and tokens.
GENERIC_DETECTORS = {"Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector",
                     "IPPublicDetector"}
PLUGIN = Path(__file__).with_name("secret_plugin.py")


def detect_secrets_scan(root: Path, names: list[str]) -> list[tuple[str, str, int]]:
    """(file, secret type, line) for every finding of detect-secrets over `names` (relative
    to `root`) with this project's plugin set."""
    from detect_secrets import SecretsCollection
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.settings import transient_settings

    builtin = sorted(c.__name__ for c in get_mapping_from_secret_type_to_class().values()
                     if c.__module__.startswith("detect_secrets."))
    plugins: list[dict[str, str]] = [{"name": n} for n in builtin if n not in GENERIC_DETECTORS]
    plugins.append({"name": "SdsCredentialDetector", "path": f"file://{PLUGIN}"})
    with transient_settings({"plugins_used": plugins}):
        get_mapping_from_secret_type_to_class.cache_clear()  # pick up the custom plugin
        try:
            found = SecretsCollection(root=str(root))
            for name in names:
                found.scan_file(name)
        finally:
            get_mapping_from_secret_type_to_class.cache_clear()
    return sorted((name, secret.type, secret.line_number or 0) for name, secret in found)


@pytest.mark.usefixtures("processes")
def test_detect_secrets_finds_nothing_in_tracked_files(figures: Figures) -> None:
    names = [str(p.relative_to(ROOT)) for p in _tracked_files()
             if p.is_file() and p.stat().st_size <= 2_000_000]
    found = detect_secrets_scan(ROOT, names)
    figures.record("s17_secret_findings", len(found), section="security",
                   title="detect-secrets findings in tracked files (vendor detectors and the "
                         "plugin for this service's live-format keys and tokens)",
                   target="0", source="tests/security/test_static.py")
    assert len(names) > 50
    assert found == [], found


def test_the_scanner_finds_planted_secrets(tmp_path: Path) -> None:
    """The scanner configuration itself: live keys and tokens (and a vendor secret) are found,
    a look-alike with a wrong check suffix (the fixture style) is not."""
    planted = credentials.new_api_key().value
    token = credentials.new_token().value
    fake = "sdsk_" + "A" * 43 + "00000000"  # wrong check suffix
    aws = "AKIA" + "Q" * 16  # the AWS access key id format
    (tmp_path / "leak.env").write_text(f"KEY={planted}\nFAKE={fake}\nT='{token}'\n"
                                       f"AWS={aws}\n")
    found = detect_secrets_scan(tmp_path, ["leak.env"])
    assert sorted((line, kind) for _, kind, line in found) == [
        (1, "SDS API key or bearer token"), (3, "SDS API key or bearer token"),
        (4, "AWS Access Key")], found
