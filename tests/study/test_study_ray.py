"""Studies on a local Ray (2 CPU workers, the embedded model): the same CSVs, byte for byte, as a
one-process run; a worker killed mid-study has its batch rerun elsewhere and nothing is stored
twice; an aborted driver resumes; bad cluster options are refused, naming the option, before any
sampling."""

from __future__ import annotations

import filecmp
import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import torch

from petri.cli.main import main
from petri.core.paths import embedded_model_path
from petri.core.watch import Watch
from petri.engine.torch.model import load_tokenizer
from petri.runs.export import token_decoder
from petri.runs.store import RunStore
from petri.study.execution.executors import ModelSpec
from petri.study.execution.ray_executor import RayExecutor
from petri.study.execution.runner import run_study
from petri.study.plan import StudyPlan
from petri.study.results.report import write_study
from petri.study.schema import load_study
from study_support import study_dict

STUDY = study_dict("ray-study", "Ray study", comparison=False)
TOTAL = len(STUDY["events"]) * len(STUDY["templates"])
SAMPLES, SEED, STEPS = 2, 11, 8
# --threads 1 in both runs: the driver's torch and every worker use one intra-op thread (CPU numbers can depend on it).
ARGS = ["--model", str(embedded_model_path()), "--samples", str(SAMPLES), "--seed", str(SEED), "--steps", str(STEPS),
        "--no-adaptive-stop", "--no-images", "--quiet", "--threads", "1"]
SPEC = ModelSpec(str(embedded_model_path()), device="cpu", threads=1)


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def study_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ray-study") / "study.json"
    path.write_text(json.dumps(STUDY))
    return path


@pytest.fixture(scope="module")
def local_ray():
    """A private Ray on this machine offering 2 CPUs and no GPU; always shut down."""
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, logging_level=logging.WARNING)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def reference(study_file, tmp_path_factory) -> Path:
    """The one-process run's output folder (CSVs, run.json)."""
    root = tmp_path_factory.mktemp("one-process")
    assert main(["study", str(study_file), "--store", str(root / "store"), "--out", str(root / "out"), *ARGS]) == 0
    return root / "out"


def csv_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.csv"))


def assert_same_csvs(folder: Path, reference: Path) -> None:
    names = csv_names(reference)
    assert names == csv_names(folder) and "positions.csv" in names and "events.csv" in names
    _, mismatch, errors = filecmp.cmpfiles(reference, folder, names, shallow=False)
    assert not mismatch and not errors, f"CSVs differ from the one-process run: {mismatch + errors}"


def write_like_the_cli(result, out: Path) -> None:
    """The study's files as the CLI writes them: positions.csv's final_token decoded by the workers'
    tokenizer (the driver holds no model)."""
    decoder = token_decoder(load_tokenizer(SPEC.name), result.model_id, [b.trajectory for b in result.batches])
    write_study(result, out, images=False, token_text=decoder)


class CountingStore(RunStore):
    """A run store that records every commit (to see a batch stored twice, which the table's key would hide)."""

    def __init__(self, folder):
        super().__init__(folder)
        self.saved: list[str] = []

    def save_event(self, run_id, position, event_key, traj, group=None):
        self.saved.append(event_key)
        super().save_event(run_id, position, event_key, traj, group)


def test_cli_on_two_ray_workers_writes_the_one_process_csvs(local_ray, study_file, reference, tmp_path, capsys):
    capsys.readouterr()
    assert main(["study", str(study_file), "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out"),
                 *ARGS, "--ray", "--workers", "2"]) == 0
    stdout = capsys.readouterr().out
    assert f"{TOTAL} batches computed, 0 resumed" in stdout
    summary = next(line for line in stdout.splitlines() if line.startswith("ray (2 workers on cpu): batches"))
    per_worker = {part.split(" on ")[0].strip(): int(part.rsplit(": ", 1)[1]) for part in summary.split("batches ", 1)[1].split(", ")}
    assert set(per_worker) == {"w0", "w1"} and sum(per_worker.values()) == TOTAL and min(per_worker.values()) >= 1
    assert_same_csvs(tmp_path / "out", reference)
    ray_meta, one_meta = (json.loads((f / "run.json").read_text()) for f in (tmp_path / "out", reference))
    assert ray_meta["run_id"] == one_meta["run_id"] and ray_meta["model_fingerprint"] == one_meta["model_fingerprint"]


def test_a_worker_killed_mid_study_has_its_batch_rerun_and_nothing_stored_twice(local_ray, study_file, reference, tmp_path):
    executor = RayExecutor(SPEC, workers=2)
    store = CountingStore(tmp_path / "store")
    seen = []

    def kill_after_first(p):
        seen.append(p)
        if len(seen) == 1:  # the worker that delivered it has already been handed its next batch
            executor.kill_worker(p.worker)

    try:
        result = run_study(executor, StudyPlan(load_study(study_file), samples=SAMPLES, seed=SEED, settings=settings_of(reference)), store,
                           watch=Watch(progress=kill_after_first))
    finally:
        executor.close()
    killed = seen[0].worker
    assert [w for _, w in executor.reruns] == [killed], executor.reruns
    assert all(p.worker != killed for p in seen[1:]), "the killed worker delivered after its death"
    assert sorted(store.saved) == sorted(f"{e['id']}::{t['id']}" for e in STUDY["events"] for t in STUDY["templates"])
    assert result.computed == TOTAL and seen[-1].done == TOTAL and sum(seen[-1].by_worker.values()) == TOTAL
    assert result.run_id == json.loads((reference / "run.json").read_text())["run_id"]
    write_like_the_cli(result, tmp_path / "out")
    assert_same_csvs(tmp_path / "out", reference)


