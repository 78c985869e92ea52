"""Build the two shipped positive-control studies (issue 59): effects the instrument must detect.

    python3 experiments/positive_controls.py            # writes assets/studies/anchor_congruence.json
                                                        # and assets/studies/dose_response.json
    python3 experiments/positive_controls.py --check    # exits 1 if a shipped file differs

Both studies use the same 24 short everyday events, each with a *fitting* concept triple (three
single common words that fit the event and are one token each, with their leading space, in
petri-small's tokenizer; ``tests/experiments/test_positive_controls.py`` checks that).

``anchor_congruence.json``
    Every event runs twice, paired (same templates, layouts and seeds): pinned with its fitting
    triple (``fitting``, the reference) and with an *unrelated* one (``unrelated``). The unrelated
    triple of an event is the fitting triple of another event, picked by a seeded derangement, so
    every triple is pinned once where it fits and once where it does not: the concept words
    themselves (their frequency, their tokens) are balanced between the two conditions.

``dose_response.json``
    Every event, pinned with its fitting triple, is read with 0, 25, 50 and 100 % of its content
    words replaced by random dictionary words (conditions ``d000`` … ``d100``, ``dose`` 0 … 1). The
    content words are the words the Pattern tagger shipped in TextBlob (a project requirement) tags
    as nouns, verbs, adjectives or adverbs, less auxiliaries; ``round(dose × n)`` of them are
    replaced (half up), nested (the 25 % words are among the 50 % ones, with the same
    replacements), in a seeded order. A replacement has the same Penn tag as the word it replaces
    (a plural noun for a plural noun, a past-tense verb for a past-tense verb), so the sentence
    keeps its grammar and loses its sense. The dictionary is Brill's tagger lexicon as TextBlob
    0.20.1 ships it (``textblob/en/en-lexicon.txt``; see ``assets/studies/README.md`` for licences):
    its lower-case alphabetic words of three letters or more, listed first with that tag, which
    petri-small's tokenizer keeps as one token, less the study's concepts and the auxiliaries. The
    corrupted texts are written into the file; nothing is drawn at run time.

The build is deterministic (``SEED``); the same TextBlob and tokenizer give the same files byte for byte.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STUDIES = REPO / "assets" / "studies"
TOKENIZER = REPO / "assets" / "petri-small" / "tokenizer.json"
SEED = 59

# (id, text, fitting concepts): short plain English the embedded petri-small model can handle
EVENTS: tuple[tuple[str, str, tuple[str, str, str]], ...] = (
    ("e01", "The baker took the bread out of the oven at dawn.", ("bread", "oven", "baker")),
    ("e02", "She watered the flowers in the garden before breakfast.", ("garden", "water", "flower")),
    ("e03", "The children played with a ball in the park after school.", ("park", "ball", "school")),
    ("e04", "He paid for his coffee with cash at the small shop.", ("coffee", "money", "shop")),
    ("e05", "The doctor listened to the patient and wrote a prescription.", ("doctor", "patient", "medicine")),
    ("e06", "The train left the station ten minutes late.", ("train", "station", "ticket")),
    ("e07", "My sister baked a cake for her friend's birthday.", ("cake", "birthday", "party")),
    ("e08", "The farmer fed the cows and cleaned the barn.", ("farmer", "cow", "barn")),
    ("e09", "The teacher wrote a question on the board, and the students answered it.", ("teacher", "student", "lesson")),
    ("e10", "It rained all day, so we stayed inside and read books.", ("rain", "book", "home")),
    ("e11", "The plane landed smoothly at the airport after a long flight.", ("plane", "airport", "flight")),
    ("e12", "The fisherman caught three fish from his ship on the river.", ("fish", "ship", "river")),
    ("e13", "The mechanic changed the oil and checked the engine of the car.", ("car", "engine", "mechanic")),
    ("e14", "We packed our bags and drove to the beach for the weekend.", ("beach", "sand", "holiday")),
    ("e15", "The nurse gave the sick child a warm blanket in the hospital.", ("nurse", "hospital", "blanket")),
    ("e16", "The cook chopped onions in the kitchen and made dinner.", ("kitchen", "cook", "dinner")),
    ("e17", "The dog barked at the mailman and chased him down the street.", ("dog", "street", "mail")),
    ("e18", "The band played loud music at the concert last night.", ("music", "concert", "band")),
    ("e19", "They planted seeds in the soil and grew vegetables in spring.", ("seed", "soil", "vegetable")),
    ("e20", "The firemen put out the fire, but smoke filled the old house.", ("fire", "smoke", "truck")),
    ("e21", "She bought eggs, cheese and fruit at the market.", ("market", "cheese", "fruit")),
    ("e22", "Snow fell all night, and in the morning the roads were white and cold.", ("snow", "winter", "cold")),
    ("e23", "The boy brushed his teeth and went to bed.", ("teeth", "bed", "sleep")),
    ("e24", "The waiter brought the menu to our table in the restaurant.", ("waiter", "table", "restaurant")),
)

TEMPLATES = (
    {"id": "t1_describe", "text": "Event: {event}\nDescribe how {concepts} relate in this event."},
    {"id": "t2_explain", "text": "Read this event: {event}\nExplain what role {concepts} play in it."},
)

CONTENT_TAGS = ("NN", "NNS", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "JJ", "JJR", "JJS", "RB")
AUXILIARIES = frozenset(
    "be is am are was were been being have has had having do does did done not n't so also then there "
    "very too just".split()
)
# tagger lexicon entries that are contraction stems ("didn" of "didn't"), never replacement words
CONTRACTION_STEMS = frozenset("ain aren couldn didn doesn don hadn hasn haven isn mightn mustn shan shouldn wasn weren won wouldn".split())
# events whose themes overlap (weather, health, food, shopping, travel, growing things, water): the
# derangement never gives one of them the other's triple as its unrelated one
RELATED = frozenset(frozenset(p) for p in (
    ("e10", "e22"), ("e05", "e15"), ("e01", "e16"), ("e16", "e24"), ("e01", "e24"), ("e07", "e01"),
    ("e04", "e21"), ("e06", "e11"), ("e02", "e19"), ("e08", "e19"), ("e12", "e14"), ("e04", "e24"),
    ("e21", "e16"), ("e21", "e01"), ("e14", "e11"), ("e06", "e14"),
))
DOSES = (("d000", 0.0), ("d025", 0.25), ("d050", 0.5), ("d100", 1.0))
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


# ------------------------------------------------------------------------------ the dictionary
def lexicon_path() -> Path:
    import textblob

    return Path(textblob.__file__).parent / "en" / "en-lexicon.txt"


def single_token_words() -> frozenset[str]:
    """Words petri-small's tokenizer keeps as one token after a space (``Ġword``)."""
    vocab = json.loads(TOKENIZER.read_text(encoding="utf-8"))["model"]["vocab"]
    return frozenset(t[1:] for t in vocab if t.startswith("Ġ") and t[1:].isalpha())


