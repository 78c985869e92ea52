"""The second embedded model, assets/petri-tiny-mdm (masked diffusion on petri-tiny's corpus and
tokenizer): it loads by name on the CPU, it predicts masked tokens from their context (a model that
learnt only the token frequencies, as the first training runs did, would not), it runs a dish (the
sampler, the Dish tab's handler, ``app.py --model petri-tiny-mdm`` over HTTP), ``auto`` never sends it
to the MLX backend, its model card's figures are its metrics.json's, and its family's own settings
(block length, unmask threshold, temperature) are set from the API, the CLI and the UI and reach the
sampler."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from petri.core.dish import Dish
from petri.core.paths import EMBEDDED_MODELS, embedded_model_named
from petri.core.trajectory import MaskedSettings
from petri.engine.families.masked import MaskedLoadedModel
from petri.engine.seeding import seed_dish
from petri.engine.torch.model import load_model, load_tokenizer

FOLDER = embedded_model_named("petri-tiny-mdm")
# Written for this test in the corpus's style (WordNet glosses as sentences); not from the corpus.
TEXT = ("An order is a commercial document used to request someone to supply something in return for "
        "payment. The customer placed an order for three books. A person is a human being. Inventory is "
        "the stock of goods that a store has on hand. To count is to determine the number of something.")


@pytest.fixture(scope="module")
def mdm():
    return load_model("petri-tiny-mdm", device="cpu")


def test_registered_and_loaded_by_name(mdm):
    assert EMBEDDED_MODELS == ("petri-small", "petri-small-mdm", "petri-tiny", "petri-tiny-mdm")
    assert isinstance(mdm, MaskedLoadedModel) and mdm.model_id == "petri-tiny-mdm"
    assert mdm.canvas_length == 64
    uniform = load_tokenizer("petri-tiny")
    # petri-tiny's tokenizer with <mask> added after its 4,096 tokens: every text encodes the same
    assert mdm.tokenizer.encode(TEXT, add_special_tokens=False) == uniform.encode(TEXT, add_special_tokens=False)
    assert mdm.mask_token_id == len(uniform) == 4096 and mdm.tokenizer.mask_token == "<mask>"
    assert load_tokenizer("petri-tiny-mdm").mask_token_id == 4096  # the replay/export path finds it by name too
    assert sum(p.stat().st_size for p in FOLDER.iterdir()) < 40 * 2**20


def masked_ce(mdm, ids: torch.Tensor, hidden: torch.Tensor, scored: torch.Tensor) -> float:
    """Mean cross-entropy (nats) at the ``scored`` positions of one sequence ``ids`` (L,) read with the
    ``hidden`` positions replaced by the mask token (both (L,) bool)."""
    noisy = torch.where(hidden, torch.full_like(ids, mdm.mask_token_id), ids)
    with torch.no_grad():
        logits = mdm.model(input_ids=noisy[None]).logits[0].float()
    return float(F.cross_entropy(logits[scored], ids[scored]))


def test_it_predicts_masked_tokens_from_their_context(mdm):
    ids = torch.tensor(mdm.tokenizer.encode(TEXT, add_special_tokens=False))
    masked = torch.from_numpy(np.random.default_rng(0).random(len(ids)) < 0.25)
    with_context = masked_ce(mdm, ids, masked, masked)
    # the same positions with every token masked: nothing to go on but the position (token frequencies)
    without = masked_ce(mdm, ids, torch.ones_like(masked), masked)
    assert with_context < without - 1.5, (with_context, without)


def test_it_runs_a_dish_on_the_cpu(mdm):
    dish = Dish(("order", "inventory", "person"), "Only 90 units are in stock, but the customer ordered 120.")
    traj = seed_dish(mdm, dish, 2, MaskedSettings(max_denoising_steps=16), seed=0)
    assert traj.model_id == "petri-tiny-mdm" and traj.sampler == "masked"
    assert (traj.final_ids != mdm.mask_token_id).all()  # every position unmasked within the 16 steps
    free = ~traj.anchor_mask
    assert (traj.accepted.sum(axis=1)[free] == 1).all()
    for s, spans in enumerate(traj.anchors):  # the pinned concepts stand where they were pinned
        assert {span.concept for span in spans} == {"order", "inventory", "person"}
        for span in spans:
            assert tuple(traj.final_ids[s, span.start: span.end]) == span.token_ids
    words = re.findall(r"[A-Za-z]+", " ".join(traj.final_texts))
    common = {"the", "a", "an", "of", "to", "is", "in", "or", "and", "that", "for", "as", "by", "with", "who"}
    assert sum(w.lower() in common for w in words) / len(words) > 0.12, traj.final_texts


def card_row(card: str, label: str) -> list[float]:
    row = next(line for line in card.splitlines() if line.startswith(f"| {label} |"))
    return [float(cell.replace(",", "")) for cell in row.strip("|").split("|")[1:]]


def test_model_card_figures_are_its_metrics():
    metrics = json.loads((FOLDER / "metrics.json").read_text())
    card = (FOLDER / "README.md").read_text()
    ce = metrics["heldout_masked_ce"]
    levels = ["0.25", "0.5", "0.75", "1.0"]
    assert card_row(card, "noise t") == [float(t) for t in levels]
    assert card_row(card, "masked cross-entropy") == [round(ce[t], 2) for t in levels]
    unigram = metrics["heldout_unigram_cross_entropy_nats"]
    assert card_row(card, "unigram cross-entropy") == [round(unigram, 2)] * 4
    assert f"{metrics['parameters']:,}" in card and f"{metrics['steps']:,} steps" in card
    assert ce["0.25"] < unigram - 1.0, "the shipped model must beat the unigram clearly at t = 0.25"


def test_app_serves_a_dish_on_it(tmp_path, live_server):
    """``python app.py --model petri-tiny-mdm``: the server's own start-up path, then a dish over HTTP."""
    import httpx

    from petri.web.app import create_app
    from petri.web.server import build_parser, build_service

    args = build_parser("app.py").parse_args(["--model", "petri-tiny-mdm", "--device", "cpu", "--store", str(tmp_path)])
    service, source = build_service(args)
    assert isinstance(service.lm, MaskedLoadedModel) and source == "petri-tiny-mdm"
    body = {"concepts": ["order", "inventory", "person"], "event": "Only 90 units are in stock, but 120 were ordered.",
            "samples": 2, "settings": {"max_denoising_steps": 8}, "seed": 1}
    with live_server(create_app(service, model_source=source)) as live, httpx.Client(base_url=live.url, timeout=120) as c:
        assert c.get("/").status_code == 200  # the UI
        r = c.post("/api/seed", json=body)
    service.store.close()
    assert r.status_code == 200, r.text
    run = r.json()
    assert run["model"]["model_id"] == "petri-tiny-mdm" and run["model"]["vocab_size"] == 4097
    assert run["events"][0]["n_samples"] == 2 and run["settings"]["max_denoising_steps"] == 8


