"""A Hugging Face Space: the repository is pushable to the Hub as it is (no plain git file over
10 MiB outside an LFS attribute), and a hub model is downloaded at start only when allowed
(``--allow-download`` / ``PETRI_ALLOW_DOWNLOAD=1``), tested without a network: the hub client is
replaced by a recorder."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HUB_LIMIT = 10 * 1024 * 1024  # the Hub refuses plain git files above 10 MiB


def tracked_blob_sizes(repo: Path) -> dict[str, int]:
    """Every file in the git index with the size of its staged blob (what a push would send)."""
    staged = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=repo, capture_output=True, check=True).stdout
    entries = [line.split("\t", 1) for line in staged.decode().split("\0") if line]
    shas = [meta.split()[1] for meta, _ in entries]
    sizes = subprocess.run(["git", "cat-file", "--batch-check=%(objectsize)"], cwd=repo, input="\n".join(shas).encode(),
                           capture_output=True, check=True).stdout.decode().split()
    return {path: int(size) for (_, path), size in zip(entries, sizes)}


def lfs_covered(repo: Path, paths: list[str]) -> dict[str, bool]:
    """Whether the committed/staged ``.gitattributes`` give each path ``filter=lfs``."""
    if not paths:
        return {}
    out = subprocess.run(["git", "check-attr", "--cached", "-z", "filter", "--", *paths], cwd=repo,
                         capture_output=True, check=True).stdout.decode().split("\0")
    triples = [out[i:i + 3] for i in range(0, len(out) - 2, 3)]
    return {path: value == "lfs" for path, _, value in triples}


def refused_by_the_hub(repo: Path) -> list[str]:
    big = [p for p, size in tracked_blob_sizes(repo).items() if size > HUB_LIMIT]
    covered = lfs_covered(repo, big)
    return [p for p in big if not covered[p]]


def test_no_tracked_file_would_be_refused_by_the_hub():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert refused_by_the_hub(REPO) == []


def test_the_hub_check_catches_a_big_plain_file(tmp_path):
    """The check itself, on a scratch repository: an 11 MiB table is refused until an LFS attribute
    covers it (or it is replaced by its gzip)."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "small.txt").write_text("x")
    (tmp_path / "big.csv").write_bytes(b"a,b\n" * (HUB_LIMIT // 4 + 1024))
    (tmp_path / "weights.safetensors").write_bytes(b"\0" * (HUB_LIMIT + 1))
    (tmp_path / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    assert refused_by_the_hub(tmp_path) == ["big.csv"]
    (tmp_path / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.csv filter=lfs\n")
    subprocess.run(["git", "add", ".gitattributes"], cwd=tmp_path, check=True)
    assert refused_by_the_hub(tmp_path) == []


def test_the_shipped_study_positions_table_reads_compressed():
    import pandas as pd

    folder = REPO / "assets" / "studies" / "results" / "inventory_order-en-petri-tiny"
    assert not (folder / "positions.csv").exists()
    head = pd.read_csv(folder / "positions.csv.gz", nrows=5)
    assert {"event_id", "template_id", "sample", "position"} <= set(head.columns)
    assert "positions.csv.gz" in (folder / "report.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------------- --allow-download


class HubRecorder:
    """Stands in for ``huggingface_hub.snapshot_download``: records each call; a download (a call
    without ``local_files_only``) returns ``folder``, a cache lookup finds nothing."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, repo_id, **kwargs):
        self.calls.append((repo_id, kwargs))
        if kwargs.get("local_files_only"):
            from huggingface_hub.errors import LocalEntryNotFoundError

            raise LocalEntryNotFoundError("not in the cache")
        return str(self.folder)

    @property
    def downloads(self) -> list[str]:
        return [repo for repo, kwargs in self.calls if not kwargs.get("local_files_only")]


@pytest.fixture()
def hub(monkeypatch):
    import huggingface_hub

    from petri.core.paths import embedded_model_path

    recorder = HubRecorder(embedded_model_path())
    monkeypatch.setattr(huggingface_hub, "snapshot_download", recorder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a real network call would fail, not hang
    return recorder


def test_torch_loader_downloads_only_when_allowed(hub):
    from petri.engine.base import ModelNotFoundError
    from petri.engine.torch.model import load_model

    with pytest.raises(ModelNotFoundError) as err:
        load_model("someone/some-diffusion-model", device="cpu")
    assert hub.downloads == []
    assert "--allow-download" in str(err.value) and "PETRI_ALLOW_DOWNLOAD=1" in str(err.value)

    lm = load_model("someone/some-diffusion-model", device="cpu", allow_download=True)
    assert hub.downloads == ["someone/some-diffusion-model"]
    assert lm.model_id == "someone/some-diffusion-model" and lm.canvas_length > 0


def test_mlx_loader_downloads_only_when_allowed(hub):
    pytest.importorskip("mlx.core")
    from petri.engine.base import ModelNotFoundError
    from petri.engine.mlx.sampler import load_mlx_model

    with pytest.raises(ModelNotFoundError, match="--allow-download"):
        load_mlx_model("someone/some-diffusion-model")
    assert hub.downloads == [] and hub.calls[0][1] == {"local_files_only": True}
    lm = load_mlx_model("someone/some-diffusion-model", dtype="float32", allow_download=True)
    assert hub.downloads == ["someone/some-diffusion-model"] and lm.model_id == "someone/some-diffusion-model"


def test_allow_download_flag_and_environment(monkeypatch):
    import petri.app.model_options as options
    import petri.engine.select as select
    from petri.core.config import PetriConfig

    seen = []
    monkeypatch.setattr(select, "load_backend_model", lambda name, **kw: seen.append((name, kw)) or object())

    def parse(argv, environ=None):
        parser = argparse.ArgumentParser()
        options.add_model_arguments(parser, PetriConfig.from_env(environ or {}))
        return parser.parse_args(argv)

    options.load_from_args(parse(["--model", "a/b"]))
    options.load_from_args(parse(["--model", "a/b", "--allow-download"]))
    options.load_from_args(parse([], {"PETRI_ALLOW_DOWNLOAD": "1", "PETRI_MODEL": "c/d"}))
    assert [(name, kw["allow_download"]) for name, kw in seen] == [("a/b", False), ("a/b", True), ("c/d", True)]
