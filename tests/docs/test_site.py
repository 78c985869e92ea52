"""The documentation site builds with ``mkdocs build --strict`` and without a single warning: a broken
link or anchor, a page left out of the navigation, a ``::: module`` reference that does not resolve
or a docstring griffe cannot read fails here (and so in CI), not on a reader's screen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def build(site: Path, config: Path = REPO / "mkdocs.yml") -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_the_site_builds_strictly_without_a_warning(tmp_path):
    done = build(tmp_path / "site")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    for page in ("index.html", "getting-started/index.html", "performance/index.html", "architecture/index.html",
                 "python-api/core/index.html", "reliability/index.html"):
        assert page in pages, sorted(pages)
    reference = (tmp_path / "site" / "python-api" / "measure" / "index.html").read_text(encoding="utf-8")
    assert "flip_counts" in reference, "the API reference was not made from the docstrings"
    assert (tmp_path / "site" / "screenshots" / "trajectory-view.png").is_file()
    assert (tmp_path / "site" / "images" / "layers.svg").is_file()
    studies = (tmp_path / "site" / "studies" / "index.html").read_text(encoding="utf-8")
    assert "Schema (version 1)" in studies, "the study file's format was not included from assets/studies/README.md"
