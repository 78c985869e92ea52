"""Measure petri's subjects side by side, in one run, on the measures of issue 47.

For every model named (an embedded model's name or a checkpoint folder) and the same ``--seeds``
dishes built from held-out events (``heldout_events.jsonl`` of ``experiments/subject_corpus.py``;
seed i takes event i mod n, a prompt template and 3 of the event domain's concept words, all drawn
from i), at the model's default settings:

- **teacher NLL**: the teacher's mean negative log-likelihood (nats per teacher token) of the final
  canvas text, read as its answer to the same prompt through its chat template. The reference line is
  the teacher's own answers to the same prompts (sampled here at the corpus recipe's settings and
  cut to the student's canvas length in words);
- **dictionary words**: the share of the final texts' words (letters and apostrophes, case-folded)
  found in an English word list (Debian ``wamerican``: ``/usr/share/dict/words``); a word with a
  possessive ``'s`` counts by its stem;
- **anchors intact**: the share of pinned concepts found as whole words in the final text
  (``petri.measure.metrics.anchor_intact_in_text``);
- **flips per free position** and **steps to stop** (mean over samples);
- **CPU seconds for a 12-sample seed** (the study's dish, median of ``--repeats`` after one warm-up);
- **asset size** (the checkpoint folder's bytes).

    apt-get install -y wamerican
    python experiments/subject_bench.py --teacher PATH/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --events data/subject/heldout_events.jsonl --models petri-tiny petri-small --out experiments/results/subject_bench.json

The figures of the last run are in the model cards (``assets/*/README.md``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import teacher_prompts as P  # noqa: E402
from teacher_corpus import chat_ids, load_teacher, sample  # noqa: E402

from petri.core.dish import Dish  # noqa: E402
from petri.measure.metrics import anchor_intact_in_text, flip_counts  # noqa: E402

WORD_LIST = Path("/usr/share/dict/words")
STUDY_EVENT = "Only 90 units are in stock, but the customer ordered 120."
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")


# ----------------------------------------------------------------------------------- the dishes
def bench_dishes(events: list[dict], n: int) -> list[Dish]:
    """Dish i: event i mod len(events), a template and 3 concept words of its domain, drawn from i."""
    by_name = {d["name"]: d for d in P.DOMAINS}
    dishes = []
    for i in range(n):
        event = events[i % len(events)]
        rng = random.Random(f"bench-{i}")
        concepts = tuple(rng.sample(list(by_name[event["domain"]]["concepts"]), 3))
        _, template = rng.choice(P.TEMPLATES)
        dishes.append(Dish(concepts, event["text"], template))
    return dishes


# ------------------------------------------------------------------------------------- measures
def load_words(path: Path = WORD_LIST) -> frozenset[str]:
    if not path.exists():
        sys.exit(f"missing {path}: apt-get install -y wamerican")
    return frozenset(w.strip().casefold() for w in path.read_text(encoding="utf-8", errors="ignore").splitlines())


def dictionary_share(texts: list[str], words: frozenset[str]) -> tuple[int, int]:
    """(words found in ``words``, words) over ``texts``; a word is a run of letters with inner
    apostrophes, case-folded; ``x's`` counts as ``x``."""
    found = total = 0
    for text in texts:
        for word in _WORD.findall(text):
            w = word.casefold()
            total += 1
            found += w in words or (w.endswith("'s") and w[:-2] in words)
    return found, total