def dictionary(exclude: set[str]) -> dict[str, list[str]]:
    """Penn tag -> sorted replacement words (see the module docstring for the filter)."""
    keep = single_token_words()
    pools: dict[str, set[str]] = {tag: set() for tag in CONTENT_TAGS}
    for line in lexicon_path().read_text(encoding="utf-8").splitlines():
        if line.startswith(";;;") or not line.strip():
            continue
        word, tag = line.split()[:2]
        if (tag in pools and word.isalpha() and word.islower() and len(word) >= 3 and word in keep
                and word not in exclude and word not in AUXILIARIES and word not in CONTRACTION_STEMS):
            pools[tag].add(word)
    return {tag: sorted(words) for tag, words in pools.items()}


def content_positions(text: str) -> list[tuple[int, int, str]]:
    """(start, end, Penn tag) of each content word of ``text``, in order."""
    from textblob.en.taggers import PatternTagger

    # tagged with its first letter in lower case, so that a sentence-initial noun ("Snow fell") is
    # not taken for a proper noun
    lowered = text[:1].lower() + text[1:]
    spans, cursor = [], 0
    for word, tag in PatternTagger().tag(lowered):
        start = lowered.find(word, cursor)
        if start < 0:
            continue
        cursor = start + len(word)
        if tag in CONTENT_TAGS and _WORD.fullmatch(word) and word.lower() not in AUXILIARIES:
            spans.append((start, cursor, tag))
    return spans


