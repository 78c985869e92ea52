"""The small order / inventory / person study the tests run, in the two shapes they need it: a study
dict (the JSON a study file, ``POST /api/study`` and ``study_from_dict`` read) and the Study tab's
fields (meta, concepts, events and templates tables)."""

from __future__ import annotations

import copy

import pandas as pd

CONCEPTS = ("order", "inventory", "person")
GROUPS = ("benign", "contradictory")
#: Two templates; a study with one takes the first.
TEMPLATES = (
    {"id": "t1", "text": "Event: {event}\nDescribe {concepts}."},
    {"id": "t2", "text": "{event} Explain {concepts}."},
)
#: Two events per group.
EVENTS = (
    {"id": "b1", "group": "benign", "text": "A customer ordered a lamp."},
    {"id": "b2", "group": "benign", "text": "The store counted its inventory."},
    {"id": "c1", "group": "contradictory", "text": "Only 90 units are in stock, but 120 were shipped."},
    {"id": "c2", "group": "contradictory", "text": "The order shipped 50 boxes from 30 in stock."},
)
#: One text per group, numbered into as many events as a test needs (:func:`numbered_events`).
GROUP_TEXTS = (("benign", "A customer ordered a lamp from stock."),
               ("contradictory", "Only 90 units are in stock, but 120 were shipped."))


def numbered_events(numbers, label: str = "{group} {i}") -> list[dict]:
    """Events ``b{i}`` then ``c{i}`` for each ``i`` in ``numbers``: each group's text with
    `` ({label})`` appended, so no two texts are equal."""
    return [{"id": f"{group[0]}{i}", "group": group, "text": f"{text} ({label.format(group=group, i=i)})"}
            for group, text in GROUP_TEXTS for i in numbers]


def study_dict(study_id: str, title: str, *, templates=2, events=EVENTS, concepts=CONCEPTS,
               comparison: bool = True, **fields) -> dict:
    """A study dict with ``concepts``, ``templates`` (a number: the first of :data:`TEMPLATES`; or the
    template dicts), ``events`` (copied), the benign/contradictory comparison unless ``comparison``
    is False, and any further top-level ``fields``."""
    data = {"id": study_id, "title": title, "language": "en", "concepts": list(concepts)}
    if comparison:
        data["comparison"] = {"groups": list(GROUPS)}
    data["templates"] = copy.deepcopy(list(TEMPLATES[:templates] if isinstance(templates, int) else templates))
    data["events"] = copy.deepcopy(list(events))
    return {**data, **fields}


#: The Study tab's small study: short texts, templates without a trailing instruction.
TAB_EVENTS = (
    {"id": "b1", "group": "benign", "text": "The order was packed."},
    {"id": "b2", "group": "benign", "text": "The stock was counted."},
    {"id": "c1", "group": "contradictory", "text": "Ninety units in stock, none in stock."},
    {"id": "c2", "group": "contradictory", "text": "The order arrived before it was placed."},
)
TAB_TEMPLATES = ({"id": "t1", "text": "Event: {event}"}, {"id": "t2", "text": "{event} ({concepts})"})


def tab_study(**event_concepts: str) -> dict:
    """The Study tab's small study as a dict; ``event_concepts`` (event id → "a, b") gives an event
    its own concepts."""
    events = [{**e, "concepts": [c.strip() for c in event_concepts[e["id"]].split(",")]} if e["id"] in event_concepts
              else e for e in TAB_EVENTS]
    return study_dict("mini", "mini", templates=TAB_TEMPLATES, events=events, comparison=False)


def study_fields(data: dict) -> tuple[dict, str, pd.DataFrame, pd.DataFrame]:
    """The Study tab's inputs for the study dict ``data``: meta (id, title, language), the concepts
    as typed ("a, b, c"), the events table (id, group, text, concepts; "" for the study's own) and
    the templates table (id, text)."""
    meta = {key: data[key] for key in ("id", "title", "language")}
    events = pd.DataFrame([[e["id"], e["group"], e["text"], ", ".join(e.get("concepts", ()))] for e in data["events"]],
                          columns=["id", "group", "text", "concepts"])
    templates = pd.DataFrame([[t["id"], t["text"]] for t in data["templates"]], columns=["id", "text"])
    return meta, ", ".join(data["concepts"]), events, templates
