"""Build the English training corpus and the byte-level BPE tokenizer of the embedded model.

Sources (all installable from Debian, no network beyond the package archive; see
``assets/petri-tiny/SOURCES.md`` for versions and licenses):

* ``wordnet-base``: WordNet 3.0's synsets (``/usr/share/wordnet/data.{noun,verb,adj,adv}``). Every
  synset's gloss is turned into a plain sentence ("An order is a commercial document used to
  request ...", "To order is to ...", "Orderly means ...") followed by WordNet's example sentences
  for it ("IBM received an order for a hundred computers."); all synsets of one headword (every
  sense of "order") form one document (``--per-synset``: one document per synset).
* ``dict-devil``: Ambrose Bierce's *The Devil's Dictionary* (public domain), one document per entry.

Output (``--out``, default ``data/``): ``corpus.txt`` and ``heldout.txt`` (one document per line,
deduplicated, shuffled with ``--seed``; a line goes to the held-out set when a hash of its text falls
in the ``--heldout-frac`` share, so the split does not depend on the order of the sources) and
``manifest.json`` (counts, package versions, checksums).

The tokenizer (``--tokenizer-out``, default ``assets/petri-tiny/``) is a byte-level BPE trained with
``tokenizers`` on ``corpus.txt`` only: vocabulary 4,096, special tokens ``<pad>``=0, ``<eos>``=1,
``<bos>``=2, ``<unk>``=3, nothing added automatically around an encoded text. Saved with
``PreTrainedTokenizerFast`` so ``AutoTokenizer.from_pretrained`` loads it.

    apt-get install -y wordnet-base dict-devil
    python experiments/build_corpus.py            # writes data/ and assets/petri-tiny/tokenizer*
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORDNET_DIR = Path("/usr/share/wordnet")
DEVIL_DICT = Path("/usr/share/dictd/devil.dict.dz")
DEVIL_INDEX = Path("/usr/share/dictd/devil.index")
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0, 1, 2, 3 in this order
DEBIAN_PACKAGES = ["wordnet-base", "dict-devil"]

_QUOTED = re.compile(r'"([^"]*)"')
_LEADING_PAREN = re.compile(r"^\((?:[^()]|\([^()]*\))*\)\s*")
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")
_WS = re.compile(r"\s+")
_DETERMINERS = {
    "a", "an", "the", "any", "one", "some", "someone", "something", "anyone", "anything",
    "each", "every", "either", "two", "three", "four", "five", "several", "many", "all",
}


# --------------------------------------------------------------------------------------- WordNet
def _sentence(text: str) -> str:
    """Capitalise the first letter and end with a full stop unless already punctuated."""
    text = _WS.sub(" ", text).strip().strip(";").strip()
    if not text:
        return ""
    if text[-1] not in ".!?":
        text += "."
    return text[0].upper() + text[1:]


def _split_gloss(gloss: str) -> tuple[str, list[str]]:
    """Split a WordNet gloss into its definition text and its quoted example sentences."""
    examples = [e.strip() for e in _QUOTED.findall(gloss) if len(e.split()) >= 2]
    rest = _QUOTED.sub("\x00", gloss)
    definitions = []
    for chunk in rest.split(";"):
        chunk = chunk.strip()
        # Attributions after an example ("..." - Shakespeare) and empty remnants are dropped.
        if not chunk or "\x00" in chunk:
            continue
        definitions.append(chunk)
    return "; ".join(definitions), examples


def _definition_sentence(pos: str, lemma: str, definition: str) -> str:
    definition = _LEADING_PAREN.sub("", definition).strip()
    if not definition:
        return ""
    if pos == "n":
        if definition.split()[0].lower() not in _DETERMINERS:
            # "water: binary compound that ..." -- no safe article for mass nouns and names
            return _sentence(f"{lemma}: {definition}")
        if lemma[:1].isupper():
            subject = lemma
        else:
            article = "An" if lemma[:1].lower() in "aeiou" else "A"
            subject = f"{article} {lemma}"
        return _sentence(f"{subject} is {definition}")
    if pos == "v":
        definition = re.sub(r"^to\s+", "", definition)
        return _sentence(f"To {lemma} is to {definition}")
    return _sentence(f"{lemma} means {definition}")  # adjectives (a, s) and adverbs (r)


def wordnet_documents(wordnet_dir: Path = WORDNET_DIR, group_senses: bool = True) -> list[str]:
    """WordNet as documents: per synset, the gloss as a sentence, then its example sentences.

    With ``group_senses`` (the default) all synsets whose first word is the same (every sense of
    "order", as noun and as verb) form one document, so that a 64-token canvas after a prefix mostly
    continues the same topic instead of crossing into an unrelated entry.
    """
    groups: dict[str, list[str]] = {}
    for name in ("noun", "verb", "adj", "adv"):
        path = wordnet_dir / f"data.{name}"
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(" ") or " | " not in line:
                    continue  # license header
                head, gloss = line.split(" | ", 1)
                fields = head.split()
                pos = fields[2]
                lemma = _ADJ_MARKER.sub("", fields[4]).replace("_", " ")
                definition, examples = _split_gloss(gloss.strip())
                parts = [_definition_sentence(pos, lemma, definition)]
                parts += [_sentence(e) for e in examples]
                doc = " ".join(p for p in parts if p)
                if not doc:
                    continue
                key = lemma.lower() if group_senses else f"{len(groups)}"
                senses = groups.setdefault(key, [])
                if doc not in senses:
                    senses.append(doc)
    return [" ".join(senses) for senses in groups.values()]


# ------------------------------------------------------------------------------- Devil's Dictionary
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DEVIL_HEAD = re.compile(r"^([A-Z][A-Z'\- ]*[A-Z]|[A-Z]),\s+([a-z. ]+?\.)\s+")


def _b64(value: str) -> int:
    n = 0
    for ch in value:
        n = n * 64 + _B64.index(ch)
    return n


def devil_documents(dict_path: Path = DEVIL_DICT, index_path: Path = DEVIL_INDEX) -> list[str]:
    """One document per entry of The Devil's Dictionary ("Abasement: A decent and customary ...")."""
    data = gzip.open(dict_path, "rb").read()  # dictzip files are valid gzip files
    docs = []
    seen_offsets = set()
    for line in index_path.read_text(encoding="utf-8").splitlines():
        word, offset, length = line.split("\t")
        if word.startswith("00database") or offset in seen_offsets:
            continue
        seen_offsets.add(offset)
        start, size = _b64(offset), _b64(length)
        text = data[start : start + size].decode("utf-8", errors="replace")
        text = _WS.sub(" ", text.replace("_", "")).strip()
        m = _DEVIL_HEAD.match(text)
        if not m:
            continue
        body = text[m.end() :].strip()
        if len(body.split()) < 3:
            continue
        docs.append(f"{m.group(1).capitalize()}: {body}")
    return docs


