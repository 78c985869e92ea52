"""petri.core.probe: the request's JSON shape, its layout on a canvas and every refusal, with a toy
tokenizer (one token per character; a space followed by one character is one token too)."""

from __future__ import annotations

import pytest

from petri.core.probe import (
    LABEL_POOL,
    ProbeInputError,
    layout_frame,
    question_order,
    render_prompt,
    request_from_dict,
    request_to_dict,
    validate_request,
)


def encode(text):
    """One token per character, except " x" (space + one character) which is one token."""
    out, i = [], 0
    while i < len(text):
        if text[i] == " " and i + 1 < len(text) and text[i + 1] != " ":
            out.append(1000 + ord(text[i + 1]))
            i += 2
        else:
            out.append(ord(text[i]))
            i += 1
    return out


def encode_single(text):
    """One token: what :func:`encode` writes as one, and two capital letters (with or without a space)."""
    bare = text[1:] if text.startswith(" ") else text
    if len(bare) == 2 and bare.isupper():
        return 5000 + 100 * ord(bare[0]) + ord(bare[1])
    ids = encode(text)
    return ids[0] if len(ids) == 1 else None


BASE = {"prompt": "An order arrived.", "frame": "Ok:{{ok}}.",
        "questions": [{"name": "ok", "alternatives": ["yes", "no"]}]}


def req(**extra):
    return request_from_dict({**BASE, **extra})


def refusal(request, canvas=32, single=encode_single):
    with pytest.raises(ProbeInputError) as caught:
        validate_request(request, canvas_length=canvas, encode_single=single, encode=encode)
    return caught.value


def test_round_trip_and_defaults():
    payload = {"prompt": "p", "frame": "A: {{a}} B:{{b}}", "instructions": "Answer with one letter.",
               "samples": "auto", "steps": 3, "seed": 4, "top_k": 7, "pins": [{"text": "order", "at": 20}],
               "order": "permutations:5", "min_mass": 0.25,
               "questions": [{"name": "a", "slot": "a", "alternatives": ["x", "y"], "labels": ["P", "Q"], "text": "A?"},
                             {"name": "b", "slot": "b", "alternatives": ["u", "v"], "ask_if": {"a": "x"}}]}
    request = request_from_dict(payload)
    assert request_to_dict(request) == payload
    assert request_from_dict(request_to_dict(request)) == request
    plain = req()
    assert (plain.samples, plain.steps, plain.seed, plain.top_k, plain.questions[0].slot) == (1, 1, 0, 5, "ok")
    assert (plain.order, plain.min_mass) == ("as_listed", 0.5)
    assert request_from_dict({**BASE, "questions": [{"name": "ok", "choices": ["a", "b"]}]}).questions[0].alternatives \
        == ("a", "b")


def test_layout_pins_the_frame_and_leaves_one_position_per_slot():
    layout = layout_frame(req(frame="Ok: {{ok}}."), canvas_length=12, encode=encode, encode_single=encode_single,
                          prefix_ids=(7, 8))
    # prefix 7 8, then "Ok:" (3 tokens; the space before the slot goes into the label), the slot, "."
    assert layout.pinned_ids[:7] == (7, 8, ord("O"), ord("k"), ord(":"), 0, ord("."))
    assert layout.pinned[:7] == (True, True, True, True, True, False, True)
    assert not any(layout.pinned[7:]) and len(layout.pinned) == 12
    assert layout.slots == {"ok": 5}
    assert layout.labels == (("A", "B"),)
    assert layout.label_ids == ((1000 + ord("A"), 1000 + ord("B")),)  # " A", " B": the spaced form


def test_render_lists_the_labels():
    request = req(instructions="Answer with one letter.",
                  questions=[{"name": "ok", "alternatives": ["yes", "no"], "text": "Is it consistent?"}])
    assert render_prompt(request, [("A", "B")]) == ("Answer with one letter.\nAn order arrived.\n"
                                                    "Is it consistent?: A) yes  B) no")


