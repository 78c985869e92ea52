"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

The screenshots live once, in the repository's ``assets/screenshots/`` (the README shows them from
there); the site takes them from that folder as ``screenshots/NAME.png``, so no image is copied into
``docs/``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def on_files(files, config):
    for image in sorted((ASSETS / "screenshots").glob("*.png")):
        files.append(File(f"screenshots/{image.name}", src_dir=str(ASSETS), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files