# ------------------------------------------------------------------------------------- the corpus
def is_heldout(line: str, frac: float) -> bool:
    """Whether ``line`` falls in the held-out share ``frac``, by a hash of its text (order-independent)."""
    h = int.from_bytes(hashlib.sha1(line.encode("utf-8")).digest()[:8], "big")
    return h / 2**64 < frac


def package_versions(packages=DEBIAN_PACKAGES) -> dict[str, str]:
    versions = {}
    for pkg in packages:
        try:
            out = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            out = "unknown"
        versions[pkg] = out
    return versions


def build_corpus(out_dir: Path, seed: int = 0, heldout_frac: float = 0.02, group_senses: bool = True) -> dict:
    for path in (WORDNET_DIR / "data.noun", DEVIL_DICT, DEVIL_INDEX):
        if not path.exists():
            sys.exit(f"missing {path}: run `apt-get install -y {' '.join(DEBIAN_PACKAGES)}` first")
    sources = {"wordnet-base": wordnet_documents(group_senses=group_senses), "dict-devil": devil_documents()}
    seen: set[str] = set()
    train, heldout = [], []
    per_source = {}
    for name, docs in sources.items():
        kept = 0
        for doc in docs:
            if doc in seen:
                continue
            seen.add(doc)
            kept += 1
            (heldout if is_heldout(doc, heldout_frac) else train).append(doc)
        per_source[name] = {"documents": kept, "words": sum(len(d.split()) for d in docs)}
    rng = random.Random(seed)
    train.sort()
    heldout.sort()
    rng.shuffle(train)
    rng.shuffle(heldout)
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, lines in (("corpus.txt", train), ("heldout.txt", heldout)):
        (out_dir / fname).write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest = {
        "seed": seed,
        "heldout_frac": heldout_frac,
        "group_senses": group_senses,
        "documents": {"corpus": len(train), "heldout": len(heldout)},
        "sources": per_source,
        "debian_packages": package_versions(),
        "sha256": {
            f: hashlib.sha256((out_dir / f).read_bytes()).hexdigest() for f in ("corpus.txt", "heldout.txt")
        },
    }
    return manifest