def test_more_than_26_automatic_labels():
    alternatives = [f"o{i}" for i in range(70)]
    layout = layout_frame(req(questions=[{"name": "ok", "alternatives": alternatives}]), canvas_length=32,
                          encode=encode, encode_single=encode_single)
    assert layout.labels[0] == LABEL_POOL[:70]
    assert layout.labels[0][26] == "a" and layout.labels[0][62] == "AA"

    def no_pairs(text):  # a tokenizer without two-letter tokens: 62 labels at most
        return encode_single(text) if len(text.strip()) == 1 else None

    many = req(questions=[{"name": "ok", "alternatives": alternatives}])
    error = refusal(many, single=no_pairs)
    assert error.field == "questions[0].alternatives" and "'ok'" in str(error) and "62" in str(error)


@pytest.mark.parametrize("questions,field", [
    ([{"name": "ok", "alternatives": []}], "questions[0].alternatives"),
    ([{"name": "ok", "alternatives": ["yes"]}], "questions[0].alternatives"),
    ([{"name": "ok", "alternatives": ["yes", " "]}], "questions[0].alternatives"),
    ([{"name": "", "alternatives": ["yes", "no"], "slot": "ok"}], "questions[0].name"),
    ([{"name": "ok", "alternatives": ["yes", "yes"]}], "questions[0].alternatives"),
    ([{"name": "ok", "alternatives": ["yes", "no"], "labels": ["Y"]}], "questions[0].labels"),
    ([{"name": "ok", "alternatives": ["yes", "no"], "labels": ["Ye", "N"]}], "questions[0].labels"),
    ([{"name": "ok", "alternatives": ["yes", "no"], "slot": "missing"}], "questions[0].slot"),
    ([{"name": "ok", "alternatives": [f"a{i}" for i in range(201)]}], "questions[0].alternatives"),
    ([{"name": "ok", "alternatives": ["yes", "no"]}, {"name": "ok", "alternatives": ["a", "b"]}],
     "questions[1].name"),
])
def test_question_refusals_name_the_field(questions, field):
    assert refusal(req(questions=questions)).field == field


def test_ask_if_unknown_self_wrong_alternative_and_cycle():
    q = lambda name, ask=None: {"name": name, "slot": "ok", "alternatives": ["yes", "no"],  # noqa: E731
                                **({"ask_if": ask} if ask else {})}
    assert refusal(req(questions=[q("a"), q("b", {"nobody": "yes"})])).field == "questions[1].ask_if"
    assert refusal(req(questions=[q("a", {"a": "yes"})])).field == "questions[0].ask_if"
    assert "maybe" in str(refusal(req(questions=[q("a"), q("b", {"a": "maybe"})])))
    cycle = refusal(req(questions=[q("a", {"c": "no"}), q("b", {"a": "yes"}), q("c", {"b": "yes"})]))
    assert cycle.field.endswith(".ask_if") and "cycle" in str(cycle)
    # a question may name a later one: it is read after it
    levels = question_order(request_from_dict({**BASE, "questions": [q("a", {"b": "yes"}), q("b")]}).questions)
    assert levels == [[1], [0]]


def test_frame_and_pin_refusals():
    assert refusal(req(frame="no slot here")).field == "frame"
    assert refusal(req(frame="{{ok}} {{ok}}")).field == "frame"
    assert refusal(req(frame="x" * 40 + "{{ok}}")).field == "frame"
    assert refusal(req(frame="x" * 32 + "{{ok}}")).field == "questions[0].slot"  # text fits, the slot does not
    assert refusal(req(pins=[{"text": "order", "at": 30}])).field == "pins[0]"  # outside the canvas
    overlap_slot = refusal(req(pins=[{"text": "o", "at": 3}]))  # "Ok:" then the slot at 3
    assert overlap_slot.field == "pins[0]" and "slot" in str(overlap_slot)
    overlap_text = refusal(req(pins=[{"text": "o", "at": 1}]))
    assert overlap_text.field == "pins[0]" and "pinned span" in str(overlap_text)
    assert refusal(req(pins=[{"text": "o", "at": 10}, {"text": "p", "at": 10}])).field == "pins[1]"


