"""The documentation site builds with ``mkdocs build --strict`` and without a single warning: a broken
link or anchor, a page left out of the navigation, a ``::: module`` reference that does not resolve
or a docstring griffe cannot read fails here (and so in CI), not on a reader's screen. The built
site asks no other host for anything (issue 60: the theme's Google Fonts failed offline), and the
Performance page stays a short page for users, its engineering log a page of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent

#: a tag that makes the browser load what it names (a link to a page is not a load)
LOADING_TAG = re.compile(r"<(?:link|script|img|iframe|source|embed|object|video|audio|track|image|use)\b[^>]*>", re.I)
#: an address on another host: http(s)://… or protocol-relative //…
EXTERNAL = re.compile(r"""(?:src|href|srcset|data|poster|xlink:href)\s*=\s*["']?\s*(?:https?:)?//""", re.I)
CSS_EXTERNAL = re.compile(r"""(?:url\(\s*["']?\s*(?:https?:)?//|@import\s+["']?(?:https?:)?//)""", re.I)


@pytest.fixture(scope="module")
def site(built_site):
    assert built_site.returncode == 0, built_site.log
    return built_site.path


def test_the_site_builds_strictly_without_a_warning(built_site, site):
    warnings = [line for line in built_site.log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for page in ("index.html", "getting-started.html", "performance.html", "performance-log.html",
                 "architecture.html", "python-api/core.html", "reliability.html"):
        assert page in pages, sorted(pages)
    reference = (site / "python-api" / "measure.html").read_text(encoding="utf-8")
    assert "flip_counts" in reference, "the API reference was not made from the docstrings"
    assert (site / "screenshots" / "trajectory-view.png").is_file()
    assert (site / "images" / "layers.svg").is_file()
    studies = (site / "studies.html").read_text(encoding="utf-8")
    assert "Schema (version 1)" in studies, "the study file's format was not included from assets/studies/README.md"


def external_loads(site) -> list[str]:
    """Every load of a font, script, style, image or frame from another host, as 'FILE: what'."""
    found = []
    for page in sorted(site.rglob("*.html")):
        for tag in LOADING_TAG.findall(page.read_text(encoding="utf-8")):
            if EXTERNAL.search(tag):
                found.append(f"{page.relative_to(site)}: {tag[:160]}")
    for sheet in sorted(site.rglob("*.css")):
        for match in CSS_EXTERNAL.finditer(sheet.read_text(encoding="utf-8")):
            found.append(f"{sheet.relative_to(site)}: {match.group(0)}")
    return found


def test_the_matcher_finds_a_google_font_and_passes_a_link_to_a_page(tmp_path):
    (tmp_path / "a.html").write_text('<a href="https://example.org/">a page</a>\n<script src="js/x.js"></script>\n'
                                     '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">')
    (tmp_path / "b.css").write_text('@font-face { src: url("//fonts.gstatic.com/x.woff2") } .a { b: url(x.png) }')
    assert [line.split(":")[0] for line in external_loads(tmp_path)] == ["a.html", "b.css"]


def test_the_built_site_loads_nothing_from_another_host(site):
    assert external_loads(site) == []


def test_the_performance_page_is_short_and_links_its_lab_log(site):
    page = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    # about 5,700 characters today; the old page with its log was 100,000
    assert len(page) < 12_000, f"docs/performance.md is {len(page):,} characters: move engineering detail to the lab log"
    assert "| tier | how to choose it |" in page and "**compiled tier, bf16**" in page, "the tiers table left the page"
    assert "## What to pick" in page
    html = (site / "performance.html").read_text(encoding="utf-8")
    assert 'href="performance-log.html"' in html
    log = (site / "performance-log.html").read_text(encoding="utf-8")
    for section in ("How it is measured", "Levers taken", "What FP8 does to the science", "The bench runs, one by one"):
        assert section in log, section
    assert 'href="performance-log.html"' in (site / "index.html").read_text(encoding="utf-8"), "not in the navigation"
