"""Tests that kill mutants of petri/core/dish.py which survived tests/core/test_dish.py and
tests/engine/test_chat_path.py (experiments/mutation/REPORT.md lists them). Layouts and messages are
worked out by hand in the comments."""

import numpy as np
import pytest
from tokenizers import processors

from petri.core.dish import (
    THOUGHT_CHANNEL,
    Dish,
    LayoutError,
    check_spans,
    concept_token_ids,
    encode_prompt,
    layout_samples,
)
from petri.core.trajectory import AnchorSpan
from petri.engine.torch.tiny import build_tiny_tokenizer


def test_anchors_may_touch_each_other_and_both_canvas_ends():
    # canvas 0..4: "a" at 0 (the first position, default first_free 0), "b" at 1 touching it,
    # "c" at 3..4 ending on the last position
    spans = [AnchorSpan("a", 0, (5,)), AnchorSpan("b", 1, (6,)), AnchorSpan("c", 3, (7, 8))]
    check_spans(spans, 5)
    check_spans([AnchorSpan("a", 2, (5,))], 5, first_free=2)  # starting on the first free position


def test_layout_errors_say_which_positions():
    # "a" covers 3..5 but the free canvas is 1..4
    with pytest.raises(LayoutError) as err:
        check_spans([AnchorSpan("a", 3, (5, 6, 7))], 5, first_free=1)
    assert (err.value.concept, err.value.reason) == ("a", "occupies positions 3..5, outside the free canvas 1..4")
    # "b" starts at 2, inside "a" (0..2)
    with pytest.raises(LayoutError) as err:
        check_spans([AnchorSpan("a", 0, (1, 2, 3)), AnchorSpan("b", 2, (4,))], 5)
    assert (err.value.concept, err.value.reason) == ("b", "overlaps 'a' (positions 0..2)")


class _SilentTokenizer:
    """A tokenizer stand-in that turns every text into no tokens."""

    def encode(self, text, add_special_tokens=True):
        return []


def test_a_concept_without_tokens_is_a_layout_error():
    with pytest.raises(LayoutError) as err:
        concept_token_ids(_SilentTokenizer(), "x")
    assert (err.value.concept, err.value.reason) == ("x", "tokenizes to no tokens")


@pytest.fixture(scope="module")
def bos_tokenizer():
    """The tiny tokenizer, but adding <bos> whenever special tokens are asked for (as Gemma's does)."""
    tok = build_tiny_tokenizer()
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tok.bos_token_id)]
    )
    return tok


def _plain_ids(tok, text):
    return tuple(tok.backend_tokenizer.encode(text, add_special_tokens=False).ids)


def test_concepts_and_plain_prompts_carry_no_added_special_tokens(bos_tokenizer):
    tok = bos_tokenizer
    assert tok.encode("x")[0] == tok.bos_token_id  # the fixture does add <bos> by default
    assert concept_token_ids(tok, "order") == _plain_ids(tok, " order")
    enc = encode_prompt(tok, "The customer placed an order")
    # exactly one <bos>, put there by encode_prompt, then the text's own tokens
    assert enc.ids == (tok.bos_token_id, *_plain_ids(tok, "The customer placed an order"))
    assert enc.text == "The customer placed an order" and not enc.chat_template


def test_the_thought_block_prefix_carries_no_added_special_tokens(bos_tokenizer):
    tok = build_tiny_tokenizer()
    tok.backend_tokenizer.post_processor = bos_tokenizer.backend_tokenizer.post_processor
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    enc = encode_prompt(tok, "hello")
    assert enc.chat_template and enc.canvas_prefix_ids == _plain_ids(tok, THOUGHT_CHANNEL)


def test_layout_reports_the_longest_concept_when_the_canvas_is_too_small():
    # 1 + 3 = 4 anchor tokens on a 3-position canvas; "aa" (3 tokens) is the one to blame
    dish = Dish(("zz", "aa"), "e")
    with pytest.raises(LayoutError) as err:
        layout_samples(dish, {"zz": (1,), "aa": (2, 3, 4)}, 3, 1, 0)
    assert err.value.concept == "aa"


def test_layout_room_excludes_the_pinned_prefix():
    dish = Dish(("a", "b"), "e", shuffle=False)
    ids = {"a": (1, 2), "b": (3,)}
    # canvas 4 with 2 prefix positions: 2 free positions for 3 anchor tokens
    with pytest.raises(LayoutError, match="need 3 anchor tokens but the canvas has 2 free positions"):
        layout_samples(dish, ids, 4, 1, 0, first_free=2)
    # canvas 5: exactly 3 free positions (2..4), no gaps: "a" at 2..3, "b" at 4
    assert layout_samples(dish, ids, 5, 1, 0, first_free=2) == [
        [AnchorSpan("a", 2, (1, 2)), AnchorSpan("b", 4, (3,))]
    ]


def test_explicit_positions_are_checked_against_the_prefix():
    dish = Dish(("a",), "e", positions=(0,), shuffle=False)
    # position 0 is fine on a bare canvas (first_free defaults to 0) ...
    assert layout_samples(dish, {"a": (5,)}, 4, 1, 0) == [[AnchorSpan("a", 0, (5,))]]
    # ... but not where positions 0..1 hold the pinned prefix
    with pytest.raises(LayoutError) as err:
        layout_samples(dish, {"a": (5,)}, 4, 1, 0, first_free=2)
    assert err.value.concept == "a"


def test_dish_normalises_concepts_and_positions():
    dish = Dish(["a", "b"], "e", positions=[np.int64(1), 3.0])
    assert type(dish.concepts) is tuple and dish.concepts == ("a", "b")
    assert type(dish.positions) is tuple and dish.positions == (1, 3)
    assert all(type(p) is int for p in dish.positions)
