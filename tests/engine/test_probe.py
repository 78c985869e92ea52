"""The probe's read (petri.engine.probe.read_slots) against the model's own logits, worked by hand.

The expected values are computed here without the probe: the canvas is rebuilt from the seed
(torch.manual_seed, then uniform tokens for the uniform family; the mask token for the masked one),
the frame is written into it, the model's full forward (encoder + decoder for DiffusionGemma; the
whole prompt + canvas sequence for the masked LM) is called directly, and the softmax at the slot
is picked at the label ids and normalised.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from petri.core.probe import ProbeInputError, request_from_dict
from petri.engine.probe import plan_probe, read_slots
from petri.engine.torch.tiny import tiny_masked_model, tiny_random_model

CANVAS = 16


@pytest.fixture(scope="module")
def uniform():
    return tiny_random_model(canvas_length=CANVAS)


@pytest.fixture(scope="module")
def masked():
    return tiny_masked_model(canvas_length=CANVAS)


def _request(**extra):
    """A one-question request; ``min_mass`` 0 (always an answer) unless given."""
    payload = {"prompt": "The customer placed an order.", "frame": "Answer:{{ok}} done", "min_mass": 0.0,
               "questions": [{"name": "ok", "alternatives": ["yes", "no"], "labels": ["A", "B"]}]}
    payload.update(extra)
    return request_from_dict(payload)


def _hand_canvas(lm, request, draws, seed):
    """The canvases (draws, L) the first step reads: noise drawn after torch.manual_seed(seed) (one
    batch), the frame written over it."""
    tok = lm.tokenizer
    ids = tok.encode("Answer:", add_special_tokens=False)
    tail = tok.encode(" done", add_special_tokens=False)
    slot = len(ids)
    torch.manual_seed(seed)
    canvas = torch.randint(lm.vocab_size, (draws, lm.canvas_length))
    canvas[:, :slot] = torch.tensor(ids)
    canvas[:, slot + 1: slot + 1 + len(tail)] = torch.tensor(tail)
    return canvas, slot


def _prompt_ids(lm, text):
    return [lm.tokenizer.bos_token_id, *lm.tokenizer.encode(text, add_special_tokens=False)]


PROMPT_TEXT = "The customer placed an order.\nok: A) yes  B) no"


@pytest.mark.parametrize("draws", [1, 3])
def test_uniform_read_is_the_softmax_of_the_models_logits(uniform, draws):
    request = _request(samples=draws, seed=7)
    canvas, slot = _hand_canvas(uniform, request, draws, seed=7)
    prompt = torch.tensor([_prompt_ids(uniform, PROMPT_TEXT)] * draws)
    with torch.no_grad():
        logits = uniform.model(input_ids=prompt, decoder_input_ids=canvas).logits.double()
    probs = torch.softmax(logits[:, slot], -1).mean(0).numpy()
    label_ids = [uniform.tokenizer.encode(x, add_special_tokens=False)[0] for x in "AB"]
    expected = probs[label_ids] / probs[label_ids].sum()

    result = read_slots(uniform, request)
    (read,) = result.reads
    assert result.prompt_text == PROMPT_TEXT
    assert read.position == slot and read.draws == draws
    np.testing.assert_allclose(read.probs, expected, rtol=1e-5)
    assert read.mass == pytest.approx(probs[label_ids].sum(), rel=1e-5)
    assert read.entropy == pytest.approx(-(expected * np.log(expected)).sum(), rel=1e-5)
    top = np.argsort(-probs)[:5]
    assert [t for t, _ in read.top_k] == [uniform.tokenizer.decode([int(t)]) for t in top]
    np.testing.assert_allclose([p for _, p in read.top_k], probs[top], rtol=1e-5)
    assert read.answer == ("yes" if expected[0] > expected[1] else "no")


def _hand_slot(lm, prompt_text, draws=1, seed=0):
    """The model's own softmax at the slot of ``Answer:{{ok}} done`` for ``prompt_text``, by a full
    forward: (V,) float64, averaged over ``draws`` (the uniform family's noise from ``seed``; the
    masked family reads the mask token)."""
    prompt = _prompt_ids(lm, prompt_text)
    with torch.no_grad():
        if getattr(lm, "mask_token_id", None) is None:
            canvas, slot = _hand_canvas(lm, None, draws, seed)
            logits = lm.model(input_ids=torch.tensor([prompt] * draws), decoder_input_ids=canvas).logits.double()
            return torch.softmax(logits[:, slot], -1).mean(0).numpy()
        tok = lm.tokenizer
        ids, tail = tok.encode("Answer:", add_special_tokens=False), tok.encode(" done", add_special_tokens=False)
        canvas = [*ids, lm.mask_token_id, *tail]
        canvas += [lm.mask_token_id] * (CANVAS - len(canvas))
        logits = lm.model(input_ids=torch.tensor([prompt + canvas])).logits.double()[0, len(prompt):]
        return torch.softmax(logits[len(ids)], -1).numpy()


def _listing(alternatives, labels="ABC"):
    return "The customer placed an order.\nok: " + "  ".join(f"{label}) {a}" for label, a in zip(labels, alternatives))


@pytest.mark.parametrize("family", ["uniform", "masked"])
def test_cyclic_read_is_the_mean_over_orders_of_the_models_logits(family, request):
    """Three alternatives, cyclic: rotation r lists alternative (j + r) mod 3 at label j; each
    rotation's prompt is run through the model's full forward here (the same noise), its label
    distribution mapped back to the alternatives, and the three averaged."""
    lm = request.getfixturevalue(family)
    alternatives = ["yes", "no", "maybe"]
    read = read_slots(lm, _request(order="cyclic", samples=2, seed=4, questions=[
        {"name": "ok", "alternatives": alternatives, "labels": ["A", "B", "C"]}])).reads[0]
    label_ids = [lm.tokenizer.encode(x, add_special_tokens=False)[0] for x in "ABC"]
    by_order, masses = [], []
    for r in range(3):
        listed = [alternatives[(j + r) % 3] for j in range(3)]
        full = _hand_slot(lm, _listing(listed), draws=2, seed=4)[label_ids]
        by_label = full / full.sum()
        by_order.append([by_label[listed.index(a)] for a in alternatives])
        masses.append(full.sum())
    by_order = np.array(by_order)
    np.testing.assert_allclose(read.order_probs, by_order, rtol=1e-5)
    np.testing.assert_allclose(read.probs, by_order.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(read.spread, by_order.max(axis=0) - by_order.min(axis=0), rtol=1e-4, atol=1e-9)
    assert read.mass == pytest.approx(np.mean(masses), rel=1e-5)
    assert read.answer == alternatives[int(np.argmax(by_order.mean(axis=0)))]


def test_two_alternatives_cyclic_is_the_same_whichever_order_they_are_listed_in(uniform):
    listed = {}
    for alternatives in (["yes", "no"], ["no", "yes"]):
        read = read_slots(uniform, _request(order="cyclic", seed=2, questions=[
            {"name": "ok", "alternatives": alternatives, "labels": ["A", "B"]}])).reads[0]
        listed[tuple(alternatives)] = dict(zip(read.alternatives, read.probs))
    as_listed = [dict(zip(r.alternatives, r.probs)) for r in (
        read_slots(uniform, _request(seed=2, questions=[{"name": "ok", "alternatives": a, "labels": ["A", "B"]}])).reads[0]
        for a in (["yes", "no"], ["no", "yes"]))]
    assert as_listed[0]["yes"] != pytest.approx(as_listed[1]["yes"], abs=1e-6)  # the listing moves an as-listed read
    assert listed[("yes", "no")]["yes"] == pytest.approx(listed[("no", "yes")]["yes"], abs=1e-12)
    assert listed[("yes", "no")]["no"] == pytest.approx(listed[("no", "yes")]["no"], abs=1e-12)


def test_permutations_read_n_seeded_orders(uniform):
    from petri.core.probe import listing_orders

    request = _request(order="permutations:4", seed=3)
    read = read_slots(uniform, request).reads[0]
    assert read.order_probs.shape == (4, 2)
    label_ids = [uniform.tokenizer.encode(x, add_special_tokens=False)[0] for x in "AB"]
    expected = []
    for order in listing_orders(request):
        listed = [("yes", "no")[k] for k in order.listing[0]]
        full = _hand_slot(uniform, _listing(listed), seed=3)[label_ids]
        expected.append([full[listed.index(a)] / full.sum() for a in ("yes", "no")])
    np.testing.assert_allclose(read.order_probs, expected, rtol=1e-5)


def test_abstains_below_min_mass_just_below_at_and_above(uniform):
    mass = read_slots(uniform, _request(seed=1)).reads[0].mass
    assert 0 < mass < 0.5  # a random tiny model puts little of its probability on two labels
    below = read_slots(uniform, _request(seed=1, min_mass=mass * (1 - 1e-9))).reads[0]
    at = read_slots(uniform, _request(seed=1, min_mass=mass)).reads[0]
    above = read_slots(uniform, _request(seed=1, min_mass=mass * (1 + 1e-9))).reads[0]
    assert below.answer is not None and at.answer is not None and above.answer is None
    assert above.to_dict()["answer"] is None and above.to_dict()["mass"] == pytest.approx(mass)
    np.testing.assert_allclose(above.probs, at.probs)  # the probabilities stay; only the answer is withheld
    payload = {"prompt": "The customer placed an order.", "frame": "Answer:{{ok}} done",
               "questions": [{"name": "ok", "alternatives": ["yes", "no"], "labels": ["A", "B"]}], "seed": 1}
    default = read_slots(uniform, request_from_dict(payload))  # min_mass 0.5 unless told
    assert default.reads[0].answer is None and default.reads[0].min_mass == 0.5


def test_an_abstained_answer_skips_the_questions_that_ask_if_it(uniform):
    from dataclasses import replace

    request = _two_questions({"ok": "yes"})
    result = read_slots(uniform, replace(request, min_mass=1.0))
    assert result.answers() == {"ok": None} and result.skipped == ("kind",)


def test_masked_read_is_the_softmax_of_the_models_logits(masked):
    request = _request()
    tok = masked.tokenizer
    ids, tail = tok.encode("Answer:", add_special_tokens=False), tok.encode(" done", add_special_tokens=False)
    canvas = [*ids, masked.mask_token_id, *tail]
    canvas += [masked.mask_token_id] * (CANVAS - len(canvas))
    prompt = _prompt_ids(masked, PROMPT_TEXT)
    with torch.no_grad():
        logits = masked.model(input_ids=torch.tensor([prompt + canvas])).logits.double()[0, len(prompt):]
    probs = torch.softmax(logits[len(ids)], -1).numpy()
    label_ids = [tok.encode(x, add_special_tokens=False)[0] for x in "AB"]
    (read,) = read_slots(masked, request).reads
    np.testing.assert_allclose(read.probs, probs[label_ids] / probs[label_ids].sum(), rtol=1e-5)
    assert read.mass == pytest.approx(probs[label_ids].sum(), rel=1e-5)


def test_steps_read_each_step_and_the_first_equals_a_one_step_read(uniform, masked):
    for lm in (uniform, masked):
        one = read_slots(lm, _request(seed=3)).reads
        three = read_slots(lm, _request(seed=3, steps=3)).reads
        assert [r.step for r in three] == [0, 1, 2]
        np.testing.assert_allclose(three[0].probs, one[0].probs, rtol=1e-6)


def test_draws_average_the_single_draw_reads(uniform):
    """Three draws in one batch average what the three canvases give one by one."""
    request = _request(samples=3, seed=11)
    canvas, slot = _hand_canvas(uniform, request, 3, seed=11)
    singles = []
    for row in canvas:
        prompt = torch.tensor([_prompt_ids(uniform, PROMPT_TEXT)])
        with torch.no_grad():
            logits = uniform.model(input_ids=prompt, decoder_input_ids=row[None]).logits.double()
        singles.append(torch.softmax(logits[0, slot], -1).numpy())
    label_ids = [uniform.tokenizer.encode(x, add_special_tokens=False)[0] for x in "AB"]
    mean = np.mean(singles, axis=0)[label_ids]
    (read,) = read_slots(uniform, request).reads
    np.testing.assert_allclose(read.probs, mean / mean.sum(), rtol=1e-5)
    assert read.draws == 3


def test_auto_draws_four_where_uncertain(uniform):
    """A random tiny model is uncertain between two labels (entropy near log 2 > 0.1): auto reads
    again with 4 draws (seed + 1), equal to samples=4 at that seed."""
    auto = read_slots(uniform, _request(samples="auto", seed=5)).reads[0]
    four = read_slots(uniform, _request(samples=4, seed=6)).reads[0]
    one = read_slots(uniform, _request(samples=1, seed=5)).reads[0]
    assert one.entropy > 0.1
    assert auto.draws == 4
    np.testing.assert_allclose(auto.probs, four.probs, rtol=1e-9)


def test_auto_keeps_one_draw_where_certain():
    """A tiny model made sure of itself (its output head's logits × 50, so the softmax is peaked):
    with the labels its top single-token prediction at the slot and its least likely one, the
    entropy over them is <= 0.1 and auto keeps the single read."""
    sure = tiny_random_model(canvas_length=CANVAS)
    sure.model.lm_head.register_forward_hook(lambda module, inputs, output: output * 50)
    read = read_slots(sure, _request(seed=5)).reads[0]
    decode = sure.tokenizer.decode
    ranked = [decode([_token(sure, text)]) for text, _ in read.top_k if _token(sure, text) is not None]
    labels = [ranked[0], "~" if ranked[0] != "~" else "`"]
    request = _request(seed=5, samples="auto", questions=[{"name": "ok", "alternatives": ["yes", "no"],
                                                           "labels": labels}])
    certain = read_slots(sure, request).reads[0]
    assert certain.entropy <= 0.1 and certain.draws == 1, certain


def _token(lm, text):
    ids = lm.tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def _two_questions(ask_if):
    return _request(frame="Answer:{{ok}} kind:{{kind}}", questions=[
        {"name": "ok", "alternatives": ["yes", "no"], "labels": ["A", "B"]},
        {"name": "kind", "alternatives": ["x", "y"], "labels": ["C", "D"], "ask_if": ask_if}])


def test_ask_if_reads_or_skips_on_the_earlier_answer(uniform):
    first = read_slots(uniform, _two_questions(None))
    ok = first.answers()["ok"]
    other = "no" if ok == "yes" else "yes"
    asked = read_slots(uniform, _two_questions({"ok": ok}))
    skipped = read_slots(uniform, _two_questions({"ok": other}))
    assert set(asked.answers()) == {"ok", "kind"} and asked.skipped == ()
    assert set(skipped.answers()) == {"ok"} and skipped.skipped == ("kind",)
    assert [r.question for r in asked.reads] == ["ok", "kind"]


def test_ask_if_pins_the_earlier_answer(uniform):
    """The dependent question is read on a fresh draw (the same seed) with the earlier answer's
    label token pinned at its slot: worked by hand."""
    ok = read_slots(uniform, _two_questions(None)).answers()["ok"]
    request = _two_questions({"ok": ok})
    asked = read_slots(uniform, request).final()["kind"]
    tok = uniform.tokenizer
    one = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    answer_label = one("A" if ok == "yes" else "B")
    frame = [*one("Answer:"), *answer_label, *one(" kind:")]
    slot = len(frame)
    torch.manual_seed(0)
    canvas = torch.randint(uniform.vocab_size, (1, CANVAS))
    canvas[0, :slot] = torch.tensor(frame)
    text = "The customer placed an order.\nok: A) yes  B) no\nkind: C) x  D) y"
    with torch.no_grad():
        logits = uniform.model(input_ids=torch.tensor([_prompt_ids(uniform, text)]), decoder_input_ids=canvas).logits
    probs = torch.softmax(logits[0, slot].double(), -1).numpy()[[one("C")[0], one("D")[0]]]
    assert asked.position == slot
    np.testing.assert_allclose(asked.probs, probs / probs.sum(), rtol=1e-5)


def test_more_than_26_automatic_labels(uniform):
    alternatives = [f"option{i}" for i in range(30)]
    request = _request(questions=[{"name": "many", "alternatives": alternatives}], frame="Answer:{{many}}")
    read = read_slots(uniform, request).reads[0]
    assert len(read.probs) == 30 and read.probs.sum() == pytest.approx(1.0)
    assert read.labels[:27] == (*"ABCDEFGHIJKLMNOPQRSTUVWXYZ", "a")
    assert len(set(read.labels)) == 30


def test_too_many_alternatives_for_the_tokenizer_names_the_question(uniform):
    request = _request(questions=[{"name": "ok", "alternatives": ["yes", "no"], "labels": ["A", "B"]},
                                  {"name": "huge", "alternatives": [f"o{i}" for i in range(200)]}],
                       frame="Answer:{{ok}} {{huge}}")
    with pytest.raises(ProbeInputError) as caught:
        read_slots(uniform, request)
    assert caught.value.field == "questions[1].alternatives" and "'huge'" in str(caught.value)


def test_model_refusals_name_the_field(uniform):
    cases = {
        "questions[0].labels": _request(questions=[{"name": "ok", "alternatives": ["yes", "no"],
                                                    "labels": ["yes", "no"]}]),
        "frame": _request(frame="word " * 40 + "{{ok}}"),
        "pins[0]": _request(pins=[{"text": "order", "at": 40}]),
        "steps": _request(steps=60),
    }
    for field, request in cases.items():
        with pytest.raises(ProbeInputError) as caught:
            read_slots(uniform, request)
        assert caught.value.field == field, (field, str(caught.value))
    slot_at = plan_probe(uniform, _request()).layout.slots["ok"]
    with pytest.raises(ProbeInputError) as caught:
        read_slots(uniform, _request(pins=[{"text": "order", "at": slot_at}]))
    assert caught.value.field == "pins[0]" and "slot" in str(caught.value)
    with pytest.raises(ProbeInputError) as caught:
        read_slots(uniform, _request(pins=[{"text": "order", "at": 0}]))
    assert caught.value.field == "pins[0]" and "pinned span" in str(caught.value)


def test_slot_outside_the_canvas(uniform):
    """The frame's text fills the canvas and its slot falls one past the end."""
    assert len(uniform.tokenizer.encode("A" * CANVAS, add_special_tokens=False)) == CANVAS
    with pytest.raises(ProbeInputError) as caught:
        read_slots(uniform, _request(frame="A" * CANVAS + "{{ok}}"))
    assert caught.value.field == "questions[0].slot" and "outside the canvas" in str(caught.value)
    with pytest.raises(ProbeInputError) as caught:
        read_slots(uniform, _request(frame="A" * (CANVAS + 1) + "{{ok}}"))
    assert caught.value.field == "frame"


def test_a_cancelled_token_stops_the_read(uniform):
    from petri.core.cancel import Cancelled, CancelToken

    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        read_slots(uniform, _request(steps=2), cancel=token)