# ---------------------------------------------------------------------------------- the tokenizer
def train_tokenizer(corpus_path: Path, out_dir: Path, vocab_size: int = 4096):
    """Train the byte-level BPE on ``corpus_path`` and save it in Hugging Face format to ``out_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def lines():
        with corpus_path.open(encoding="utf-8") as fh:
            for line in fh:
                yield line.rstrip("\n")

    tok.train_from_iterator(lines(), trainer=trainer)
    for i, special in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(special) == i, (special, tok.token_to_id(special))

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    # Older and newer transformers differ on whether this file is written; write it explicitly.
    special_map = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>"}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")
    return fast


def check_tokenizer(path: Path, vocab_size: int = 4096) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    assert len(tok) == vocab_size, (len(tok), vocab_size)
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    for text in (" order", "The order was shipped.", "An inventory of 12 units"):
        ids = tok.encode(text, add_special_tokens=True)
        assert tok.decode(ids) == text, (text, tok.decode(ids))
    mid = tok.tokenize("the order")
    assert mid[-1].startswith("Ġ"), mid  # a word mid-sentence carries its leading space


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "data")
    ap.add_argument("--tokenizer-out", type=Path, default=REPO / "assets" / "petri-tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout-frac", type=float, default=0.02)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--no-tokenizer", action="store_true", help="only write the corpus")
    ap.add_argument("--per-synset", action="store_true",
                    help="one WordNet document per synset instead of one per headword (all its senses)")
    args = ap.parse_args(argv)

    manifest = build_corpus(args.out, seed=args.seed, heldout_frac=args.heldout_frac,
                            group_senses=not args.per_synset)
    if not args.no_tokenizer:
        tok = train_tokenizer(args.out / "corpus.txt", args.tokenizer_out, args.vocab_size)
        check_tokenizer(args.tokenizer_out, args.vocab_size)
        counts = {}
        for fname in ("corpus.txt", "heldout.txt"):
            text = (args.out / fname).read_text(encoding="utf-8").splitlines()
            enc = tok.backend_tokenizer.encode_batch(text, add_special_tokens=False)
            # one <eos> after every document, as train_tiny.py packs them
            counts[fname] = sum(len(e.ids) + 1 for e in enc)
        manifest["tokens"] = counts
        tok_path = args.tokenizer_out.resolve()
        manifest["tokenizer"] = {
            "vocab_size": len(tok),
            "path": str(tok_path.relative_to(REPO) if tok_path.is_relative_to(REPO) else tok_path),
            "sha256": hashlib.sha256((tok_path / "tokenizer.json").read_bytes()).hexdigest(),
        }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
