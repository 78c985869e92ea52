"""Study files: concepts, events with group labels, prompt templates (JSON, validated on load).

A study file describes one experiment: which concepts are pinned on the canvas, which events the
model reads (each with a group label such as ``benign`` / ``contradictory`` / ``control``), which
prompt templates wrap them, and which two groups the headline test compares. The schema is
documented in ``assets/studies/README.md``; :func:`load_study` checks all of it *before* any
sampling and raises :class:`StudyError` naming the file, the entry and the reason.

This module never imports torch; the runner (``petri.study.execution.runner.run_study``, re-exported here) does,
lazily.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from petri.core.dish import LayoutError, template_problem, validate_concepts
from petri.measure.nouns import UnsupportedLanguage, analyser_for, analyser_problem
from petri.study.checks import ID_PATTERN, Checker, StudyError  # noqa: F401 (ID_PATTERN, StudyError: re-exported)
from petri.study.conditions import Condition, Variant, parse_conditions, parse_event_conditions
from petri.study.transforms import apply_transform

SCHEMA_VERSION = 1

_TOP_KEYS = {"schema", "id", "title", "language", "nouns", "description", "concepts", "groups", "comparison", "templates", "events",
             "conditions"}
_REQUIRED_TOP = ("id", "title", "language", "concepts", "templates", "events")
_TEMPLATE_KEYS = {"id", "text"}
NOUNS_CHOICES = ("analyser", "words")
"""``nouns``: the language's noun analyser (default) or the labelled word-level fallback."""
_EVENT_KEYS = {"id", "group", "text", "concepts", "note", "conditions"}
_COMPARISON_KEYS = {"groups", "show"}


@dataclass(frozen=True)
class Template:
    """A prompt template; ``text`` uses ``{event}`` and optionally ``{concepts}``."""

    id: str
    text: str


@dataclass(frozen=True)
class StudyEvent:
    """One event the model reads. ``concepts`` (a subset of the study's) or ``None`` for all."""

    id: str
    group: str
    text: str
    concepts: tuple[str, ...] | None = None
    note: str = ""
    variants: tuple[tuple[str, Variant], ...] = ()
    """``events[].conditions``: (condition id, what the event changes under it), study condition order."""

    def variant(self, condition_id: str) -> Variant:
        """What this event changes under ``condition_id`` (an empty :class:`Variant` when nothing)."""
        return dict(self.variants).get(condition_id, Variant())


