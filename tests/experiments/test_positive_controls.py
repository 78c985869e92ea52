"""The shipped positive-control studies (assets/studies/anchor_congruence.json, dose_response.json) are
what experiments/positive_controls.py builds, and they have the design its docstring promises:
single-token concepts on petri-small, unrelated triples that are other events' fitting ones (each
once), doses that replace the stated share of words, nested, by dictionary words."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from experiment_support import experiment_script

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "assets" / "studies"


@pytest.fixture(scope="module")
def script():
    return experiment_script("positive_controls")


def built(script, name: str) -> dict:
    """The study as the script builds it (the design tests check the builder; the first test that
    the shipped file is that build)."""
    return json.loads(script.text(name))


@pytest.mark.parametrize("name", ["anchor_congruence.json", "dose_response.json"])
def test_shipped_file_equals_the_build(script, name):
    assert (STUDIES / name).read_text(encoding="utf-8") == script.text(name)


def test_every_concept_is_one_token_on_petri_small(script):
    tok = Tokenizer.from_file(str(ROOT / "assets" / "petri-small" / "tokenizer.json"))
    for name in ("anchor_congruence.json", "dose_response.json"):
        for concept in built(script, name)["concepts"]:
            assert len(tok.encode(" " + concept, add_special_tokens=False).ids) == 1, concept


def test_congruence_design(script):
    study = built(script, "anchor_congruence.json")
    events = study["events"]
    assert len(events) >= 24
    assert [c["id"] for c in study["conditions"]] == ["fitting", "unrelated"]
    fitting = {e["id"]: tuple(e["conditions"]["fitting"]["concepts"]) for e in events}
    unrelated = {e["id"]: tuple(e["conditions"]["unrelated"]["concepts"]) for e in events}
    # every triple is pinned once where it fits and once elsewhere, never on its own event
    assert Counter(unrelated.values()) == Counter(fitting.values())
    for eid in fitting:
        assert unrelated[eid] != fitting[eid]
        assert not set(unrelated[eid]) & set(fitting[eid])
    assert sorted(c for t in fitting.values() for c in t) == sorted(study["concepts"])


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z']+", text)


def test_doses_are_nested_and_replace_the_stated_share(script):
    study = built(script, "dose_response.json")
    assert [(c["id"], c["dose"]) for c in study["conditions"]] == [("d000", 0), ("d025", 0.25), ("d050", 0.5), ("d100", 1.0)]
    lexicon = {line.split()[0] for line in script.lexicon_path().read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith(";;;")}
    assert len(study["events"]) >= 24
    for event in study["events"]:
        n = int(re.match(r"(\d+) content words", event["note"]).group(1))
        assert n >= 4
        base = _words(event["text"])
        changed_before: dict[int, str] = {}
        for cid, dose in (("d025", 0.25), ("d050", 0.5), ("d100", 1.0)):
            words = _words(event["conditions"][cid]["text"])
            assert len(words) == len(base), (event["id"], cid)
            changed = {i: w for i, (w, b) in enumerate(zip(words, base)) if w != b}
            assert len(changed) == int(dose * n + 0.5), (event["id"], cid, changed)
            # nested: what a lower dose replaced stays replaced, by the same word
            assert all(changed.get(i) == w for i, w in changed_before.items()), (event["id"], cid)
            assert all(w.lower().removesuffix("'s") in lexicon for w in changed.values())
            assert not {w.lower().removesuffix("'s") for w in changed.values()} & set(study["concepts"])
            changed_before = changed


@pytest.mark.parametrize("name", ["anchor_congruence.json", "dose_response.json"])
def test_shipped_files_load_as_paired_studies(name):
    from petri.study.schema import load_study

    study = load_study(STUDIES / name)
    assert study.paired and len(study.events) >= 24
    assert [c.dose for c in study.conditions] == ([0.0, 0.25, 0.5, 1.0] if name == "dose_response.json" else [None, None])


def test_a_condition_cut_out_as_a_schema_1_study():
    """experiments/validity_runs.py runs each condition as its own study: same event ids (so the
    same batch seeds), the condition's own concepts or text, two groups for schema 1."""
    from petri.study.schema import study_from_dict

    runs = experiment_script("validity_runs")
    data = json.loads((STUDIES / "anchor_congruence.json").read_text(encoding="utf-8"))
    unrelated = study_from_dict(runs.condition_study(data, "unrelated"))
    assert not unrelated.paired
    assert [e.id for e in unrelated.events] == [e["id"] for e in data["events"]]
    assert [list(e.concepts) for e in unrelated.events] == [e["conditions"]["unrelated"]["concepts"] for e in data["events"]]
    dose = json.loads((STUDIES / "dose_response.json").read_text(encoding="utf-8"))
    d050 = study_from_dict(runs.condition_study(dose, "d050"))
    assert [e.text for e in d050.events] == [e["conditions"]["d050"]["text"] for e in dose["events"]]
    assert [e.text for e in study_from_dict(runs.condition_study(dose, "d000")).events] == [e["text"] for e in dose["events"]]
    with pytest.raises(ValueError, match="no condition 'd075'"):
        runs.condition_study(dose, "d075")
