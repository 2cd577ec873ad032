"""The version of a directory of static files: a digest of their names and contents.

Standard library only: the API (serve/web/assets.py) puts it in the dashboard's URLs, and the
edge's config renderer (deploy/lib/edge_conf.py, run with the system python3) puts the same
value in nginx's location for those URLs, so both name one content the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def digest(directory: Path) -> str:
    """12 hex digits from every file under `directory`, its relative path and its bytes.

    Hidden names are left out: they are the asset writer's temporaries (deploy/lib/
    web_assets.sh writes `.next.*` beside a module and renames it), which a setup running at
    the same time can remove between this listing and the read."""
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory)
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(rel.as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:12]
