"""The markers every test gets from where it lies (tests/conftest.py applies them): tests/ mirrors
petri/, so a folder or file names what a test needs. Here, not in conftest.py, so a test can import
them by name (a folder's own conftest.py would shadow the top one's module name)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: marker → the paths under tests/ (a folder ends in "/"; else a file name's start) whose tests carry it
MARKED_PATHS = {
    "browser": ("web/ui/test_browser", "docs/test_browser"),
    "process": ("reliability/", "cli/test_install.py", "app/test_shutdown.py", "study/test_study_kill.py",
                "study/test_study_ray.py", "docs/test_site.py", "docs/test_getting_started.py",
                "docs/test_browser_site.py", "web/test_zerogpu_spaces.py"),
    "fuzz": ("reliability/test_reliability_hostile.py",),
    "gpu": ("engine/cuda/",),
}


def markers_for(relative: str) -> list[str]:
    """The markers of a test file at ``relative`` (a POSIX path under tests/)."""
    return [mark for mark, prefixes in MARKED_PATHS.items() if relative.startswith(prefixes)]
