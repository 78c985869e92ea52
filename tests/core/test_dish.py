"""Anchor layouts: tokenization mid-sentence, even spreading, seeded shuffles, and errors that name
the concept and the reason."""

from __future__ import annotations

import pytest

from petri.core.dish import Dish, LayoutError, concept_token_ids, encode_prompt, even_slots, layout_samples


def ids_for(tokenizer, dish):
    return {c: concept_token_ids(tokenizer, c) for c in dish.concepts}


def test_concepts_are_tokenized_as_mid_sentence_words(tiny_lm):
    tok = tiny_lm.tokenizer
    ids = concept_token_ids(tok, "inventory")
    assert tok.decode(list(ids)) == " inventory"
    # the same tokens appear when the word sits inside a sentence
    sentence = tok.encode("the inventory", add_special_tokens=False)
    assert list(ids) == sentence[-len(ids):]


def test_even_slots_leave_equal_gaps():
    # canvas 16, three one-token anchors: 13 free positions split as 3, 3, 4, 3 by rounding
    assert even_slots([1, 1, 1], 16) == [3, 7, 12]
    # a two-token anchor and a prefix of 2: 10 - 2 - 3 = 5 free → gaps round(5/3)=2, round(10/3)-2=1, rest 2
    assert even_slots([2, 1], 10, first_free=2) == [4, 7]


def test_layouts_are_seeded_shuffles_in_canvas_order(tiny_lm):
    dish = Dish(concepts=("order", "inventory", "person"), event="x")
    ids = ids_for(tiny_lm.tokenizer, dish)
    first = layout_samples(dish, ids, 16, 12, seed=7)
    again = layout_samples(dish, ids, 16, 12, seed=7)
    other = layout_samples(dish, ids, 16, 12, seed=8)
    assert first == again
    assert first != other
    orders = {tuple(a.concept for a in spans) for spans in first}
    assert len(orders) > 1, "12 shuffled samples of 3 concepts should not all share one order"
    for spans in first:
        assert [a.start for a in spans] == sorted(a.start for a in spans)
        assert {a.concept for a in spans} == set(dish.concepts)


def test_unshuffled_explicit_positions(tiny_lm):
    dish = Dish(concepts=("order", "person"), event="x", positions=(2, 9), shuffle=False)
    spans = layout_samples(dish, ids_for(tiny_lm.tokenizer, dish), 16, 2, seed=0)
    assert [(a.concept, a.start) for a in spans[0]] == [("order", 2), ("person", 9)]
    assert spans[0] == spans[1]


@pytest.mark.parametrize(
    "concepts,positions,canvas,culprit,reason",
    [
        (("order", "person"), (3, 3), 16, "person", "overlaps"),
        (("order", "person"), (2, 16), 16, "person", "outside"),
        (("order", "person"), (-1, 5), 16, "order", "outside"),
        (("order inventory person order inventory person", "person"), None, 6, None, "anchor tokens"),
    ],
)
def test_bad_layouts_name_the_concept(tiny_lm, concepts, positions, canvas, culprit, reason):
    dish = Dish(concepts=concepts, event="x", positions=positions, shuffle=False)
    ids = ids_for(tiny_lm.tokenizer, dish)
    with pytest.raises(LayoutError) as err:
        layout_samples(dish, ids, canvas, 1, seed=0)
    assert reason in err.value.reason
    assert err.value.concept in concepts
    if culprit:
        assert err.value.concept == culprit
    assert repr(err.value.concept) in str(err.value)


@pytest.mark.parametrize(
    "concepts,culprit,reason",
    [(("order", ""), "", "empty"), (("order", "Order"), "Order", "duplicate"), ((" order",), " order", "whitespace")],
)
def test_bad_concepts(concepts, culprit, reason):
    with pytest.raises(LayoutError) as err:
        Dish(concepts=concepts, event="x")
    assert err.value.concept == culprit and reason in err.value.reason


def test_template_placeholders():
    dish = Dish(concepts=("order", "person"), event="A person orders.", template="{event} | {concepts}")
    assert dish.prompt_text() == "A person orders. | order, person"
    with pytest.raises(ValueError, match="template"):
        Dish(concepts=("a",), event="e", template="{nope}").prompt_text()


def test_plain_prompt_starts_with_bos(tiny_lm):
    enc = encode_prompt(tiny_lm.tokenizer, "hello")
    assert enc.ids[0] == tiny_lm.tokenizer.bos_token_id
    assert not enc.chat_template and enc.canvas_prefix_ids == ()


def test_plain_prompt_is_bos_then_the_text_tokens(tiny_lm):
    tok = tiny_lm.tokenizer
    enc = encode_prompt(tok, "The customer placed an order")
    assert list(enc.ids) == [tok.bos_token_id, *tok.encode("The customer placed an order", add_special_tokens=False)]
    assert enc.text == "The customer placed an order"


def test_shuffles_put_every_pair_of_concepts_side_by_side_somewhere(tiny_lm):
    """The module's promise: across samples every pair becomes adjacent in canvas order, and every
    concept takes every slot. (A cyclic rotation of the order would never make a-c or b-d adjacent.)"""
    concepts = ("order", "inventory", "person", "customer")
    dish = Dish(concepts=concepts, event="x")
    layouts = layout_samples(dish, ids_for(tiny_lm.tokenizer, dish), 16, 24, seed=0)
    adjacent = set()
    for spans in layouts:
        names = [a.concept for a in spans]
        adjacent |= {frozenset(pair) for pair in zip(names, names[1:])}
    assert adjacent == {frozenset((a, b)) for i, a in enumerate(concepts) for b in concepts[i + 1 :]}
    for slot in range(4):
        assert {spans[slot].concept for spans in layouts} == set(concepts), f"slot {slot}"


def test_explicit_positions_are_shuffled_over_the_same_slots(tiny_lm):
    dish = Dish(concepts=("order", "person"), event="x", positions=(3, 10), shuffle=True)
    layouts = layout_samples(dish, ids_for(tiny_lm.tokenizer, dish), 16, 10, seed=1)
    assert all([a.start for a in spans] == [3, 10] for spans in layouts)
    assert {spans[0].concept for spans in layouts} == {"order", "person"}


def test_an_anchor_on_the_pinned_prefix_is_rejected(tiny_lm):
    # positions 0..2 hold the thought block (first_free=3): an anchor at 1 overlaps it
    dish = Dish(concepts=("order", "person"), event="x", positions=(1, 9), shuffle=False)
    with pytest.raises(LayoutError) as err:
        layout_samples(dish, ids_for(tiny_lm.tokenizer, dish), 16, 1, seed=0, first_free=3)
    assert err.value.concept == "order" and "outside the free canvas 3..15" in err.value.reason
    # the same positions are fine without a prefix
    assert [a.start for a in layout_samples(dish, ids_for(tiny_lm.tokenizer, dish), 16, 1, seed=0)[0]] == [1, 9]
