"""The docs site builds with `mkdocs build --strict`: every page is in the nav, every link and anchor
resolves, and the settings hook renders (mkdocs-material is in the dev extra, so this never skips)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_strictly(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}{r.stderr}"
    settings = (site / "settings" / "index.html").read_text()
    assert "<code>kv_cache_memory</code>" in settings and "<!-- settings:" not in settings
    assert (site / "architecture" / "index.html").is_file()
