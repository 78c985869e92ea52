"""The chat-template path end to end, on a tiny tokenizer that has a Gemma-style chat template and
the thought-channel tokens: the prompt is the template's user turn with the generation prompt, and
the empty thought block ``<|channel>thought\\n<channel|>`` is pinned at the canvas start (seen by
the decoder at every step, masked as pinned, but no anchor and so in no segment) unless
``pin_thought_channel=False``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from petri.core.dish import THOUGHT_CHANNEL, Dish, encode_prompt
from petri.core.trajectory import SamplerSettings
from petri.engine.seeding import plan_dish, seed_dish
from petri.engine.torch.configs import small_diffusion_gemma_config
from petri.engine.torch.model import LoadedModel
from petri.engine.torch.tiny import build_tiny_tokenizer
from petri.measure.metrics import segments

TURN_OPEN, TURN_CLOSE, CHANNEL_OPEN, CHANNEL_CLOSE = "<|turn>", "<turn|>", "<|channel>", "<channel|>"
#: Gemma's chat layout: <bos><|turn>user\n{text}<turn|>\n<|turn>model\n
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|turn>{{ m['role'] }}\n{{ m['content'] }}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)
TEXT = "The customer placed an order"


def chat_tokenizer():
    """The tiny BPE tokenizer plus the four turn/channel special tokens and a chat template."""
    tok = build_tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": [TURN_OPEN, TURN_CLOSE, CHANNEL_OPEN, CHANNEL_CLOSE]})
    tok.chat_template = CHAT_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def chat_lm():
    """A 2-layer random DiffusionGemma whose vocabulary covers the chat tokenizer (special tokens too)."""
    tok = chat_tokenizer()
    config = small_diffusion_gemma_config(vocab_size=len(tok), canvas_length=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = DiffusionGemmaForBlockDiffusion(config).eval()
    return LoadedModel(model=model, tokenizer=tok, model_id="tiny-chat", device=torch.device("cpu"), dtype=torch.float32)


def plain(tok, text):
    return tok.encode(text, add_special_tokens=False)


def expected_chat_ids(tok, text):
    """The template's tokens worked out by hand: special tokens by id, the text between them encoded
    piece by piece (special tokens split the text, so each piece is tokenized on its own)."""
    special = dict(zip([TURN_OPEN, TURN_CLOSE], tok.convert_tokens_to_ids([TURN_OPEN, TURN_CLOSE])))
    return [
        tok.bos_token_id,
        special[TURN_OPEN], *plain(tok, "user\n" + text), special[TURN_CLOSE],
        *plain(tok, "\n"),
        special[TURN_OPEN], *plain(tok, "model\n"),
    ]


def expected_prefix(tok):
    open_id, close_id = tok.convert_tokens_to_ids([CHANNEL_OPEN, CHANNEL_CLOSE])
    return (open_id, *plain(tok, "thought\n"), close_id)


class DecoderInputs:
    """Records ``decoder_input_ids`` (S, L) at every forward call of the full model (the decoder
    steps; the prompt encoder is called on its own and is not recorded)."""

    def __init__(self, model):
        self.seen: list[np.ndarray] = []
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        self.seen.append(kwargs["decoder_input_ids"].detach().cpu().numpy().copy())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def test_the_special_tokens_are_single_tokens_in_the_model_vocabulary(chat_lm):
    tok = chat_lm.tokenizer
    ids = tok.convert_tokens_to_ids([TURN_OPEN, TURN_CLOSE, CHANNEL_OPEN, CHANNEL_CLOSE])
    assert len(set(ids)) == 4 and max(ids) < chat_lm.vocab_size
    assert plain(tok, CHANNEL_OPEN) == [ids[2]]


def test_encode_prompt_goes_through_the_chat_template(chat_lm):
    tok = chat_lm.tokenizer
    enc = encode_prompt(tok, TEXT)
    assert enc.chat_template
    assert list(enc.ids) == expected_chat_ids(tok, TEXT)
    assert enc.text == f"<bos><|turn>user\n{TEXT}<turn|>\n<|turn>model\n"
    assert enc.canvas_prefix_ids == expected_prefix(tok)
    assert tok.decode(list(enc.canvas_prefix_ids)) == "<|channel>thought\n<channel|>" == THOUGHT_CHANNEL


def test_pin_thought_channel_false_keeps_the_template_and_drops_the_prefix(chat_lm):
    enc = encode_prompt(chat_lm.tokenizer, TEXT, pin_thought_channel=False)
    assert enc.chat_template and list(enc.ids) == expected_chat_ids(chat_lm.tokenizer, TEXT)
    assert enc.canvas_prefix_ids == ()


DISH = Dish(concepts=("order", "person"), event="A person orders.", template="{event} {concepts}", shuffle=False)
SETTINGS = SamplerSettings(max_denoising_steps=5, stability_threshold=None, confidence_threshold=None)


def test_plan_dish_lays_anchors_after_the_pinned_thought_block(chat_lm):
    tok = chat_lm.tokenizer
    prompt, layouts = plan_dish(chat_lm, DISH, 2, SETTINGS)
    prefix = expected_prefix(tok)
    assert list(prompt.ids) == expected_chat_ids(tok, DISH.prompt_text())
    assert prompt.canvas_prefix_ids == prefix
    # free canvas 9..15 (7 positions), two one-token anchors: 5 free positions in gaps 2, 1, 2 → starts 11, 13
    assert [len(tok.encode(" " + c, add_special_tokens=False)) for c in DISH.concepts] == [1, 1]
    assert [[(a.concept, a.start) for a in spans] for spans in layouts] == [[("order", 11), ("person", 13)]] * 2

    _, unpinned = plan_dish(chat_lm, DISH, 2, replace(SETTINGS, pin_thought_channel=False))
    # the whole canvas 0..15 is free: 14 free positions in gaps 5, 4, 5 → starts 5, 10
    assert [[a.start for a in spans] for spans in unpinned] == [[5, 10]] * 2


def test_seed_dish_pins_the_thought_block_at_every_step(chat_lm):
    tok = chat_lm.tokenizer
    prefix = np.array(expected_prefix(tok))
    with DecoderInputs(chat_lm.model) as inputs:
        traj = seed_dish(chat_lm, DISH, 3, SETTINGS, seed=5)
    assert list(traj.prompt_ids) == expected_chat_ids(tok, DISH.prompt_text())
    assert traj.prompt == tok.decode(expected_chat_ids(tok, DISH.prompt_text()))
    assert len(inputs.seen) == 5
    for step, canvas in enumerate(inputs.seen):
        for s in range(3):
            np.testing.assert_array_equal(canvas[s, : len(prefix)], prefix, err_msg=f"step {step}, sample {s}")
    np.testing.assert_array_equal(traj.final_ids[:, : len(prefix)], np.tile(prefix, (3, 1)))
    assert traj.anchor_mask[:, : len(prefix)].all()
    assert all(tok.decode(list(ids[: len(prefix)])) == THOUGHT_CHANNEL for ids in traj.final_ids)
    # pinned, but not an anchor: the anchors are the concepts only, so the segments lie between them
    assert [[a.concept for a in spans] for spans in traj.anchors] == [["order", "person"]] * 3
    assert [(g.sample, g.start, g.end) for g in segments(traj.anchors)] == [(s, 12, 13) for s in range(3)]
    assert traj.anchor_mask.sum() == 3 * (len(prefix) + 2)


def test_seed_dish_without_the_thought_block_pins_only_the_anchors(chat_lm):
    tok = chat_lm.tokenizer
    prefix = np.array(expected_prefix(tok))
    settings = replace(SETTINGS, pin_thought_channel=False)
    with DecoderInputs(chat_lm.model) as inputs:
        traj = seed_dish(chat_lm, DISH, 3, settings, seed=5)
    assert list(traj.prompt_ids) == expected_chat_ids(tok, DISH.prompt_text())
    expected_mask = np.zeros((3, 16), dtype=bool)
    expected_mask[:, [5, 10]] = True
    np.testing.assert_array_equal(traj.anchor_mask, expected_mask)
    # positions 0..8 are free: the random canvas does not hold the thought block there
    starts = np.stack(inputs.seen)[:, :, : len(prefix)]
    assert not (starts == prefix).all(axis=-1).any()
