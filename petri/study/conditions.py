"""Within-event conditions of a study file (the paired design): ``conditions[]`` and
``events[].conditions``, parsed and checked. No torch, no model.

A study with conditions runs every event under every condition with the same templates, slot
positions and seeds, so the conditions are paired within the event. The first condition is the
reference of every paired comparison. A condition an event does not list uses the event's own text
and concepts, then the condition's ``transform`` (:mod:`petri.study.transforms`), if any; a listed
condition may replace the concepts, the text or both (an explicit text is used as written, never
transformed). Every condition of one event pins the same number of concepts, so they share the slot
positions. The format is documented in ``assets/studies/README.md``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from petri.study.checks import Checker
from petri.study.transforms import TRANSFORMS

__all__ = ["Condition", "Variant", "parse_conditions", "parse_event_conditions", "CONDITION_KEYS", "VARIANT_KEYS"]

CONDITION_KEYS = {"id", "description", "dose", "transform"}
VARIANT_KEYS = {"concepts", "text"}


@dataclass(frozen=True)
class Condition:
    """One within-event condition: ``dose`` (a number, for a dose-response study) and ``transform``
    (a name in :data:`petri.study.transforms.TRANSFORMS`) are optional."""

    id: str
    description: str = ""
    dose: float | None = None
    transform: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id,
                **({"description": self.description} if self.description else {}),
                **({"dose": self.dose} if self.dose is not None else {}),
                **({"transform": self.transform} if self.transform is not None else {})}


@dataclass(frozen=True)
class Variant:
    """What one event changes under one condition: its concepts, its text, or both (``None``: the event's own)."""

    concepts: tuple[str, ...] | None = None
    text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**({"concepts": list(self.concepts)} if self.concepts is not None else {}),
                **({"text": self.text} if self.text is not None else {})}


def _entry(i: int, raw: Any) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        return f"conditions[{i}] (id {raw['id']!r})"
    return f"conditions[{i}]"


def parse_conditions(check: Checker, raw: Any) -> tuple[Condition, ...]:
    """The study's ``conditions`` list: at least 2, ids unique, ``dose`` on all or none (a finite
    number), ``transform`` a registered name. Raises :class:`~petri.study.checks.StudyError` naming the entry."""
    if not isinstance(raw, list) or len(raw) < 2:
        n = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise check.fail("conditions", f"must be a list of at least 2 condition objects (the first is the reference), got {n}")
    out: list[Condition] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        entry = _entry(i, item)
        check.keys(item, entry, CONDITION_KEYS, ("id",))
        cid = check.ident(item["id"], f"{entry}.id")
        if cid in seen:
            raise check.fail(entry, f"duplicate condition id {cid!r} (also conditions[{seen[cid]}])")
        seen[cid] = i
        description = check.text(item.get("description", ""), f"{entry}.description", empty_ok=True)
        dose = item.get("dose")
        if dose is not None:
            if isinstance(dose, bool) or not isinstance(dose, (int, float)) or not math.isfinite(dose):
                raise check.fail(f"{entry}.dose", f"must be a finite number, got {dose!r}")
            dose = float(dose)
        transform = item.get("transform")
        if transform is not None:
            check.text(transform, f"{entry}.transform")
            if transform not in TRANSFORMS:
                raise check.fail(f"{entry}.transform", f"unknown transform {transform!r}; known: {sorted(TRANSFORMS)}")
        out.append(Condition(cid, description, dose, transform))
    with_dose = [c.id for c in out if c.dose is not None]
    if with_dose and len(with_dose) != len(out):
        missing = next(i for i, c in enumerate(out) if c.dose is None)
        raise check.fail(f"{_entry(missing, raw[missing])}.dose",
                         f"a dose is given for {with_dose}; give one for every condition or for none")
    if with_dose:
        doses = [c.dose for c in out]
        dupes = [d for d, n in Counter(doses).items() if n > 1]
        if dupes:
            raise check.fail("conditions", f"dose {dupes[0]:g} is given to more than one condition")
    return tuple(out)


def parse_event_conditions(check: Checker, entry: str, raw: Any, conditions: tuple[Condition, ...],
                           concepts: list[str], own_concepts: int) -> tuple[tuple[str, Variant], ...]:
    """One event's ``conditions`` map (condition id -> ``{"concepts"?, "text"?}``), in study condition
    order. ``concepts``: the study's; ``own_concepts``: how many the event pins itself. Refuses unknown
    condition ids and concepts, empty texts, and a concept count that differs between conditions."""
    where = f"{entry}.conditions"
    if not conditions:
        raise check.fail(where, "the study has no top-level \"conditions\" list, so an event cannot name conditions")
    if not isinstance(raw, dict):
        raise check.fail(where, f"must be a JSON object (condition id -> {{\"concepts\", \"text\"}}), got {type(raw).__name__}")
    known = [c.id for c in conditions]
    unknown = [k for k in raw if k not in known]
    if unknown:
        raise check.fail(f"{where}.{unknown[0]}", f"unknown condition {unknown[0]!r}; the study's conditions are {known}")
    variants: dict[str, Variant] = {}
    for cid, item in raw.items():
        here = f"{where}.{cid}"
        check.keys(item, here, VARIANT_KEYS, ())
        sub = None
        if "concepts" in item:
            sub = check.concept_subset(item["concepts"], f"{here}.concepts", concepts)
        text = check.text(item["text"], f"{here}.text") if "text" in item else None
        variants[cid] = Variant(sub, text)
    counts = {c.id: len(cast(tuple, variants[c.id].concepts)) if c.id in variants and variants[c.id].concepts is not None
              else own_concepts for c in conditions}
    if len(set(counts.values())) > 1:
        raise check.fail(where, f"every condition of one event must pin the same number of concepts (they share "
                                f"the slot positions); got {counts}")
    return tuple((c.id, variants[c.id]) for c in conditions if c.id in variants)
