"""Find the Debian mirror this machine's apt already uses and render a deb-src entry for it.

setup.sh builds TimescaleDB and mosquitto from the next Debian release's source packages. The
entry it adds must reuse the machine's own mirror (and key), so the repository never names a
host. Pure stdlib, so Debian's /usr/bin/python3 runs it before any venv exists.

Usage: python3 deploy/lib/apt_mirror.py --suite trixie [--root /] [--codename bookworm]
prints the deb822 stanza on stdout; exits 1 with a message when no Debian entry is found.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path


class MirrorNotFound(Exception):
    """No enabled `deb` entry for the release's main suite was found in the apt sources."""


@dataclass(frozen=True, slots=True)
class Mirror:
    uri: str
    # The Signed-By value as written in the source entry: a keyring path, or the raw lines of an
    # embedded key block (deb822 continuation lines, kept verbatim). None means apt's default
    # trusted keyrings.
    signed_by: str | None
    origin: str  # file the entry came from, for the summary line


def parse_deb822(text: str) -> list[dict[str, str]]:
    """Split a deb822 .sources file into stanzas of field -> value (multi-line values kept raw)."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
            continue
        if line[0] in " \t":
            if last is not None:  # continuation of the previous field
                current[last] += "\n" + line
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue
        last = name.strip().lower()
        current[last] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


_ONE_LINE = re.compile(r"^(?P<type>deb|deb-src)\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<rest>.+)$")


def parse_one_line(text: str) -> list[dict[str, str]]:
    """Parse sources.list one-line entries into the same field names as deb822 stanzas."""
    entries: list[dict[str, str]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        m = _ONE_LINE.match(line)
        if not m:
            continue
        rest = m.group("rest").split()
        if len(rest) < 2:
            continue
        entry = {
            "types": m.group("type"),
            "uris": rest[0],
            "suites": rest[1],
            "components": " ".join(rest[2:]),
        }
        for opt in (m.group("opts") or "").split():
            key, _, value = opt.partition("=")
            if key.lower() == "signed-by":
                entry["signed-by"] = value.replace(",", " ")
        entries.append(entry)
    return entries


def _source_files(root: Path) -> list[tuple[Path, list[dict[str, str]]]]:
    """All apt source entries in apt's own reading order: sources.list, then sources.list.d/*."""
    etc = root / "etc" / "apt"
    found: list[tuple[Path, list[dict[str, str]]]] = []
    main_list = etc / "sources.list"
    if main_list.is_file():
        found.append((main_list, parse_one_line(main_list.read_text(errors="replace"))))
    parts = etc / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list":
                found.append((path, parse_one_line(path.read_text(errors="replace"))))
            elif path.suffix == ".sources":
                found.append((path, parse_deb822(path.read_text(errors="replace"))))
    return found


def find_mirror(root: Path, codename: str) -> Mirror:
    """The first enabled binary entry whose suite is exactly the release codename.

    Matching the bare codename picks the main archive and skips `-security` and `-updates`
    entries, which live on other paths (or hosts) that carry no other release's sources.
    """
    for path, entries in _source_files(root):
        for entry in entries:
            if "deb" not in entry.get("types", "").split():
                continue
            if entry.get("enabled", "yes").strip().lower() == "no":
                continue
            if codename not in entry.get("suites", "").split():
                continue
            uris = entry.get("uris", "").split()
            uris = [u for u in uris if not u.startswith("cdrom:")]
            if not uris:
                continue
            return Mirror(uri=uris[0], signed_by=entry.get("signed-by"), origin=str(path))
    raise MirrorNotFound(f"no enabled 'deb' entry for suite {codename!r} under {root / 'etc/apt'}")


def render_deb_src(mirror: Mirror, suite: str, components: str = "main") -> str:
    """A deb822 stanza for source packages only: apt never takes binaries from it."""
    lines = [
        f"# Added by the sensor data service's deploy/setup.sh (copied from {mirror.origin}):",
        f"# source packages of Debian {suite}, to build TimescaleDB and mosquitto. Sources only, "
        "no binaries.",
        "Types: deb-src",
        f"URIs: {mirror.uri}",
        f"Suites: {suite}",
        f"Components: {components}",
    ]
    if mirror.signed_by:
        lines.append(f"Signed-By: {mirror.signed_by}")
    return "\n".join(lines) + "\n"


def _codename(root: Path) -> str:
    text = (root / "etc" / "os-release").read_text()
    m = re.search(r"^VERSION_CODENAME=\"?([^\"\n]+)\"?$", text, re.MULTILINE)
    if not m:
        raise MirrorNotFound("VERSION_CODENAME missing from /etc/os-release")
    return m.group(1)


def main(argv: list[str] | None = None) -> int:
    """Print the deb-src stanza for --suite, reusing the mirror of this machine's release."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, help="release whose sources to add, e.g. trixie")
    parser.add_argument("--root", type=Path, default=Path("/"), help="filesystem root (tests)")
    parser.add_argument("--codename", help="this machine's release (default: /etc/os-release)")
    args = parser.parse_args(argv)
    try:
        mirror = find_mirror(args.root, args.codename or _codename(args.root))
    except (MirrorNotFound, OSError) as exc:
        print(f"apt_mirror: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(render_deb_src(mirror, args.suite))
    return 0


if __name__ == "__main__":
    sys.exit(main())
