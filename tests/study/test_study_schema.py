"""Study files: the shipped ones load and are balanced; malformed ones are refused before any
sampling with the file, the entry and the reason."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from petri.cli.main import main
from petri.measure import nouns
from petri.study.plan import StudyPlan
from petri.study.schema import StudyError, load_study, study_from_dict

REPO = Path(__file__).resolve().parents[2]
STUDIES = REPO / "assets" / "studies"

BASE = {
    "id": "mini",
    "title": "Mini study",
    "language": "en",
    "concepts": ["order", "inventory", "person"],
    "groups": ["benign", "contradictory", "control"],
    "comparison": {"groups": ["benign", "contradictory"], "show": ["control"]},
    "templates": [{"id": "t1", "text": "Event: {event}\nDescribe how {concepts} relate."}],
    "events": [
        {"id": "b1", "group": "benign", "text": "A customer ordered a lamp."},
        {"id": "b2", "group": "benign", "text": "The shop counted its stock."},
        {"id": "c1", "group": "contradictory", "text": "Only 90 units are in stock, but 120 were shipped from it."},
        {"id": "c2", "group": "contradictory", "text": "A buyer returned 5 lamps that were never sold.", "concepts": ["order", "person"]},
        {"id": "k1", "group": "control", "text": "Only 90 units are in stock, and 60 were shipped from it."},
    ],
}


def write(tmp_path: Path, data, name: str = "study.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def mutate(fn):
    data = copy.deepcopy(BASE)
    fn(data)
    return data


def test_base_fixture_is_valid(tmp_path):
    study = load_study(write(tmp_path, BASE))
    assert study.comparison == ("benign", "contradictory") and study.show == ("control",)
    assert study.event_concepts(study.events[3]) == ("order", "person")
    assert study.event_concepts(study.events[0]) == ("order", "inventory", "person")
    assert len(study.file_sha256) == 64
    # Reformatting the file keeps the content hash (the run id depends on content, not bytes).
    again = load_study(write(tmp_path, json.dumps(BASE, indent=4), "pretty.json"))
    assert again.content_hash() == study.content_hash() and again.file_sha256 != study.file_sha256


@pytest.mark.parametrize("name", ["inventory_order.json", "inventory_order_ko.json", "inventory_order_ja.json"])
def test_shipped_studies_load_and_are_balanced(name):
    study = load_study(STUDIES / name)
    assert study.concepts and len(study.templates) == 5
    assert study.comparison == ("benign", "contradictory") and "control" in study.show
    contra, control = study.events_in("contradictory"), study.events_in("control")
    assert len(study.events_in("benign")) >= 12 and len(contra) >= 12 and len(control) >= 12
    # Controls match the contradictory events one to one: numbers present, length within 15%.
    for c, k in zip(contra, control):
        assert re.search(r"\d", c.text) and re.search(r"\d", k.text), (c.id, k.id)
        assert abs(len(c.text) - len(k.text)) <= 0.15 * len(c.text), (c.text, k.text)


@pytest.mark.parametrize(
    "name, language, script, method",
    [("inventory_order_ko.json", "ko", "[가-힣]", nouns.KIWI),
     ("inventory_order_ja.json", "ja", "[\u3040-\u30ff\u4e00-\u9fff]", nouns.FUGASHI)],
)
def test_translated_study_mirrors_english(name, language, script, method):
    en, tr = load_study(STUDIES / "inventory_order.json"), load_study(STUDIES / name)
    assert [(e.id, e.group, e.concepts) for e in en.events] == [(e.id, e.group, e.concepts) for e in tr.events]
    assert [t.id for t in en.templates] == [t.id for t in tr.templates]
    assert tr.language == language and all(re.search(script, e.text) for e in tr.events)
    assert all(re.search(script, c) for c in tr.concepts) and all(re.search(script, t.text) for t in tr.templates)
    # the digits of each event are the English event's, so the control matching carries over
    assert [sorted(re.findall(r"\d+", e.text)) for e in en.events] == [sorted(re.findall(r"\d+", e.text)) for e in tr.events]
    assert tr.noun_method() == method and en.noun_method() == nouns.PATTERN


def test_a_language_without_an_analyser_is_refused_unless_words_are_asked_for(tmp_path):
    french = mutate(lambda d: d.__setitem__("language", "fr"))
    with pytest.raises(StudyError) as err:
        load_study(write(tmp_path, french))
    assert err.value.entry == "language" and "no noun analyser for language 'fr'" in err.value.reason
    assert '"nouns": "words"' in err.value.reason
    study = study_from_dict({**french, "nouns": "words"})
    assert study.noun_method() == nouns.FALLBACK and study.to_dict()["nouns"] == "words"
    assert study_from_dict(study.to_dict()).nouns == "words"  # survives the run store's round trip
    with pytest.raises(StudyError) as err:
        study_from_dict({**BASE, "nouns": "pos"})
    assert err.value.entry == "nouns" and "['analyser', 'words']" in err.value.reason
    # the default is not written out, so the content hash (and run id) of older studies is kept
    assert "nouns" not in study_from_dict(BASE).to_dict()


def test_a_missing_analyser_package_is_refused_before_the_model_or_sampling(tmp_path, capsys, monkeypatch):
    real = nouns.util.find_spec
    monkeypatch.setattr(nouns.util, "find_spec", lambda name: None if name == "kiwipiepy_model" else real(name))
    path = STUDIES / "inventory_order_ko.json"
    study = load_study(path)  # the file itself is valid
    with pytest.raises(StudyError) as err:
        study.noun_method()
    assert err.value.entry == "language" and "kiwipiepy-model" in err.value.reason
    from petri.study.execution.runner import run_study

    with pytest.raises(StudyError, match="kiwipiepy-model"):  # before the model is even asked for its facts
        run_study(object(), StudyPlan(study), store=None)
    code = main(["study", str(path), "--model", str(tmp_path / "no-such-model"), "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}: language: 'ko': the kiwi noun analyser needs kiwipiepy-model" in err
    assert "not found" not in err and not (tmp_path / "store").exists()


MALFORMED = {
    "missing group": (
        lambda d: d["events"][1].pop("group"),
        "events[1] (id 'b2')", "missing required key 'group'",
    ),
    "unknown concept": (
        lambda d: d["events"][3].__setitem__("concepts", ["order", "stock"]),
        "events[3] (id 'c2').concepts", "unknown concept 'stock'",
    ),
    "one event in a compared group": (
        lambda d: d["events"].pop(1),
        "group 'benign'", "at least 2 events, got 1",
    ),
    "duplicate event id": (
        lambda d: d["events"][2].__setitem__("id", "b1"),
        "events[2] (id 'b1')", "duplicate event id 'b1' (also events[0])",
    ),
    "duplicate template id": (
        lambda d: d["templates"].append({"id": "t1", "text": "{event}"}),
        "templates[1] (id 't1')", "duplicate template id",
    ),
    "empty event text": (
        lambda d: d["events"][0].__setitem__("text", "   "),
        "events[0] (id 'b1').text", "is empty",
    ),
    "empty template text": (
        lambda d: d["templates"][0].__setitem__("text", ""),
        "templates[0] (id 't1').text", "is empty",
    ),
    "group not declared": (
        lambda d: d["events"][4].__setitem__("group", "neutral"),
        "events[4] (id 'k1').group", "'neutral' is not listed",
    ),
    "compared group without events": (
        lambda d: d["comparison"].__setitem__("groups", ["benign", "absurd"]),
        "comparison.groups", "'absurd' has no events",
    ),
    "declared group without events": (
        lambda d: d["groups"].append("extra"),
        "groups", "'extra' has no events",
    ),
    "template without event": (
        lambda d: d["templates"][0].__setitem__("text", "Describe {concepts}."),
        "templates[0] (id 't1').text", "does not use {event}",
    ),
    "unknown placeholder": (
        lambda d: d["templates"][0].__setitem__("text", "{event} {concept}"),
        "templates[0] (id 't1').text", "unknown placeholder(s) ['concept']",
    ),
    "typo in a key": (
        lambda d: d["events"][0].__setitem__("txt", "x"),
        "events[0] (id 'b1')", "unknown key(s) ['txt']",
    ),
    "missing events": (lambda d: d.pop("events"), "top level", "missing required key 'events'"),
    "one concept": (lambda d: d.__setitem__("concepts", ["order"]), "concepts", "at least 2 concepts"),
    "duplicate concept": (lambda d: d.__setitem__("concepts", ["order", "Order"]), "concepts ('Order')", "duplicate concept"),
    "duplicate event text": (
        lambda d: d["events"][1].__setitem__("text", "A customer  ordered a lamp."),
        "events[1] (id 'b2').text", "duplicate event text (same as events[0])",
    ),
    "bad id": (lambda d: d["events"][0].__setitem__("id", "b 1/.."), "events[0] (id 'b 1/..').id", "not a valid id"),
    "event concepts not a list": (
        lambda d: d["events"][0].__setitem__("concepts", "order"),
        "events[0] (id 'b1').concepts", "must be a list of strings",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_study_names_file_entry_and_reason(tmp_path, case):
    change, entry, reason = MALFORMED[case]
    path = write(tmp_path, mutate(change))
    with pytest.raises(StudyError) as err:
        load_study(path)
    assert err.value.file == str(path)
    assert err.value.entry == entry
    assert reason in err.value.reason
    assert str(err.value).startswith(f"{path}: {entry}: ")


def test_bad_json_names_line_and_column(tmp_path):
    path = write(tmp_path, '{\n  "id": "x",\n  "title": "t",,\n}')
    with pytest.raises(StudyError) as err:
        load_study(path)
    assert err.value.entry.startswith("JSON line 3 column") and "invalid JSON" in err.value.reason
    assert str(path) in str(err.value)


def test_missing_file_and_non_object(tmp_path):
    with pytest.raises(StudyError, match="cannot be read"):
        load_study(tmp_path / "nope.json")
    with pytest.raises(StudyError, match="top level: must be a JSON object"):
        load_study(write(tmp_path, "[1, 2]"))


def test_comparison_defaults_to_first_two_groups():
    data = mutate(lambda d: (d.pop("groups"), d.pop("comparison")))
    study = study_from_dict(data)
    assert study.comparison == ("benign", "contradictory") and study.show == ("control",)


def test_cli_refuses_a_malformed_study_before_loading_any_model(tmp_path, capsys):
    path = write(tmp_path, mutate(lambda d: d["events"][3].__setitem__("concepts", ["order", "stock"])))
    code = main(["study", str(path), "--model", str(tmp_path / "no-such-model"), "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{path}: events[3] (id 'c2').concepts: unknown concept 'stock'" in err
    assert "not found" not in err  # the model was never looked for
    assert not (tmp_path / "store").exists()  # nor the store opened
