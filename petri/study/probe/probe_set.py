"""Labelled sets for the probe's evaluation (issue 50): inputs with the gold answer per question.

Two formats, both UTF-8:

- **JSONL**: the first line is the header, ``{"probe_set": NAME, "frame": ..., "instructions": ...,
  "questions": [...]}`` (questions in the request's JSON shape, :func:`petri.core.probe.request_from_dict`);
  every further line is an item, ``{"id": ..., "prompt": ..., "gold": {question: alternative},
  "frame": ...}`` (``frame`` optional: the header's by default; extra keys such as ``"group"`` are
  kept in ``LabelledItem.extra``).
- **CSV**: columns ``id``, ``prompt``, optional ``frame``, and one column per question holding its
  gold answer. The questions come from a header file beside it (``<stem>.json``, the JSONL
  header's shape) when there is one; otherwise each question column is a question whose
  alternatives are its distinct values (in order of first appearance) and the frame is one line per
  question, ``"<name>: {{<name>}}"``.

Limits (:mod:`petri.core.probe`): at most ``MAX_ITEMS`` items, ``MAX_QUESTIONS`` questions and
``MAX_ALTERNATIVES`` alternatives each. Every refusal is a :class:`ProbeInputError` naming the field
(``items[3].gold.consistent``, ``questions``, ``file``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from petri.core.probe import MAX_ALTERNATIVES, MAX_ITEMS, MAX_QUESTIONS, MAX_TEXT_CHARS, ProbeInputError, Question, question_from_dict

#: The largest labelled-set file read (bytes).
MAX_FILE_BYTES = 20_000_000


@dataclass(frozen=True)
class LabelledItem:
    """One input: ``prompt`` (the text the questions are about), ``frame`` (``None``: the set's),
    ``gold`` {question name: gold alternative} (a question missing here is read, not scored),
    ``extra`` (other fields of the line, e.g. the event's group)."""

    item_id: str
    prompt: str
    frame: str | None
    gold: dict[str, str]
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LabelledSet:
    name: str
    questions: tuple[Question, ...]
    frame: str
    instructions: str | None
    items: tuple[LabelledItem, ...]

    def header(self) -> dict:
        """The JSONL header line of this set."""
        from petri.core.probe import ProbeRequest, request_to_dict

        request = request_to_dict(ProbeRequest("", self.frame, self.questions, self.instructions))
        head = {"probe_set": self.name, "frame": self.frame, "questions": request["questions"]}
        if self.instructions is not None:
            head["instructions"] = self.instructions
        return head


def _questions(raw, where: str) -> tuple[Question, ...]:
    if not isinstance(raw, list) or not raw:
        raise ProbeInputError(f"{where}questions", "at least one question is needed")
    if len(raw) > MAX_QUESTIONS:
        raise ProbeInputError(f"{where}questions", f"{len(raw)} questions; at most {MAX_QUESTIONS}")
    questions = tuple(question_from_dict(q, i) for i, q in enumerate(raw))
    for i, q in enumerate(questions):
        if len(q.alternatives) > MAX_ALTERNATIVES:
            raise ProbeInputError(f"questions[{i}].alternatives",
                                  f"{len(q.alternatives)} alternatives; at most {MAX_ALTERNATIVES}")
    return questions


def _item(raw: Mapping, index: int) -> LabelledItem:
    """One line of a set as an item, its types checked (its gold answers are checked against the
    questions by :func:`labelled_set`)."""
    where = f"items[{index}]"
    item_id, prompt = raw.get("id", str(index)), raw.get("prompt", raw.get("input"))
    if not isinstance(prompt, str):
        raise ProbeInputError(f"{where}.prompt", "is missing or empty")
    if len(prompt) > MAX_TEXT_CHARS:
        raise ProbeInputError(f"{where}.prompt", f"is {len(prompt)} characters; at most {MAX_TEXT_CHARS}")
    frame = raw.get("frame") or None
    if frame is not None and not isinstance(frame, str):
        raise ProbeInputError(f"{where}.frame", "must be a string")
    gold = raw.get("gold", {})
    if not isinstance(gold, Mapping):
        raise ProbeInputError(f"{where}.gold", "must map question names to alternatives")
    extra = {k: v for k, v in raw.items() if k not in ("id", "prompt", "input", "frame", "gold")}
    return LabelledItem(str(item_id), prompt, frame, dict(gold), extra)


def _gold(item: LabelledItem, index: int, by_name: Mapping[str, Question]) -> dict[str, str]:
    """``item``'s gold answers, each naming a question and among its alternatives (a blank answer
    is left out: the question is read, not scored)."""
    clean = {}
    for name, answer in item.gold.items():
        if name not in by_name:
            raise ProbeInputError(f"items[{index}].gold.{name}", f"no question is named {name!r}")
        if answer in (None, ""):
            continue
        if answer not in by_name[name].alternatives:
            raise ProbeInputError(f"items[{index}].gold.{name}", f"gold answer {answer!r} is not among the "
                                  f"alternatives ({', '.join(by_name[name].alternatives[:10])})")
        clean[name] = answer
    return clean


def labelled_set(name: str, questions: tuple[Question, ...], frame: str, instructions: str | None,
                 items: Sequence[LabelledItem]) -> LabelledSet:
    """A set from its parts, their types already checked (by a file's parser here, or by the HTTP
    edge's pydantic models), checked as a set: the question names distinct, 1 to ``MAX_ITEMS``
    items with distinct ids and non-blank prompts, every gold answer naming a question and among its alternatives (a
    blank one is dropped). Raises :class:`ProbeInputError` naming the field."""
    if len({q.name for q in questions}) != len(questions):
        raise ProbeInputError("questions", "question names repeat")
    if not items:
        raise ProbeInputError("items", "the set has no item")
    if len(items) > MAX_ITEMS:
        raise ProbeInputError("items", f"{len(items)} items; at most {MAX_ITEMS}")
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not item.prompt.strip():
            raise ProbeInputError(f"items[{i}].prompt", "is missing or empty")
        if item.item_id in seen:
            raise ProbeInputError(f"items[{i}].id", f"duplicate id {item.item_id!r}")
        seen.add(item.item_id)
    by_name = {q.name: q for q in questions}
    checked = tuple(replace(item, gold=_gold(item, i, by_name)) for i, item in enumerate(items))
    return LabelledSet(name, questions, frame, instructions, checked)


def _header(raw, where: str = "") -> tuple[str, tuple[Question, ...], str, str | None]:
    if not isinstance(raw, Mapping):
        raise ProbeInputError(f"{where}header", "must be a JSON object with frame and questions")
    questions = _questions(raw.get("questions"), where)
    frame = raw.get("frame") or "\n".join(f"{q.text or q.name}: {{{{{q.slot}}}}}" for q in questions)
    instructions = raw.get("instructions")
    if not isinstance(frame, str) or (instructions is not None and not isinstance(instructions, str)):
        raise ProbeInputError(f"{where}header", "frame and instructions must be strings")
    return str(raw.get("probe_set", "")), questions, frame, instructions


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise ProbeInputError("file", f"{path} is not a file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ProbeInputError("file", f"{path} is {path.stat().st_size} bytes; at most {MAX_FILE_BYTES}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ProbeInputError("file", f"{path} is not UTF-8 ({err})") from None


def parse_jsonl(text: str, name: str = "") -> LabelledSet:
    """A JSONL labelled set's text (see the module docstring)."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ProbeInputError("file", "is empty")
    rows = []
    for n, line in lines:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ProbeInputError(f"line {n}", f"is not JSON ({err.msg})") from None
    set_name, questions, frame, instructions = _header(rows[0])
    items = [_item(raw if isinstance(raw, Mapping) else {}, i) for i, raw in enumerate(rows[1:])]
    return labelled_set(set_name or name, questions, frame, instructions, items)


def parse_csv(text: str, header: Mapping | None = None, name: str = "") -> LabelledSet:
    """A CSV labelled set's text, with its header object when there is one (module docstring)."""
    reader = csv.DictReader(io.StringIO(text))
    columns = list(reader.fieldnames or [])
    if "prompt" not in columns and "input" not in columns:
        raise ProbeInputError("columns", "a CSV set needs a prompt (or input) column")
    rows = list(reader)
    if len(rows) > MAX_ITEMS:
        raise ProbeInputError("items", f"{len(rows)} items; at most {MAX_ITEMS}")
    answer_columns = [c for c in columns if c not in ("id", "prompt", "input", "frame")]
    if header is None:
        raw_questions = [{"name": c, "alternatives": list(dict.fromkeys(r[c] for r in rows if r[c]))}
                         for c in answer_columns]
        header = {"questions": raw_questions}
    set_name, questions, frame, instructions = _header(header)
    names = {q.name for q in questions}
    items = [_item({"id": r.get("id") or str(i), "prompt": r.get("prompt", r.get("input")), "frame": r.get("frame"),
                    "gold": {c: r[c] for c in answer_columns if c in names}}, i)
             for i, r in enumerate(rows)]
    return labelled_set(set_name or name, questions, frame, instructions, items)


def load_labelled_set(path: str | Path) -> LabelledSet:
    """A labelled set from a ``.jsonl`` or ``.csv`` file (a CSV's header from ``<stem>.json`` beside
    it when present). Raises :class:`ProbeInputError` naming the field."""
    path = Path(path)
    text = _read_text(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        return parse_jsonl(text, path.stem)
    if path.suffix.lower() == ".csv":
        sidecar = path.with_suffix(".json")
        header = None
        if sidecar.is_file():
            try:
                header = json.loads(_read_text(sidecar))
            except json.JSONDecodeError as err:
                raise ProbeInputError("header", f"{sidecar} is not JSON ({err.msg})") from None
        return parse_csv(text, header, path.stem)
    raise ProbeInputError("file", f"{path.name}: a labelled set is .jsonl or .csv")


def labelled_set_lines(labelled: LabelledSet) -> list[str]:
    """The set as JSONL lines (header first), what :func:`parse_jsonl` reads back."""
    lines = [json.dumps(labelled.header(), ensure_ascii=False)]
    for item in labelled.items:
        entry = {"id": item.item_id, "prompt": item.prompt, "gold": item.gold, **item.extra}
        if item.frame is not None:
            entry["frame"] = item.frame
        lines.append(json.dumps(entry, ensure_ascii=False))
    return lines
