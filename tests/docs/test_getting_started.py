"""The Getting started page runs as written: every command block marked ``<!-- getting-started: run -->``
is run, in page order, in one fresh folder (with the checkout's ``assets/`` and ``petri`` on hand, as
in a checkout), and each output line the page shows must appear, in order, in what the command
printed. Numbers are compared loosely (any number matches a number), since timings and the like
vary; words, columns, file names and the order of lines must be as shown. The page's install block
must be the README's install command, so the walk starts where the README does."""

from __future__ import annotations

import os
import re
import shlex
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
PAGE = REPO / "docs" / "getting-started.md"
MARK = re.compile(r"<!-- getting-started: (run|install) -->\n```(\w+)\n(.*?)\n```", re.S)
NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")


@dataclass
class Command:
    text: str
    expected: list[str] = field(default_factory=list)


def blocks(page: str) -> list[tuple[str, str]]:
    """(kind, body) of every marked block, in page order."""
    return [(kind, body) for kind, _lang, body in MARK.findall(page)]


def commands_of(body: str) -> list[Command]:
    """A console block's commands (``$ `` lines, continued while a line ends in ``\\``), each with
    the output lines shown under it."""
    out: list[Command] = []
    lines = body.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            text = line[2:]
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1] + " " + lines[i].strip()
            out.append(Command(text))
        elif out:
            out[-1].expected.append(line)
        else:
            raise ValueError(f"output before any command: {line!r}")
        i += 1
    return out


def line_pattern(shown: str) -> re.Pattern:
    """A shown output line as a pattern: its words as they are, any number for each number, any run
    of spaces for each run of spaces."""
    parts, last = [], 0
    for match in NUMBER.finditer(shown):
        parts.append(re.escape(shown[last:match.start()]))
        parts.append(NUMBER.pattern)
        last = match.end()
    parts.append(re.escape(shown[last:]))
    pattern = re.sub(r"(\\ )+|\\\t", r"\\s+", "".join(parts))
    return re.compile(pattern)


def missing_lines(expected: list[str], printed: str) -> list[str]:
    """The shown lines not found, in order, among the printed ones (blank lines skipped)."""
    actual = [line.strip() for line in re.split(r"[\r\n]+", printed) if line.strip()]
    missing, at = [], 0
    for shown in (line.strip() for line in expected if line.strip()):
        pattern = line_pattern(shown)
        for j in range(at, len(actual)):
            if pattern.fullmatch(actual[j]):
                at = j + 1
                break
        else:
            missing.append(shown)
    return missing


def test_the_line_matcher_is_loose_on_numbers_only():
    printed = "noise\nmodel: petri-small on cpu (8.91 s, steps [24, 19, 15])\n inventory|order   3   3.8125\n"
    assert missing_lines(["model: petri-small on cpu (3.27 s, steps [24, 19, 15])",
                          "inventory|order           3     3.812500"], printed) == []
    assert missing_lines(["model: petri-tiny on cpu (3.27 s, steps [24, 19, 15])"], printed)
    assert missing_lines([" inventory|order 3 3.8", "model: petri-small on cpu (1 s, steps [1, 1, 1])"], printed), \
        "lines must come in the order shown"


def test_the_page_has_its_blocks_and_the_readmes_install_command():
    found = blocks(PAGE.read_text(encoding="utf-8"))
    kinds = [kind for kind, _ in found]
    assert kinds[0] == "install" and kinds.count("install") == 1 and kinds.count("run") >= 6, kinds
    install = found[0][1].strip()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"```bash\n{install} && python app.py\n```" in readme, "the README's set-up command changed"
    for kind, body in found:
        if kind == "run":
            assert commands_of(body), f"a run block without a command: {body[:80]!r}"


def python_on_path(folder: Path) -> Path:
    """A folder holding ``python``: this interpreter, so the page's ``python`` is the one under test.
    A script that execs ``sys.executable``, not a symlink to it: a symlinked interpreter outside a
    virtualenv's ``bin`` finds no ``pyvenv.cfg`` and runs without the virtualenv's packages."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    return bin_dir


def page_env(folder: Path) -> dict[str, str]:
    """The environment the page's commands run in: this interpreter as ``python``, this checkout
    importable, and the page's defaults rather than the caller's ``PETRI_*`` settings."""
    env = {**os.environ, "PATH": f"{python_on_path(folder)}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO)}
    for name in ("PETRI_MODEL", "PETRI_ALLOW_DOWNLOAD", "PETRI_ASSETS"):
        env.pop(name, None)
    return env


def test_the_pages_python_is_this_interpreter_with_its_packages(tmp_path):
    """In a virtualenv too: the page's ``python`` has this interpreter's prefix and site-packages."""
    show = "import sys, site; print(sys.prefix); print(site.getsitepackages())"
    done = subprocess.run(["bash", "-c", f"python -c {shlex.quote(show)}"], env=page_env(tmp_path),
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split("\n")[:2] == [sys.prefix, str(site.getsitepackages())], done.stdout


def test_every_command_of_the_page_prints_what_the_page_shows(tmp_path):
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "assets").symlink_to(REPO / "assets")
    env = page_env(tmp_path)
    ran = 0
    for kind, body in blocks(PAGE.read_text(encoding="utf-8")):
        if kind != "run":
            continue
        for command in commands_of(body):
            done = subprocess.run(["bash", "-c", command.text], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=1800)
            printed = done.stdout + "\n" + done.stderr
            assert done.returncode == 0, f"{command.text}\nexited {done.returncode}:\n{printed[-3000:]}"
            missing = missing_lines(command.expected, printed)
            assert not missing, f"{command.text}\ndid not print:\n" + "\n".join(missing) + f"\n\nit printed:\n{printed[-3000:]}"
            ran += 1
    assert ran >= 8