@dataclass(frozen=True)
class Study:
    """A validated study. ``comparison`` is the (reference, comparison) pair of groups of the
    headline test; ``show`` the extra groups shown beside them (e.g. ``control``). A paired study
    (``conditions``, :mod:`petri.study.conditions`) with one group has no group test: ``comparison``
    and ``show`` are then empty."""

    id: str
    title: str
    language: str
    concepts: tuple[str, ...]
    templates: tuple[Template, ...]
    events: tuple[StudyEvent, ...]
    groups: tuple[str, ...]
    comparison: tuple[str, ...]
    show: tuple[str, ...]
    description: str = ""
    nouns: str = "analyser"
    source: str = "<dict>"
    file_sha256: str = ""
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    conditions: tuple[Condition, ...] = ()

    @property
    def paired(self) -> bool:
        """True when every event runs under the study's within-event ``conditions``."""
        return bool(self.conditions)

    @property
    def dose_study(self) -> bool:
        """True when the conditions carry doses (a dose-response study, analysed with a trend test)."""
        return self.paired and self.conditions[0].dose is not None

    def condition(self, condition_id: str) -> Condition:
        for c in self.conditions:
            if c.id == condition_id:
                return c
        raise KeyError(f"condition {condition_id!r} is not in study {self.id!r}; have {[c.id for c in self.conditions]}")

    def condition_text(self, event: StudyEvent, condition_id: str) -> str:
        """The event's text under ``condition_id``: its own text for it, else the event's text
        through the condition's transform (if any)."""
        own = event.variant(condition_id).text
        if own is not None:
            return own
        transform = self.condition(condition_id).transform
        return event.text if transform is None else apply_transform(transform, event.text, event.id)

    def condition_concepts(self, event: StudyEvent, condition_id: str) -> tuple[str, ...]:
        """The concepts pinned for ``event`` under ``condition_id`` (its own list for it, in the order
        given, else :meth:`event_concepts`)."""
        own = event.variant(condition_id).concepts
        return own if own is not None else self.event_concepts(event)

    def slot_concepts(self, event: StudyEvent) -> tuple[str, ...]:
        """Every concept ``event`` pins under any condition (they size its shared slots)."""
        return tuple(dict.fromkeys(c for cond in self.conditions for c in self.condition_concepts(event, cond.id)))

    def noun_method(self) -> str:
        """The :mod:`petri.measure.nouns` method for this study's template sensitivity (from ``language``
        and ``nouns``). Raises :class:`StudyError` on ``language`` when its analyser's packages are
        not installed here, so a run is refused before anything is sampled."""
        method = analyser_for(self.language, words=self.nouns == "words")
        problem = analyser_problem(method)
        if problem is not None:
            raise StudyError(self.source, "language", f"{self.language!r}: {problem}")
        return method

    def event_concepts(self, event: StudyEvent) -> tuple[str, ...]:
        """The concepts pinned for ``event`` (its own subset, or all the study's, in study order)."""
        if event.concepts is None:
            return self.concepts
        return tuple(c for c in self.concepts if c in event.concepts)

    def events_in(self, group: str) -> list[StudyEvent]:
        return [e for e in self.events if e.group == group]

    def template(self, template_id: str) -> Template:
        for t in self.templates:
            if t.id == template_id:
                return t
        raise KeyError(f"template {template_id!r} is not in study {self.id!r}; have {[t.id for t in self.templates]}")

    def select_templates(self, ids: list[str] | tuple[str, ...] | None) -> tuple[Template, ...]:
        """The templates named in ``ids`` (in study order), all when ``None``; unknown ids raise
        :class:`StudyError`."""
        if ids is None:
            return self.templates
        known = {t.id for t in self.templates}
        unknown = [i for i in ids if i not in known]
        if unknown or not ids:
            raise StudyError(self.source, "templates", f"unknown template id(s) {unknown or '(none given)'}; have {sorted(known)}")
        return tuple(t for t in self.templates if t.id in ids)

    def to_dict(self) -> dict[str, Any]:
        """The study as plain data in the file schema (normalised, defaults filled in)."""
        return {
            "schema": SCHEMA_VERSION,
            "id": self.id,
            "title": self.title,
            "language": self.language,
            **({"nouns": self.nouns} if self.nouns != "analyser" else {}),  # keeps older content hashes
            "description": self.description,
            "concepts": list(self.concepts),
            "groups": list(self.groups),
            **({"comparison": {"groups": list(self.comparison), "show": list(self.show)}} if self.comparison else {}),
            **({"conditions": [c.to_dict() for c in self.conditions]} if self.conditions else {}),
            "templates": [{"id": t.id, "text": t.text} for t in self.templates],
            "events": [
                {
                    "id": e.id,
                    "group": e.group,
                    "text": e.text,
                    **({"concepts": list(e.concepts)} if e.concepts is not None else {}),
                    **({"note": e.note} if e.note else {}),
                    **({"conditions": {cid: v.to_dict() for cid, v in e.variants}} if e.variants else {}),
                }
                for e in self.events
            ],
        }

    def content_hash(self) -> str:
        """SHA-256 of the normalised content (not of the file bytes: reformatting keeps it)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- validation


def _event_entry(i: int, raw: Any) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        return f"events[{i}] (id {raw['id']!r})"
    return f"events[{i}]"


def _template_entry(i: int, raw: Any) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        return f"templates[{i}] (id {raw['id']!r})"
    return f"templates[{i}]"


def _check_template_text(check: Checker, entry: str, text: str) -> None:
    problem = template_problem(text)
    if problem is not None:
        raise check.fail(f"{entry}.text", problem)


def study_from_dict(data: Any, source: str = "<dict>", file_sha256: str = "") -> Study:
    """Validate parsed study data; raise :class:`StudyError` (``source``, entry, reason)."""
    check = Checker(source)
    check.keys(data, "top level", _TOP_KEYS, _REQUIRED_TOP)
    if "schema" in data and (type(data["schema"]) is not int or data["schema"] != SCHEMA_VERSION):
        raise check.fail("schema", f"unsupported schema version {data['schema']!r}; this petri reads version {SCHEMA_VERSION}")
    study_id = check.ident(data["id"], "id")
    title = check.text(data["title"], "title")
    language = check.text(data["language"], "language")
    nouns = data.get("nouns", "analyser")
    if nouns not in NOUNS_CHOICES:
        raise check.fail("nouns", f"must be one of {list(NOUNS_CHOICES)}, got {nouns!r}")
    try:
        analyser_for(language, words=nouns == "words")
    except UnsupportedLanguage as err:
        raise check.fail("language", str(err)) from None
    description = check.text(data.get("description", ""), "description", empty_ok=True)

    concepts = check.string_list(data["concepts"], "concepts")
    try:
        validate_concepts(concepts)
    except LayoutError as err:
        raise check.fail(f"concepts ({err.concept!r})", err.reason) from None
    except ValueError as err:
        raise check.fail("concepts", str(err).removeprefix("concepts: ")) from None
    if len(concepts) < 2:
        raise check.fail("concepts", f"at least 2 concepts are needed (instability is measured between two anchors), got {len(concepts)}")

    # templates
    raw_templates = data["templates"]
    if not isinstance(raw_templates, list) or not raw_templates:
        raise check.fail("templates", "must be a non-empty list of {\"id\", \"text\"} objects")
    templates: list = []
    seen_t: dict[str, int] = {}
    for i, raw in enumerate(raw_templates):
        entry = _template_entry(i, raw)
        check.keys(raw, entry, _TEMPLATE_KEYS, ("id", "text"))
        tid = check.ident(raw["id"], f"{entry}.id")
        if tid in seen_t:
            raise check.fail(entry, f"duplicate template id {tid!r} (also templates[{seen_t[tid]}])")
        seen_t[tid] = i
        text = check.text(raw["text"], f"{entry}.text")
        _check_template_text(check, entry, text)
        templates.append(Template(tid, text))

    conditions = parse_conditions(check, data["conditions"]) if "conditions" in data else ()

    # events
    raw_events = data["events"]
    if not isinstance(raw_events, list) or not raw_events:
        raise check.fail("events", "must be a non-empty list of event objects")
    events: list = []
    seen_e: dict[str, int] = {}
    seen_text: dict[str, int] = {}
    for i, raw in enumerate(raw_events):
        entry = _event_entry(i, raw)
        check.keys(raw, entry, _EVENT_KEYS, ("id", "group", "text"))
        eid = check.ident(raw["id"], f"{entry}.id")
        if eid in seen_e:
            raise check.fail(entry, f"duplicate event id {eid!r} (also events[{seen_e[eid]}])")
        seen_e[eid] = i
        group = check.text(raw["group"], f"{entry}.group")
        if group != group.strip():
            raise check.fail(f"{entry}.group", f"{group!r} has leading or trailing whitespace")
        text = check.text(raw["text"], f"{entry}.text")
        key = " ".join(text.split()).casefold()
        if key in seen_text:
            raise check.fail(f"{entry}.text", f"duplicate event text (same as events[{seen_text[key]}])")
        seen_text[key] = i
        sub = None
        if "concepts" in raw:
            sub = check.concept_subset(raw["concepts"], f"{entry}.concepts", concepts)
        note = check.text(raw.get("note", ""), f"{entry}.note", empty_ok=True)
        variants: tuple = ()
        if "conditions" in raw:
            variants = parse_event_conditions(check, entry, raw["conditions"], conditions, concepts,
                                              len(sub) if sub is not None else len(concepts))
        events.append(StudyEvent(eid, group, text, sub, note, variants))

    # groups
    present = list(dict.fromkeys(e.group for e in events))
    if "groups" in data:
        groups = check.string_list(data["groups"], "groups")
        dupes = [g for g, n in Counter(groups).items() if n > 1]
        if dupes:
            raise check.fail("groups", f"duplicate group {dupes[0]!r}")
        for i, e in enumerate(events):
            if e.group not in groups:
                raise check.fail(f"{_event_entry(i, raw_events[i])}.group", f"group {e.group!r} is not listed in \"groups\" {groups}")
        for g in groups:
            if g not in present:
                raise check.fail("groups", f"group {g!r} has no events")
    else:
        groups = present

    # comparison
    show: list[str]
    if "comparison" in data:
        comp = check.keys(data["comparison"], "comparison", _COMPARISON_KEYS, ("groups",))
        pair = check.string_list(comp["groups"], "comparison.groups")
        if len(pair) != 2 or pair[0] == pair[1]:
            raise check.fail("comparison.groups", f"must name two different groups (reference, comparison), got {pair}")
        show = check.string_list(comp.get("show", []), "comparison.show")
        for name, entry in [(g, "comparison.groups") for g in pair] + [(g, "comparison.show") for g in show]:
            if name not in groups:
                raise check.fail(entry, f"group {name!r} has no events; groups present: {groups}")
        overlap = [g for g in show if g in pair]
        if overlap:
            raise check.fail("comparison.show", f"group {overlap[0]!r} is already compared")
    elif conditions and len(groups) < 2:  # the headline is the paired condition test: no group test
        pair, show = [], []
        if len(events) < 2:
            raise check.fail("events", f"a paired study needs at least 2 events, got {len(events)}")
    else:
        if len(groups) < 2:
            raise check.fail("events", f"at least two groups are needed for a comparison, found {groups}")
        pair = groups[:2]
        show = groups[2:]
    for g in pair:
        n = sum(e.group == g for e in events)
        if n < 2:
            raise check.fail(f"group {g!r}", f"a compared group needs at least 2 events, got {n}")

    return Study(
        id=study_id,
        title=title,
        language=language,
        concepts=tuple(concepts),
        templates=tuple(templates),
        events=tuple(events),
        groups=tuple(groups),
        comparison=tuple(pair),
        show=tuple(show),
        description=description,
        nouns=nouns,
        source=source,
        file_sha256=file_sha256,
        raw=data,
        conditions=conditions,
    )


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (``json`` would keep the last silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKeyError(f"the JSON names the key {key[:80]!r} twice in one object")
        seen[key] = value
    return seen


def strict_loads(text: str) -> Any:
    """``json.loads`` that refuses an object with a duplicate key (:class:`DuplicateKeyError`)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def load_study(path: str | Path) -> Study:
    """Read and validate a study file (JSON, UTF-8). Raises :class:`StudyError` naming the file,
    the entry and the reason for anything malformed; nothing is sampled before this passes."""
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise StudyError(source, "file", f"cannot be read ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise StudyError(source, "file", f"is not UTF-8 ({err.reason} at byte {err.start})") from None
    try:
        data = strict_loads(text)
    except json.JSONDecodeError as err:
        raise StudyError(source, f"JSON line {err.lineno} column {err.colno}", f"invalid JSON: {err.msg}") from None
    except DuplicateKeyError as err:
        raise StudyError(source, "file", str(err)) from None
    return study_from_dict(data, source=source, file_sha256=hashlib.sha256(raw).hexdigest())
