"""Training windows for a petri subject: (prompt, answer) pairs laid out exactly as the sampler reads
them, beside windows of plain prose.

A pair is one document of the packed stream: ``<bos>`` + the prompt's tokens (what
``petri.core.dish.encode_prompt`` gives a tokenizer without a chat template), then the answer's first
``canvas`` tokens; an answer shorter than the canvas is followed by ``<eos>`` and ``<pad>`` up to
the canvas. A batch of pairs takes one prompt length (its prefix), so nothing inside a batch is
padded: the trainers' model call is the one they make for windows of the packed corpus. Prose
documents (``<eos>`` after each) follow the pairs in the same stream and are drawn as windows with
a random prefix length, as ``train_tiny.py`` draws them.

Files (``experiments/subject_corpus.py`` writes them): ``train.jsonl`` and ``heldout.jsonl``, one
record per line, ``{"kind": "pair", "prompt": ..., "text": ...}`` or ``{"kind": "prose", "text": ...}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def sample_starts(rng: np.random.Generator, n: int, window: int, stream_len: int, doc_starts: np.ndarray,
                  doc_start_frac: float) -> np.ndarray:
    """Window start indices in a packed stream of ``stream_len`` tokens: a document start (one of
    ``doc_starts``) with probability ``doc_start_frac``, else anywhere a window of ``window`` fits."""
    last = stream_len - window
    valid_docs = doc_starts[doc_starts <= last]
    anywhere = rng.integers(0, last + 1, size=n)
    at_doc = valid_docs[rng.integers(0, len(valid_docs), size=n)]
    return np.where(rng.random(n) < doc_start_frac, at_doc, anywhere)


@dataclass(frozen=True)
class SubjectWindows:
    """``stream`` (N,) int64: the pair documents, then the prose documents. ``pair_starts`` maps a
    prompt length P to the (k,) start index of every pair document whose prompt is P tokens long
    (the canvas follows at start + P). ``prose_region`` is (first, end) of the prose in ``stream``;
    ``prose_starts`` (m,) the start of every prose document."""

    stream: np.ndarray
    pair_starts: dict[int, np.ndarray]
    prose_region: tuple[int, int]
    prose_starts: np.ndarray
    canvas: int

    @property
    def pairs(self) -> int:
        return int(sum(len(v) for v in self.pair_starts.values()))

    def draw(self, rng: np.random.Generator, batch_size: int, *, prose_share: float, min_prefix: int,
             max_prefix: int, doc_start_frac: float) -> tuple[int, np.ndarray]:
        """One batch: (prefix length P, (batch_size,) window starts); window = stream[start : start + P + canvas]."""
        first, end = self.prose_region
        prose_fits = len(self.prose_starts) > 0 and end - first > max_prefix + self.canvas
        if self.pairs and (not prose_fits or rng.random() >= prose_share):
            lengths = np.array(sorted(self.pair_starts))
            sizes = np.array([len(self.pair_starts[p]) for p in lengths], dtype=np.float64)
            p = int(rng.choice(lengths, p=sizes / sizes.sum()))
            return p, rng.choice(self.pair_starts[p], size=batch_size)
        p = int(rng.integers(min_prefix, max_prefix + 1))
        return p, first + sample_starts(rng, batch_size, p + self.canvas, end - first, self.prose_starts - first,
                                        doc_start_frac)

    def heldout_batches(self, n: int, seed: int) -> list[tuple[int, np.ndarray]]:
        """Up to ``n`` pair windows chosen with ``seed``, grouped by prompt length: [(P, starts), ...]."""
        rng = np.random.default_rng(seed)
        everything = [(p, s) for p, starts in sorted(self.pair_starts.items()) for s in starts]
        chosen = sorted(rng.permutation(len(everything))[:n])
        groups: dict[int, list[int]] = {}
        for i in chosen:
            p, s = everything[i]
            groups.setdefault(p, []).append(int(s))
        return [(p, np.array(v, dtype=np.int64)) for p, v in sorted(groups.items())]


def read_records(path: Path, max_docs: int | None = None) -> list[dict]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return records[:max_docs] if max_docs else records


def build_windows(tok, records: list[dict], special: dict, canvas: int, max_prompt: int | None = None) -> SubjectWindows:
    """Pack ``records`` (see the module docstring) with a ``tokenizers.Tokenizer``; ``special``
    holds the ids of pad, eos and bos. A pair whose prompt (with ``<bos>``) is longer than
    ``max_prompt`` tokens is left out (the trainers' longest prefix)."""
    pairs = [r for r in records if r["kind"] == "pair"]
    prose = [r for r in records if r["kind"] == "prose"]
    chunks, pair_starts, pos = [], {}, 0
    prompts = tok.encode_batch([r["prompt"] for r in pairs], add_special_tokens=False)
    answers = tok.encode_batch([r["text"] for r in pairs], add_special_tokens=False)
    for prompt, answer in zip(prompts, answers):
        if max_prompt is not None and len(prompt.ids) + 1 > max_prompt:
            continue
        body = answer.ids[:canvas]
        if len(body) < canvas:
            body = body + [special["eos"]] + [special["pad"]] * (canvas - len(body) - 1)
        doc = [special["bos"], *prompt.ids, *body]
        pair_starts.setdefault(len(prompt.ids) + 1, []).append(pos)
        chunks.append(doc)
        pos += len(doc)
    first = pos
    prose_starts = []
    for enc in tok.encode_batch([r["text"] for r in prose], add_special_tokens=False):
        prose_starts.append(pos)
        chunks.append([*enc.ids, special["eos"]])
        pos += len(enc.ids) + 1
    stream = np.fromiter((t for c in chunks for t in c), dtype=np.int64, count=pos)
    return SubjectWindows(stream, {p: np.array(v, dtype=np.int64) for p, v in pair_starts.items()},
                          (first, pos), np.array(prose_starts, dtype=np.int64), canvas)


def load_subject(folder: Path, tok, special: dict, canvas: int, max_prompt: int,
                 max_docs: int | None = None) -> tuple[SubjectWindows, SubjectWindows]:
    """The training and held-out windows of the subject corpus in ``folder`` (what both trainers read)."""
    return tuple(build_windows(tok, read_records(folder / name, max_docs), special, canvas, max_prompt=max_prompt)
                 for name in ("train.jsonl", "heldout.jsonl"))


def is_subject_data(folder: Path) -> bool:
    """Whether ``folder`` holds a subject corpus (``train.jsonl``) rather than ``corpus.txt``."""
    return (folder / "train.jsonl").exists()