@pytest.mark.parametrize("payload,field", [
    ({"frame": "{{ok}}", "questions": []}, "prompt"),
    ({**BASE, "questions": []}, "questions"),
    ({**BASE, "questions": [{"name": "q", "alternatives": ["a", "b"]}] * 17}, "questions"),
    ({**BASE, "samples": 0}, "samples"),
    ({**BASE, "samples": "many"}, "samples"),
    ({**BASE, "steps": 0}, "steps"),
    ({**BASE, "bogus": 1}, "bogus"),
    ({**BASE, "questions": [{"name": "ok"}]}, "questions[0].alternatives"),
    ({**BASE, "questions": [{"name": "ok", "alternatives": ["a", "b"], "ask_if": "a"}]}, "questions[0].ask_if"),
    ({**BASE, "pins": [{"text": "x"}]}, "pins[0]"),
])
def test_structure_refusals(payload, field):
    with pytest.raises(ProbeInputError) as caught:
        request_from_dict(payload)
    assert caught.value.field == field


@pytest.mark.parametrize("payload, field, words", [
    ({"order": "sorted"}, "order", "'sorted'"),
    ({"order": "permutations:1"}, "order", "from 2 to 32"),
    ({"order": "permutations:33"}, "order", "'33'"),
    ({"order": "permutations:x"}, "order", "'x'"),
    ({"order": 3}, "order", "3"),
    ({"min_mass": -0.01}, "min_mass", "-0.01"),
    ({"min_mass": 1.01}, "min_mass", "1.01"),
    ({"min_mass": "0.5"}, "min_mass", "'0.5'"),
    ({"min_mass": True}, "min_mass", "True"),
    ({"min_mass": float("nan")}, "min_mass", "nan"),
])
def test_order_and_min_mass_refusals_name_their_field(payload, field, words):
    with pytest.raises(ProbeInputError) as caught:
        req(**payload)
    assert caught.value.field == field and words in str(caught.value)


def test_order_and_min_mass_bounds_are_accepted():
    assert req(order="permutations:2").order == "permutations:2" and req(order="permutations:32").order
    assert (req(min_mass=0).min_mass, req(min_mass=1).min_mass, req(order="cyclic").order) == (0.0, 1.0, "cyclic")


def test_a_request_built_directly_is_checked_too():
    from dataclasses import replace

    assert refusal(replace(req(), order="backwards")).field == "order"
    assert refusal(replace(req(), min_mass=2.0)).field == "min_mass"
    many = req(questions=[{"name": "ok", "alternatives": [f"a{i}" for i in range(33)]}], order="cyclic")
    assert refusal(many, canvas=64).field == "order"


def test_a_slot_no_question_reads_is_refused_naming_it():
    error = refusal(req(frame="Consistent: {{c}} Why: {{why}}", questions=[{"name": "c", "alternatives": ["yes", "no"]}]))
    assert error.field == "frame" and "{{why}}" in str(error) and "no question" in str(error)


def test_listing_orders_hand_worked():
    from petri.core.probe import listing_orders

    two_three = req(frame="{{a}} {{b}}", order="cyclic", questions=[{"name": "a", "alternatives": ["x", "y"]},
                                                                    {"name": "b", "alternatives": ["p", "q", "r"]}])
    orders = listing_orders(two_three)
    assert [o.listing for o in orders] == [((0, 1), (0, 1, 2)), ((1, 0), (1, 2, 0)), ((0, 1), (2, 0, 1))]
    assert [o.counts for o in orders] == [(True, True), (True, True), (False, True)]
    assert [o.listing for o in listing_orders(req())] == [((0, 1),)]
    drawn = listing_orders(req(order="permutations:6", seed=9))
    assert len(drawn) == 6 and drawn == listing_orders(req(order="permutations:6", seed=9))
    assert all(sorted(o.listing[0]) == [0, 1] and all(o.counts) for o in drawn)
