"""The request bodies the OpenAPI schema shows as examples (Swagger UI's "Try it out" fills the
first in): each is a valid request that succeeds as shown, on the shipped models and on any model
whose canvas holds the three concepts (tests/web/api/test_openapi_examples.py sends every one).

Small on purpose (two samples, at most 24 denoising steps, one template), so a synchronous
``POST /api/seed`` stays far below ``SYNC_MAX_TOKEN_STEPS``; the settings named here are the ones
every family shares (:func:`petri.core.settings.request_fields`), so they apply to either family.
"""

from __future__ import annotations

from typing import Any

from petri.core.dish import DEFAULT_TEMPLATE

CONCEPTS = ["order", "inventory", "person"]
CONTRADICTORY = "Only 90 units are in stock, but a customer ordered 120."
BENIGN = "The customer placed an order, and the warehouse packed it the same afternoon."
SETTINGS = {"max_denoising_steps": 24}

#: ``POST /api/seed`` and ``POST /api/jobs/seed``: one event, then a list of events with their groups.
SEED: list[Any] = [
    {"concepts": CONCEPTS, "event": CONTRADICTORY, "group": "contradictory", "samples": 2, "seed": 0,
     "settings": SETTINGS},
    {"concepts": CONCEPTS, "events": [{"event": BENIGN, "group": "benign"},
                                      {"event": CONTRADICTORY, "group": "contradictory"}],
     "template": DEFAULT_TEMPLATE, "samples": 2, "seed": 0, "settings": SETTINGS},
]

#: ``POST /api/study`` and ``POST /api/jobs/study``: a four-event study in the study-file schema (each
#: compared group needs two events).
STUDY: list[Any] = [
    {"study": {"schema": 1, "id": "example", "title": "Does a contradiction destabilise order and inventory?",
               "language": "en", "concepts": CONCEPTS, "groups": ["benign", "contradictory"],
               "comparison": {"groups": ["benign", "contradictory"]},
               "templates": [{"id": "t1_describe", "text": DEFAULT_TEMPLATE}],
               "events": [{"id": "benign_01", "group": "benign", "text": BENIGN},
                          {"id": "benign_02", "group": "benign", "text": "A person counted the inventory before the order shipped."},
                          {"id": "contra_01", "group": "contradictory", "text": CONTRADICTORY},
                          {"id": "contra_02", "group": "contradictory",
                           "text": "The order shipped on Monday, but the customer placed it on Tuesday."}]},
     "samples": 2, "seed": 0, "settings": SETTINGS},
]

QUESTIONS = [{"name": "consistent", "alternatives": ["yes", "no"]}]
FRAME = "Consistent: {{consistent}}"

#: ``POST /api/probe``: a read (answered at once), then an inline labelled set's evaluation (a job).
PROBE: list[Any] = [
    {"prompt": CONTRADICTORY, "frame": FRAME, "questions": QUESTIONS, "samples": 1, "steps": 1, "seed": 0},
    {"frame": FRAME, "questions": QUESTIONS,
     "items": [{"id": "contra_01", "prompt": CONTRADICTORY, "gold": {"consistent": "no"}},
               {"id": "benign_01", "prompt": BENIGN, "gold": {"consistent": "yes"}}]},
]