def test_where_auto_would_pick_mlx_it_runs_on_torch(monkeypatch):
    """On Apple silicon without a torch GPU, ``auto`` picks MLX, whose backend runs DiffusionGemma only."""
    from petri.core.config import PetriConfig
    from petri.engine import select
    from petri.engine.base import BackendUnavailableError

    monkeypatch.setattr(select, "is_apple_silicon", lambda: True)
    monkeypatch.setattr(select, "torch_gpu_available", lambda: False)
    monkeypatch.setattr(select, "mlx_available", lambda: True)
    assert select.select_backend("auto") == "mlx"
    assert isinstance(select.load_backend_model("petri-tiny-mdm", backend="auto", device="cpu"), MaskedLoadedModel)
    with pytest.raises(BackendUnavailableError, match="backend='mlx'.*masked-diffusion"):
        select.load_backend_model("petri-tiny-mdm", backend="mlx", device="cpu")
    with pytest.raises(BackendUnavailableError, match="masked-diffusion"):  # PETRI_BACKEND=MLX: --backend's default
        select.load_backend_model("petri-tiny-mdm", backend=PetriConfig.from_env({"PETRI_BACKEND": "MLX"}).backend,
                                  device="cpu")


def test_the_ui_dish_tab_runs_it(mdm, tmp_path):
    """The Dish tab's handler (what the browser calls) on the embedded masked model."""
    from petri.app.service import PetriService
    from petri.runs.store import RunStore
    from petri.web.ui.dish_tab.dish import DishController
    from tests.web.ui.test_ui import dish_inputs

    service = PetriService(mdm, RunStore(tmp_path / "store"))
    ctl = DishController(service)
    updates = list(ctl.run(*dish_inputs(ctl, steps=8)))
    service.store.close()
    final = updates[-1]
    assert len(updates) > 1 and final["status"].startswith("Done:") and "steps [8, 8, 8]" in final["status"]
    assert len(final["samples_table"]) == 3 and final["run_id"]


#: A dish on the embedded masked model and its block: the canvas's first 16 positions (of 64)
EVENT = "Only 90 units are in stock, but 120 were ordered."
BLOCK = 16


def first_step_in_first_block(traj) -> bool:
    """Whether every sample's first step unmasked only positions of the first block."""
    return not traj.accepted[:, 0, BLOCK:].any() and traj.accepted[:, 0, :BLOCK].any()


