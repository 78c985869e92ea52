"""The training recipe of the embedded model (experiments/train_tiny.py) must not rot.

Runs its ``--smoke`` mode on a small corpus written here (no dependence on data/), then loads the
checkpoint it wrote the way the app does. Also checks that the training forward pass is exactly the
decoder call that ``generate`` makes, so what the model is trained on is what it is sampled with.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from experiment_support import experiment_script

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "assets" / "petri-tiny"

pytestmark = pytest.mark.skipif(
    not (TOKENIZER / "tokenizer.json").exists(), reason="assets/petri-tiny/tokenizer.json missing"
)


def _write_corpus(folder: Path, n_train: int = 600, n_heldout: int = 60) -> Path:
    rng = random.Random(0)
    people = ["the clerk", "a customer", "the manager", "a person", "the supplier", "our buyer"]
    verbs = ["ordered", "counted", "shipped", "returned", "checked", "recorded"]
    things = ["ten units", "the inventory", "an order", "the stock", "two boxes", "a new shipment"]
    tails = ["on monday.", "before noon.", "for the store.", "from the warehouse.", "again.", "by mistake."]

    def line():
        n = rng.randint(1, 3)
        return " ".join(
            f"{rng.choice(people).capitalize()} {rng.choice(verbs)} {rng.choice(things)} {rng.choice(tails)}"
            for _ in range(n)
        )

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.txt").write_text("\n".join(line() for _ in range(n_train)) + "\n")
    (folder / "heldout.txt").write_text("\n".join(line() for _ in range(n_heldout)) + "\n")
    return folder


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    train_tiny = experiment_script("train_tiny")
    tmp = tmp_path_factory.mktemp("recipe")
    data = _write_corpus(tmp / "data")
    out = tmp / "ckpt"
    metrics = train_tiny.main(["--smoke", "--data", str(data), "--tokenizer", str(TOKENIZER),
                               "--out", str(out), "--seed", "0"])
    return out, metrics


def test_smoke_checkpoint_loads(smoke_run):
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    out, _ = smoke_run
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "metrics.json"):
        assert (out / name).exists(), name
    tok = AutoTokenizer.from_pretrained(str(out))
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(str(out))
    assert model.config.text_config.vocab_size == len(tok)
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)
    assert tok.decode(tok.encode(" order")) == " order"
    gen = model.generation_config
    assert gen.sampler_config.entropy_bound == 4.0
    assert gen.max_denoising_steps == 32
    assert gen.max_new_tokens == model.config.canvas_length
    # it generates
    prompt = torch.tensor([tok.encode("A customer ordered ten units")])
    torch.manual_seed(0)
    seq = model.generate(input_ids=prompt, max_denoising_steps=2).sequences
    assert seq.shape == (1, prompt.shape[1] + model.config.canvas_length)


def test_smoke_metrics(smoke_run):
    out, metrics = smoke_run
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["heldout_canvas_ce"] == metrics["heldout_canvas_ce"]
    assert set(on_disk["heldout_canvas_ce"]) == {"0.25", "0.5", "0.75", "1.0"}
    assert all(v > 0 for v in on_disk["heldout_canvas_ce"].values())
    assert on_disk["unigram_entropy_nats"] > 0
    assert on_disk["steps"] >= 10
    assert on_disk["train_loss_final"] < on_disk["train_loss_initial"]


def test_training_forward_is_generate_decoder_call():
    """canvas_logits (the training forward) == the first decoder call inside generate, with and without SC."""
    train_tiny = experiment_script("train_tiny")
    args = train_tiny.parse_args(["--smoke", "--out", "unused", "--layers", "2"])
    special = {"pad": 0, "eos": 1, "bos": 2, "unk": 3}
    torch.manual_seed(0)
    model = train_tiny.build_model(args, 512, special).eval()
    prefix = torch.randint(4, 512, (2, 11))
    canvas = torch.randint(0, 512, (2, args.canvas))
    sc = torch.randn(2, args.canvas, 512)
    captured = []
    hook = model.lm_head.register_forward_hook(lambda mod, inp, out: captured.append(out.detach().clone()))
    try:
        with torch.no_grad():
            train_tiny.canvas_logits(model, prefix, canvas)
            model.generate(input_ids=prefix, decoder_input_ids=canvas.clone(), max_denoising_steps=1,
                           max_new_tokens=args.canvas, eos_token_id=None)
            train_tiny.canvas_logits(model, prefix, canvas, sc)
            model.generate(input_ids=prefix, decoder_input_ids=canvas.clone(), self_conditioning_logits=sc,
                           max_denoising_steps=1, max_new_tokens=args.canvas, eos_token_id=None)
    finally:
        hook.remove()
    assert len(captured) == 4
    torch.testing.assert_close(captured[0], captured[1], rtol=0, atol=0)
    torch.testing.assert_close(captured[2], captured[3], rtol=0, atol=0)
    assert not torch.equal(captured[0], captured[2])  # self-conditioning does reach the decoder
