"""Token text and concept colours, shared by the UI and the API's replay routes (no Gradio): the text
of single token ids and which ids are special or end the turn (:class:`TokenText`), and the one
palette every view of a dish colours its concepts with (:func:`concept_colors`: the canvas chips,
the heatmap boxes, the highlighted text, the trajectory viewer, its figures and animation)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
#: Tokens that end the model's turn, where the tokenizer has them (besides its eos token).
END_OF_TURN_TOKENS = ("<end_of_turn>", "<turn|>", "<|turn_end|>", "<eot>", "<|eot_id|>", "<|im_end|>", "<|end|>")
_SPECIAL_TEXT = re.compile(r"^<\|?[A-Za-z_][\w]*\|?>$")


def concept_colors(concepts: Sequence[str]) -> dict[str, str]:
    """A colour per concept, assigned in sorted order so every view of a dish agrees."""
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(sorted(set(concepts)))}


class TokenText:
    """The text of single token ids (cached), for hovers and the highlighted final text; a callable
    ``id → str`` as :func:`petri.study.figures.plots.token_texts` takes it. Also knows which ids are special
    tokens (``<eos>``, ``<pad>``, ``<|channel>`` …: never shown in the answer) and which end the turn."""

    def __init__(self, tokenizer):
        self._decode = lru_cache(maxsize=65536)(lambda i: tokenizer.decode([i]) if i >= 0 else "")
        self.special_ids = {int(i) for i in getattr(tokenizer, "all_special_ids", ()) or ()}
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        self.end_ids = {int(vocab[t]) for t in END_OF_TURN_TOKENS if t in vocab}
        if getattr(tokenizer, "eos_token_id", None) is not None:
            self.end_ids.add(int(tokenizer.eos_token_id))

    def is_special(self, token_id: int) -> bool:
        """A special / control token: a tokenizer special id or a ``<name>`` / ``<|name|>`` token."""
        token_id = int(token_id)
        return token_id in self.special_ids or token_id in self.end_ids or bool(_SPECIAL_TEXT.match(self(token_id)))

    def ends_turn(self, token_id: int) -> bool:
        return int(token_id) in self.end_ids

    def __call__(self, token_id: int) -> str:
        return self._decode(int(token_id))