def test_its_settings_are_set_from_the_api_and_reach_the_sampler(mdm, tmp_path):
    """block_length, unmask_threshold and temperature (until issue 48 only a checkpoint's
    ``petri_sampler`` set them) in ``POST /api/seed``: stored with the run, and a block length changes
    the order the canvas is unmasked in; a block length the steps cannot cover, or another family's
    setting, is refused naming the field."""
    from fastapi.testclient import TestClient

    from petri.app.service import PetriService
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    service = PetriService(mdm, RunStore(tmp_path / "store"))
    client = TestClient(create_app(service, ui=False))
    body = {"concepts": ["order", "inventory", "person"], "event": EVENT, "samples": 2, "seed": 1}
    runs = {}
    for name, settings in (("whole", {"max_denoising_steps": 8}), ("blocks", {"max_denoising_steps": 8, "block_length": BLOCK}),
                           ("threshold", {"max_denoising_steps": 8, "unmask_threshold": 0.5, "temperature": 0.3})):
        answer = client.post("/api/seed", json={**body, "settings": settings})
        assert answer.status_code == 200, answer.text
        runs[name] = service.store.load_events(answer.json()["run_id"])[0][2]
    assert runs["blocks"].settings == MaskedSettings(max_denoising_steps=8, block_length=BLOCK, temperature=0.5)
    assert runs["threshold"].settings == MaskedSettings(max_denoising_steps=8, unmask_threshold=0.5, temperature=0.3)
    assert first_step_in_first_block(runs["blocks"]) and not first_step_in_first_block(runs["whole"])
    assert (runs["threshold"].accepted[:, 0].sum(-1) != runs["whole"].accepted[:, 0].sum(-1)).any()  # no budget
    for settings, field, words in (({"block_length": 2, "max_denoising_steps": 4}, "block_length", "number of blocks"),
                                   ({"unmask_threshold": 1.5}, "unmask_threshold", "less than or equal to 1"),
                                   ({"t_min": 0.3}, "t_min", "not a setting of the model's family, masked-diffusion")):
        answer = client.post("/api/seed", json={**body, "settings": settings})
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "settings", field], answer.text
        assert words in answer.json()["detail"][0]["msg"]
    service.store.close()


def test_its_settings_are_set_from_the_cli_and_reach_the_sampler(mdm, tmp_path):
    from petri.cli.main import build_parser, main
    from petri.cli.options import settings_from_args

    flags = ["--steps", "8", "--block-length", str(BLOCK), "--unmask-threshold", "0.5", "--temperature", "0.3"]
    args = build_parser().parse_args(["seed", "--event", EVENT, "--concepts", "order,inventory,person", *flags])
    settings = settings_from_args(mdm.default_settings(), args, mdm.canvas_length)
    assert settings == MaskedSettings(max_denoising_steps=8, block_length=BLOCK, unmask_threshold=0.5, temperature=0.3)
    traj = seed_dish(mdm, Dish(("order", "inventory", "person"), EVENT), 2, settings, seed=0)
    assert traj.settings == settings and first_step_in_first_block(traj)
    with pytest.raises(ValueError, match="--block-length: max_denoising_steps"):
        settings_from_args(mdm.default_settings(), build_parser().parse_args(
            ["seed", "--event", "x", "--concepts", "a,b", "--block-length", "1"]), mdm.canvas_length)
    out = tmp_path / "out"
    assert main(["seed", "--model", "petri-tiny-mdm", "--device", "cpu", "--event", EVENT, "--concepts",
                 "order,inventory,person", "--samples", "2", "--out", str(out), *flags]) == 0
    stored = json.loads((out / "run.json").read_text())["settings"]
    assert (stored["block_length"], stored["unmask_threshold"], stored["temperature"]) == (BLOCK, 0.5, 0.3)


def test_its_settings_are_set_from_the_ui_and_reach_the_sampler(mdm, tmp_path):
    """The Dish and Compare tabs show the masked family's controls (not DiffusionGemma's), and the
    Dish tab's block length reaches the sampler."""
    from petri.app.service import PetriService
    from petri.runs.store import RunStore
    from petri.web.ui.build import build_ui
    from petri.web.ui.dish_tab.dish import DishController
    from tests.web.ui.test_ui import dish_inputs

    service = PetriService(mdm, RunStore(tmp_path / "store"))
    ids = {c["props"].get("elem_id") for c in build_ui(service).get_config_file()["components"]}
    shown = {f"{tab}-{name}" for tab in ("petri", "petri-cmp")
             for name in ("steps", "pin-thought", "block-length", "unmask-threshold", "temperature")}
    assert shown <= ids and not {"petri-t-min", "petri-entropy-bound", "petri-adaptive"} & ids
    ctl = DishController(service)
    assert ctl.setting_names == ("steps", "pin_thought", "block_length", "unmask_threshold", "temperature")
    *_, final = ctl.run(*dish_inputs(ctl, steps=8, block_length=BLOCK, temperature=0.0))
    traj = service.store.load_events(final["run_id"])[0][2]
    assert traj.settings == MaskedSettings(max_denoising_steps=8, pin_thought_channel=True, block_length=BLOCK)
    assert first_step_in_first_block(traj)
    assert ctl.controls_of(service.store.get_run(final["run_id"])["request"], traj)["block_length"] == BLOCK
    marks = ctl.validate(*dish_inputs(ctl, steps=2, block_length=4))
    assert [i for i, m in enumerate(marks) if not m["is_valid"]] == [9] and "number of blocks" in marks[9]["message"]
    service.store.close()
