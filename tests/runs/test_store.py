"""The run store keeps whole trajectories, resumes, and refuses bad run ids and unwritable folders."""

from __future__ import annotations

import os

import numpy as np
import pytest

from petri.core.dish import Dish
from petri.core.trajectory import SamplerSettings
from petri.engine.seeding import seed_dish
from petri.runs.store import RunStore, StoreError, check_run_id


@pytest.fixture(scope="module")
def traj(tiny_lm):
    return seed_dish(tiny_lm, Dish(("order", "person"), "A person orders."), 3, SamplerSettings(max_denoising_steps=4), seed=2)


def test_trajectory_roundtrip_and_resume(tmp_path, traj):
    store = RunStore(tmp_path)
    assert store.create_run("abcd1234", "study", traj.model_id, {"n": 1})
    store.save_event("abcd1234", 0, "e1", traj, group="benign")
    store.close()

    reopened = RunStore(tmp_path)  # a new process after a crash sees what was committed
    assert not reopened.create_run("abcd1234", "study", traj.model_id, {"n": 1})
    assert reopened.completed_events("abcd1234") == {"e1"}
    [(key, group, back)] = reopened.load_events("abcd1234")
    assert (key, group) == ("e1", "benign")
    for name in ("argmax", "entropy", "accepted", "steps", "anchor_mask", "final_ids", "prompt_ids", "canvas"):
        np.testing.assert_array_equal(getattr(back, name), getattr(traj, name))
    assert traj.canvas is not None and (back.family, back.mask_id) == (traj.family, traj.mask_id) == ("uniform-diffusion", None)
    assert back.anchors == traj.anchors and back.settings == traj.settings and back.final_texts == traj.final_texts
    assert back.sampler == traj.sampler == "eager"  # which code path drew the tokens travels with them
    assert reopened.get_run("abcd1234")["events_stored"] == 1
    reopened.finish_run("abcd1234")
    assert reopened.get_run("abcd1234")["status"] == "done"


@pytest.mark.parametrize("bad", ["../etc", "ABCDEF12", "abc", "abcd1234/..", "", "a" * 65])
def test_path_like_run_ids_are_refused(bad):
    with pytest.raises(ValueError, match="run_id"):
        check_run_id(bad)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere; see the read-only file test")
def test_unwritable_folder_is_reported(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    with pytest.raises(StoreError, match="cannot open or write"):
        RunStore(folder / "runs")


def test_store_path_that_is_a_file_is_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot open or write"):
        RunStore(blocker)


def test_runs_created_in_the_same_second_list_newest_first(tmp_path):
    """created_at has one-second resolution: runs made within one second list in the reverse order of
    their creation (the insertion order breaks the tie), for everyone and per owner."""
    store = RunStore(tmp_path)
    run_ids = [f"{i:02d}" * 4 for i in range(5)]  # valid ids: eight hex characters
    for run_id in run_ids:
        store.create_run(run_id, "seed", "tiny", {})
        store.add_run_owner(run_id, "owner-hash")
    stamps = {run["created_at"] for run in store.list_runs()}
    assert len(stamps) <= 2  # all within one or two seconds: ties exist
    assert [run["run_id"] for run in store.list_runs()] == run_ids[::-1]
    assert [run["run_id"] for run in store.list_owned_runs("owner-hash")] == run_ids[::-1]
    assert [run["run_id"] for run in store.list_runs(limit=2)] == run_ids[::-1][:2]


def test_the_sampler_is_stored_and_old_runs_read_as_unknown(traj):
    import json
    from dataclasses import replace

    from petri.runs.store import trajectory_from_blobs, trajectory_to_blobs

    header, arrays = trajectory_to_blobs(replace(traj, sampler="fast+compiled+sc-softmax+inverse-cdf"))
    assert trajectory_from_blobs(header, arrays).sampler == "fast+compiled+sc-softmax+inverse-cdf"
    old_header = {k: v for k, v in json.loads(header).items() if k != "sampler"}  # a run stored before
    assert trajectory_from_blobs(json.dumps(old_header), arrays).sampler == "unknown"


def test_runs_stored_before_the_canvas_load_without_it_and_know_their_family(traj):
    """A blob written before the canvas and the family were recorded: no ``canvas`` array, no
    ``family`` / ``mask_id`` in the header. It loads with ``canvas`` None and the family its settings
    type names."""
    import io
    import json
    from dataclasses import replace

    from petri.core.trajectory import MaskedSettings
    from petri.runs.store import trajectory_from_blobs, trajectory_to_blobs

    for settings, family in ((traj.settings, "uniform-diffusion"), (MaskedSettings(max_denoising_steps=4), "masked-diffusion")):
        header, arrays = trajectory_to_blobs(replace(traj, settings=settings))
        old_header = {k: v for k, v in json.loads(header).items() if k not in ("family", "mask_id")}
        with np.load(io.BytesIO(arrays)) as data:
            old = {name: data[name] for name in data.files if name != "canvas"}
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **old)
        back = trajectory_from_blobs(json.dumps(old_header), buffer.getvalue())
        assert back.canvas is None and back.family == family and back.mask_id is None
        np.testing.assert_array_equal(back.argmax, traj.argmax)


@pytest.mark.parametrize("family", ["masked-diffusion", None])
def test_a_masked_run_stored_before_the_families_had_their_own_settings_loads_and_stores_the_same(traj, family):
    """A header as main wrote it before issue 48 (and, ``family`` None, before the family was
    recorded): masked settings that carry the uniform fields, with values a request had set. It loads
    as :class:`MaskedSettings` and writes back the same settings, byte for byte."""
    import json

    from petri.core.trajectory import MaskedSettings
    from petri.runs.store import trajectory_from_blobs, trajectory_to_blobs

    stored = ('{"max_denoising_steps": 8, "t_min": 0.3, "t_max": 0.9, "entropy_bound": 2.0, "stability_threshold": null, '
              '"confidence_threshold": null, "pin_thought_channel": true, "block_length": 16, "unmask_threshold": 0.25, '
              '"temperature": 0.0}')
    header, arrays = trajectory_to_blobs(traj)
    old = {**json.loads(header), "settings": json.loads(stored), "family": family, "mask_id": 5}
    if family is None:
        del old["family"], old["mask_id"]
    back = trajectory_from_blobs(json.dumps(old), arrays)
    assert isinstance(back.settings, MaskedSettings) and back.family == "masked-diffusion"
    assert (back.settings.max_denoising_steps, back.settings.block_length, back.settings.unmask_threshold) == (8, 16, 0.25)
    again, _ = trajectory_to_blobs(back)
    assert json.dumps(json.loads(again)["settings"]) == stored