def corrupt(text: str, rng: random.Random, pools: dict[str, list[str]]) -> tuple[dict[float, str], int]:
    """The event's text at every dose (nested replacements) and its number of content words."""
    spans = content_positions(text)
    order = rng.sample(range(len(spans)), len(spans))
    replacement = {}
    for i in order:
        start, end, tag = spans[i]
        word = rng.choice(pools[tag])
        while word == text[start:end].lower():
            word = rng.choice(pools[tag])
        replacement[i] = word.capitalize() if text[start].isupper() else word
    texts = {}
    for _, dose in DOSES:
        chosen = set(order[: int(dose * len(spans) + 0.5)])
        out, last = [], 0
        for i, (start, end, _) in enumerate(spans):
            out.append(text[last:start])
            out.append(replacement[i] if i in chosen else text[start:end])
            last = end
        texts[dose] = "".join(out) + text[last:]
    return texts, len(spans)


# ----------------------------------------------------------------------------------- the studies
def all_concepts() -> list[str]:
    return [c for _, _, triple in EVENTS for c in triple]


def derangement(ids: list[str], rng: random.Random) -> list[int]:
    """A seeded permutation of the events' indices with no fixed point that never maps an event to
    one of ``RELATED`` with it (rejection sampling)."""
    n = len(ids)
    while True:
        perm = rng.sample(range(n), n)
        if all(p != i and frozenset((ids[i], ids[p])) not in RELATED for i, p in enumerate(perm)):
            return perm


def congruence() -> dict:
    rng = random.Random(SEED)
    other = derangement([e[0] for e in EVENTS], rng)
    events = []
    for (eid, text, triple), j in zip(EVENTS, other):
        events.append({
            "id": eid, "group": "everyday", "text": text,
            "conditions": {"fitting": {"concepts": list(triple)}, "unrelated": {"concepts": list(EVENTS[j][2])}},
            "note": f"unrelated triple: the fitting one of {EVENTS[j][0]}",
        })
    return _study(
        "anchor_congruence", "Anchor congruence: are concepts that do not fit the event less stable than ones that do?",
        "Each everyday event is pinned once with three concepts that fit it and once with three unrelated ones "
        "(another event's fitting triple), with the same templates, layouts and seeds.",
        [{"id": "fitting", "description": "three concepts that fit the event"},
         {"id": "unrelated", "description": "three concepts unrelated to the event (another event's fitting triple)"}],
        events)


def _study(sid: str, title: str, description: str, conditions: list[dict], events: list[dict]) -> dict:
    """A paired study dict with the shared parts (language, concepts, templates)."""
    return {"schema": 1, "id": sid, "title": title, "language": "en",
            "description": f"Positive control (issue 59). {description} Built by experiments/positive_controls.py.",
            "concepts": all_concepts(), "conditions": conditions, "templates": [dict(t) for t in TEMPLATES],
            "events": events}


def dose_response() -> dict:
    rng = random.Random(SEED + 1)
    pools = dictionary(set(all_concepts()))
    events = []
    for eid, text, triple in EVENTS:
        texts, n = corrupt(text, rng, pools)
        counts = "/".join(str(int(dose * n + 0.5)) for _, dose in DOSES[1:])
        events.append({
            "id": eid, "group": "everyday", "text": text, "concepts": list(triple),
            "conditions": {cid: {"text": texts[dose]} for cid, dose in DOSES[1:]},
            "note": f"{n} content words; {counts} replaced at 25/50/100 %",
        })
    return _study(
        "dose_response",
        "Dose response: does instability rise as more of the event's content words are replaced by random words?",
        "Each everyday event, pinned with three concepts that fit it, is read with 0, 25, 50 and 100 % of its "
        "content words replaced by random dictionary words of the same part of speech (seeded, nested; the texts "
        "are in this file).",
        [{"id": cid, "dose": dose, "description": f"{round(dose * 100)} % of the content words replaced"}
         for cid, dose in DOSES],
        events)


BUILDERS = {"anchor_congruence.json": congruence, "dose_response.json": dose_response}


def text(name: str) -> str:
    """The file ``name`` as this script writes it."""
    return json.dumps(BUILDERS[name](), ensure_ascii=False, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped files instead of writing")
    args = parser.parse_args(argv)
    status = 0
    for name in BUILDERS:
        target = STUDIES / name
        wanted = text(name)
        if args.check:
            same = target.exists() and target.read_text(encoding="utf-8") == wanted
            print(f"{target.relative_to(REPO)}: {'up to date' if same else 'DIFFERS from the build'}")
            status |= not same
        else:
            target.write_text(wanted, encoding="utf-8")
            print(f"wrote {target.relative_to(REPO)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