def test_an_aborted_driver_resumes_on_ray_with_the_same_numbers(local_ray, study_file, reference, tmp_path):
    executor = RayExecutor(SPEC, workers=2)
    study, settings = load_study(study_file), settings_of(reference)

    def abort_after_two(p):
        if p.done == 2:
            raise KeyboardInterrupt("driver stopped")

    try:
        with pytest.raises(KeyboardInterrupt):
            run_study(executor, StudyPlan(study, samples=SAMPLES, seed=SEED, settings=settings), RunStore(tmp_path / "store"),
                      watch=Watch(progress=abort_after_two))
        store = CountingStore(tmp_path / "store")
        result = run_study(executor, StudyPlan(study, samples=SAMPLES, seed=SEED, settings=settings), store)
    finally:
        executor.close()
    assert (result.computed, result.resumed, len(store.saved)) == (TOTAL - 2, 2, TOTAL - 2)
    write_like_the_cli(result, tmp_path / "out")
    assert_same_csvs(tmp_path / "out", reference)


def test_a_cancel_token_stops_a_study_on_ray_and_keeps_what_landed(local_ray, study_file, reference, tmp_path):
    from petri.core.cancel import Cancelled, CancelToken

    executor = RayExecutor(SPEC, workers=2)
    study, settings = load_study(study_file), settings_of(reference)
    token = CancelToken()

    def cancel_after_two(p):
        if p.done == 2:
            token.cancel("cancelled")

    store = RunStore(tmp_path / "store")
    try:
        with pytest.raises(Cancelled):
            run_study(executor, StudyPlan(study, samples=SAMPLES, seed=SEED, settings=settings), store,
                      watch=Watch(progress=cancel_after_two, cancel=token))
    finally:
        executor.close()
    (run,) = store.list_runs()
    assert run["status"] == "cancelled" and 2 <= run["events_stored"] < TOTAL


def settings_of(out: Path):
    from petri.core.trajectory import SamplerSettings

    return SamplerSettings(**json.loads((out / "run.json").read_text())["settings"])


def refused(capsys, study_file, tmp_path, *options) -> str:
    """Run the CLI with ``options``; assert it refuses (exit 2) with nothing sampled; return stderr."""
    capsys.readouterr()
    store = tmp_path / "store"
    assert main(["study", str(study_file), "--store", str(store), "--out", str(tmp_path / "out"), *ARGS, *options]) == 2
    err = capsys.readouterr().err
    runs = RunStore(store)
    assert runs.list_runs() == [] and not (tmp_path / "out").exists(), "a run started before the refusal"
    runs.close()
    return err


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_an_unreachable_cluster_is_refused_naming_the_option(study_file, tmp_path, capsys):
    address = f"127.0.0.1:{closed_port()}"
    err = refused(capsys, study_file, tmp_path, "--ray", address)
    assert f"--ray {address}: no Ray cluster answers" in err


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_a_worker_count_below_one_is_refused(study_file, tmp_path, capsys, workers):
    assert f"--workers must be >= 1, got {workers}" in refused(capsys, study_file, tmp_path, "--ray", "--workers", workers)


def test_more_workers_than_the_cluster_offers_is_refused(local_ray, study_file, tmp_path, capsys):
    err = refused(capsys, study_file, tmp_path, "--ray", "--workers", "3")
    assert "--workers 3: the Ray cluster offers 2 CPUs" in err


def test_a_gpu_device_on_a_cluster_without_gpus_is_refused(local_ray, study_file, tmp_path, capsys):
    err = refused(capsys, study_file, tmp_path, "--ray", "--workers", "1", "--device", "cuda")
    assert "--device cuda: the Ray cluster has no GPUs" in err


def test_a_model_the_workers_cannot_load_is_refused_with_its_own_error(local_ray, study_file, tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    err = refused(capsys, study_file, tmp_path, "--ray", "--workers", "1", "--model", str(missing))
    assert f"Model {str(missing)!r} was not found" in err and "Traceback" not in err


def test_workers_without_ray_is_refused(study_file, tmp_path, capsys):
    assert "--workers needs --ray" in refused(capsys, study_file, tmp_path, "--workers", "2")


def test_without_ray_installed_the_option_says_how_to_install_it(study_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    err = refused(capsys, study_file, tmp_path, "--ray", "--workers", "2")
    assert "--ray needs Ray" in err and 'pip install "concept-petri-dish[ray]"' in err


def test_petri_imports_without_ray():
    code = ("import sys, petri.cli.main, petri.study.execution.ray_executor, petri.study.execution.runner; "
            "assert 'ray' not in sys.modules, 'ray imported at import time'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
