"""The documentation site built once per session (``mkdocs build --strict``), for the tests that
read it (tests/docs/test_site.py) and open it in a browser (tests/docs/test_browser_site.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class BuiltSite:
    """The built site's folder and what the build printed (``returncode``, ``log``)."""

    path: Path
    returncode: int
    log: str


def build(site: Path, config: Path = REPO / "mkdocs.yml") -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> BuiltSite:
    site = tmp_path_factory.mktemp("docs") / "site"
    done = build(site)
    return BuiltSite(site, done.returncode, done.stdout + done.stderr)