@torch.no_grad()
def teacher_nll(model, tok, prompts: list[str], answers: list[str], batch_size: int = 16) -> tuple[float, int]:
    """(summed NLL in nats, tokens) of each answer's tokens after its prompt in the teacher's chat
    template: the answer is scored as the assistant's reply, end-of-turn token excluded."""
    total, count = 0.0, 0
    rows = []
    for prompt, answer in zip(prompts, answers):
        head = chat_ids(tok, prompt)
        body = [int(i) for i in tok.encode(answer.strip(), add_special_tokens=False)]
        if body:
            rows.append((head, body))
    device = next(model.parameters()).device
    for i in range(0, len(rows), batch_size):
        chunk = rows[i: i + batch_size]
        width = max(len(h) + len(b) for h, b in chunk)
        ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        target = torch.full_like(ids, -100)
        for r, (h, b) in enumerate(chunk):
            seq = h + b
            ids[r, : len(seq)] = torch.tensor(seq)
            mask[r, : len(seq)] = 1
            target[r, len(h): len(seq)] = torch.tensor(b)
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        tgt = target[:, 1:].to(device)
        keep = tgt != -100
        picked = logp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        total += float(-(picked * keep).sum())
        count += int(keep.sum())
    return total, count


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ------------------------------------------------------------------------------------------ runs
def run_model(name: str, dishes: list[Dish], repeats: int) -> dict:
    """Sample every dish once (1 sample, seed i, the model's default settings) and time the 12-sample seed."""
    from petri.core.paths import checkpoint_source
    from petri.engine.seeding import seed_dish
    from petri.engine.torch.model import load_model

    lm = load_model(name, device="cpu")
    settings = lm.default_settings()
    texts, intact, flips, steps, concepts_total = [], 0, [], [], 0
    for i, dish in enumerate(dishes):
        traj = seed_dish(lm, dish, 1, settings, seed=i)
        texts.append(before_end(traj.final_texts[0], lm.tokenizer))
        # anchors are read on the whole canvas, as petri's samples table reads them (an anchor after an
        # end mark is still on the canvas)
        intact += sum(anchor_intact_in_text(traj.final_texts[0], c) for c in dish.concepts)
        concepts_total += len(dish.concepts)
        counts = flip_counts(traj.argmax, traj.steps, traj.anchor_mask)
        flips.append(float(counts[0][~traj.anchor_mask[0]].mean()))
        steps.append(int(traj.steps[0]))
    study = Dish(("order", "inventory", "person"), STUDY_EVENT)
    seed_dish(lm, study, 12, settings, seed=0)  # warm-up
    seconds = []
    for r in range(repeats):
        started = time.perf_counter()
        seed_dish(lm, study, 12, settings, seed=r + 1)
        seconds.append(time.perf_counter() - started)
    folder = Path(checkpoint_source(name))
    return {
        "model": name, "family": lm.family, "settings": settings.to_dict(), "texts": texts,
        "anchors_intact": intact / concepts_total, "flips_per_free_position": float(np.mean(flips)),
        "steps_mean": float(np.mean(steps)), "steps_max": settings.max_denoising_steps,
        "seed12_cpu_seconds": statistics.median(seconds), "seed12_cpu_seconds_all": seconds,
        "asset_bytes": folder_bytes(folder) if folder.is_dir() else None,
    }


def before_end(text: str, tokenizer) -> str:
    """The answer a canvas holds, as the teacher reads it: end-of-sequence / padding marks at its
    start dropped (petri-tiny's canvases open with ``<eos>``, the separator of its dictionary
    entries), then the text before the next one (a canvas that ends early decodes as
    ``...<eos><pad><pad>``; the teacher must not score those marks as words)."""
    marks = [m for m in (tokenizer.eos_token, tokenizer.pad_token) if m]
    text = text.lstrip()
    while any(text.startswith(m) for m in marks):
        text = text[len(next(m for m in marks if text.startswith(m))):].lstrip()
    ends = [text.index(m) for m in marks if m in text]
    return (text[: min(ends)] if ends else text).rstrip()


def cut_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", type=Path, required=True, help="the teacher (.gguf or a transformers folder)")
    ap.add_argument("--events", type=Path, required=True, help="heldout_events.jsonl")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    events = [json.loads(line) for line in args.events.read_text().splitlines() if line.strip()]
    dishes = bench_dishes(events, args.seeds)
    prompts = [d.prompt_text() for d in dishes]
    words = load_words()
    results = {"seeds": args.seeds, "events": len(events), "threads": args.threads, "models": {}}
    runs = [run_model(name, dishes, args.repeats) for name in args.models]
    teacher, tok = load_teacher(args.teacher, torch.device("cpu"))
    canvas_words = int(np.median([len(t.split()) for r in runs for t in r["texts"]]))
    own = []
    for i in range(0, len(prompts), 16):
        texts, _ = sample(teacher, tok, [chat_ids(tok, p) for p in prompts[i: i + 16]], seed=i, max_new_tokens=110,
                          temperature=0.7, top_p=0.95)
        own += [cut_words(t, canvas_words) for t in texts]
    for name, texts in [("teacher (own answers)", own)] + [(r["model"], r["texts"]) for r in runs]:
        nll, tokens = teacher_nll(teacher, tok, prompts, texts)
        found, total = dictionary_share(texts, words)
        entry = next((r for r in runs if r["model"] == name), {"model": name, "texts": texts})
        entry.update(teacher_nll=nll / max(tokens, 1), teacher_tokens=tokens, dictionary_words=found / max(total, 1),
                     words=total)
        entry["examples"] = texts[:3]
        results["models"][name] = {k: v for k, v in entry.items() if k != "texts"}
        print(json.dumps({k: v for k, v in results["models"][name].items() if k not in ("settings", "examples")}),
              flush=True)
    results["canvas_words_for_reference"] = canvas_words
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
