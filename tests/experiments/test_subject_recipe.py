"""The English subject's recipe (issue 47) must not rot: the teacher's corpus writer on a tiny random
llama, the corpus builder's filters and split, the paired training windows, the benchmark's measures.
Expected values are worked by hand here, never taken from the functions under test."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from experiment_support import experiment_script

teacher_corpus = experiment_script("teacher_corpus")
teacher_prompts = experiment_script("teacher_prompts")
subject_corpus = experiment_script("subject_corpus")
subject_data = experiment_script("subject_data")


def test_event_requests_are_planned_from_the_seed():
    a = teacher_corpus.event_requests(0, 2)
    assert len(a) == len(teacher_prompts.DOMAINS) * 2 * 2
    assert [r.text for r in a] == [r.text for r in teacher_corpus.event_requests(0, 2)]
    assert [r.text for r in a] != [r.text for r in teacher_corpus.event_requests(1, 2)]
    first = a[0]
    domain = teacher_prompts.DOMAINS[0]
    assert first.text.startswith(teacher_prompts.EVENT_LEAD["benign"].format(place=domain["place"]))
    assert first.text.endswith("\n3.") and not first.chat
    assert {e for e in domain["benign"]} == {line[3:] for line in first.text.split("\n")[1:3]}
    assert len({r.id for r in a}) == len(a)


@pytest.mark.parametrize("raw, expected", [
    (" A nurse moved the bed to the window.\n4. Another one.", "A nurse moved the bed to the window."),
    (" a nurse moved the bed to the window.", None),            # not a sentence start
    (" A nurse moved the bed.", None),                           # five words
    (" A nurse moved the bed to the window", None),              # no full stop
    (" A nurse moved the **bed** to the window.", None),         # markdown
    (" A nurse moved the bed to the café window.", None),        # not ASCII
])
def test_clean_event(raw, expected):
    assert teacher_corpus.clean_event(raw) == expected


def test_answer_requests_go_round_by_round_with_the_domains_words():
    events = [{"id": "e1", "domain": "hospital wards", "text": "A nurse moved the bed."},
              {"id": "e2", "domain": "farms and harvests", "text": "The farmer sold the wheat."}]
    requests = teacher_corpus.answer_requests(events, 3, seed=0)
    assert [r.meta["event_id"] for r in requests] == ["e1", "e2"] * 3
    words = {d["name"]: set(d["concepts"]) for d in teacher_prompts.DOMAINS}
    templates = dict(teacher_prompts.TEMPLATES)
    for r, event in zip(requests, events * 3):
        assert set(r.meta["concepts"]) <= words[event["domain"]] and 2 <= len(r.meta["concepts"]) <= 4
        assert r.text == templates[r.meta["template_id"]].format(event=event["text"],
                                                                 concepts=", ".join(r.meta["concepts"]))
        assert r.chat
    assert requests == teacher_corpus.answer_requests(events, 3, seed=0)


def test_sample_left_pads_and_counts_new_tokens(tiny_teacher):
    model, tok = teacher_corpus.load_teacher(tiny_teacher, torch.device("cpu"))
    prompts = [teacher_corpus.chat_ids(tok, "hello"), teacher_corpus.chat_ids(tok, "a much longer request here")]
    texts, count = teacher_corpus.sample(model, tok, prompts, seed=1, max_new_tokens=5, temperature=1.0, top_p=1.0)
    assert len(texts) == 2 and 2 <= count <= 10
    # a row alone gives what it gives in the batch when the sampling is greedy-equivalent: check
    # instead that the seed fixes the draw
    again, _ = teacher_corpus.sample(model, tok, prompts, seed=1, max_new_tokens=5, temperature=1.0, top_p=1.0)
    assert again == texts


def test_writer_runs_resumes_and_rolls_parts(tiny_teacher, tmp_path, monkeypatch):
    out = tmp_path / "t"
    argv = ["--teacher", str(tiny_teacher), "--out", str(out), "--device", "cpu", "--events-per-group", "1",
            "--answers-per-event", "1", "--prose-per-topic", "1", "--batch-size", "16", "--minutes", "5",
            "--event-tokens", "6", "--answer-tokens", "6", "--prose-tokens", "6"]
    meta = teacher_corpus.main(argv)
    events = teacher_corpus.read_records(teacher_corpus.stage_parts(out, "events"))
    prose = teacher_corpus.read_records(teacher_corpus.stage_parts(out, "prose"))
    assert len(events) == len(teacher_prompts.DOMAINS) * 2
    assert all("raw" in e and e["group"] in ("benign", "contradictory") for e in events)
    assert len(prose) == len(teacher_prompts.PROSE_TOPICS)
    assert meta["stages"]["events"]["requests"] == len(events)
    assert json.loads((out / "run.json").read_text())["stages"]["prose"]["written"] == len(prose)
    before = {p.name: p.read_bytes() for p in out.glob("*.jsonl.gz")}
    teacher_corpus.main(argv)  # everything done already: nothing new is written
    assert {p.name: p.read_bytes() for p in out.glob("*.jsonl.gz")} == before
    # a torn last member (a killed run) is ignored, not fatal
    with (out / "prose.jsonl.gz").open("ab") as f:
        f.write(gzip.compress(b'{"id": "x"}\n')[:15])
    assert len(teacher_corpus.read_records(teacher_corpus.stage_parts(out, "prose"))) == len(prose)
    # past PART_BYTES a stage rolls over to the next part
    monkeypatch.setattr(teacher_corpus, "PART_BYTES", 10)
    teacher_corpus.append_records(out, "answers", [{"id": "a"}])
    teacher_corpus.append_records(out, "answers", [{"id": "b"}])
    assert [p.name for p in teacher_corpus.stage_parts(out, "answers")][-2:] == ["answers.jsonl.gz", "answers-1.jsonl.gz"]
    assert [r["id"] for r in teacher_corpus.read_records(teacher_corpus.stage_parts(out, "answers"))][-2:] == ["a", "b"]


# ------------------------------------------------------------------------------ the corpus builder
def _write_teacher(folder: Path, events, answers, prose):
    folder.mkdir(parents=True)
    for stage, records in (("events", events), ("answers", answers), ("prose", prose)):
        with gzip.open(folder / f"{stage}.jsonl.gz", "wt") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records))


LONG = "The clerk counted the stock and found that the order could be filled from the shelf today. " * 2


def test_builder_filters_dedupes_and_splits_by_event(tmp_path):
    events = [{"id": f"e{i}", "domain": "stock and orders", "group": "benign", "text": f"Event number {i} happened."}
              for i in range(40)]
    events.append({"id": "dup", "domain": "stock and orders", "group": "benign", "text": "EVENT NUMBER 3 HAPPENED."})
    answers = []
    for i in range(40):
        for k in range(3):
            answers.append({"id": f"e{i}a{k}", "event_id": f"e{i}", "concepts": ["order"], "template_id": "t1",
                            "prompt": f"p{i}", "answer": f"**Note {i}.{k}:** " + LONG})
    answers += [
        {"id": "s", "event_id": "e0", "concepts": [], "template_id": "t1", "prompt": "p", "answer": "Too short."},
        {"id": "r", "event_id": "e0", "concepts": [], "template_id": "t1", "prompt": "p",
         "answer": "I'm sorry, but " + LONG},
        {"id": "d", "event_id": "dup", "concepts": [], "template_id": "t1", "prompt": "p", "answer": "Note 0.0: " + LONG},
        {"id": "x", "event_id": "gone", "concepts": [], "template_id": "t1", "prompt": "p", "answer": LONG},
    ]
    prose = [{"id": "p1", "topic": "t", "text": "Curly \u201cquotes\u201d \u2014 and   spaces " + LONG}]
    _write_teacher(tmp_path / "run", events, answers, prose)
    manifest = subject_corpus.build([tmp_path / "run"], tmp_path / "out", heldout_frac=0.3, min_answer_words=30,
                                    min_prose_words=20, seed=0)
    f = manifest["filters"]
    assert f["events"] == {"kept": 40, "duplicate": 1}
    # 120 good answers kept; dropped: the short one, the refusal, the one whose cleaned text repeats
    # e0's first answer, and the one whose event was never written
    assert f["answers"] == {"kept": 120, "short": 1, "refusal": 1, "duplicate": 1, "no event": 1}
    train = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (tmp_path / "out" / "heldout.jsonl").read_text().splitlines()]
    pairs_train = {r["event_id"] for r in train if r["kind"] == "pair"}
    pairs_held = {r["event_id"] for r in held if r["kind"] == "pair"}
    assert pairs_train and pairs_held and not pairs_train & pairs_held
    held_events = [json.loads(x) for x in (tmp_path / "out" / "heldout_events.jsonl").read_text().splitlines()]
    assert {e["id"] for e in held_events} == pairs_held
    pair = next(r for r in train + held if r["kind"] == "pair")
    assert "**" not in pair["text"] and pair["text"].startswith("Note ")
    text = next(r["text"] for r in train + held if r["kind"] == "prose")
    assert text.startswith('Curly "quotes" - and spaces The clerk')


def test_text_problem():
    assert subject_corpus.text_problem("word " * 10, 30) == "short"
    assert subject_corpus.text_problem("the " * 40, 30) == "repetitive"
    assert subject_corpus.text_problem(LONG + " caf\u00e9", 20) == "non-ascii"
    assert subject_corpus.text_problem(LONG, 20) is None


# ------------------------------------------------------------------------------ training windows
def test_pair_windows_lay_out_bos_prompt_then_canvas():
    from petri.engine.torch.tiny import build_tiny_tokenizer

    tok = build_tiny_tokenizer()._tokenizer  # a tokenizers.Tokenizer, as the trainers use
    special = {"pad": 0, "eos": 1, "bos": 2}
    records = [{"kind": "pair", "prompt": "the order", "text": "the stock was counted by the manager of the store"},
               {"kind": "pair", "prompt": "a customer ordered", "text": "ten"},
               {"kind": "prose", "text": "The supplier delivered new stock. " * 6}]
    windows = subject_data.build_windows(tok, records, special, canvas=6)
    prompt0 = tok.encode("the order", add_special_tokens=False).ids
    answer0 = tok.encode(records[0]["text"], add_special_tokens=False).ids
    p0 = len(prompt0) + 1
    start0 = int(windows.pair_starts[p0][0])
    assert start0 == 0
    assert windows.stream[: p0 + 6].tolist() == [2, *prompt0, *answer0[:6]]
    prompt1 = tok.encode("a customer ordered", add_special_tokens=False).ids
    answer1 = tok.encode("ten", add_special_tokens=False).ids
    p1 = len(prompt1) + 1
    start1 = int(windows.pair_starts[p1][0])
    assert start1 == p0 + 6
    tail = windows.stream[start1 + p1: start1 + p1 + 6].tolist()
    assert tail == [*answer1, 1] + [0] * (6 - len(answer1) - 1)
    assert windows.prose_region[0] == start1 + p1 + 6 and windows.pairs == 2
    rng = np.random.default_rng(0)
    for _ in range(20):
        p, starts = windows.draw(rng, 4, prose_share=0.0, min_prefix=2, max_prefix=4, doc_start_frac=1.0)
        assert (p, set(starts.tolist()) <= {start0}) == (p0, True) or (p, set(starts.tolist()) <= {start1}) == (p1, True)
    p, starts = windows.draw(rng, 4, prose_share=1.0, min_prefix=2, max_prefix=4, doc_start_frac=1.0)
    assert 2 <= p <= 4 and set(starts.tolist()) == {windows.prose_region[0]}
    groups = windows.heldout_batches(10, seed=0)
    assert sorted((p, s.tolist()) for p, s in groups) == sorted([(p0, [start0]), (p1, [start1])])


def test_trainers_take_a_subject_corpus(tmp_path):
    """train_tiny and train_tiny_mdm smoke-train on train.jsonl / heldout.jsonl and report the pairs' CE."""
    tokenizer = Path(__file__).resolve().parents[2] / "assets" / "petri-tiny"
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"kind": "pair", "prompt": f"Event: order {i} arrived.\nDescribe order, stock.", "text": LONG}
            for i in range(60)] + [{"kind": "prose", "text": LONG * 3} for _ in range(5)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:8]))
    small = experiment_script("train_tiny").main(["--smoke", "--data", str(data), "--tokenizer", str(tokenizer),
                                                  "--out", str(tmp_path / "u"), "--max-steps", "4"])
    assert small["heldout_canvas_ce_prefix"] == "pairs" and set(small["heldout_canvas_ce"]) == {"0.25", "0.5", "0.75", "1.0"}
    mdm = experiment_script("train_tiny_mdm").main(["--smoke", "--data", str(data), "--tokenizer", str(tokenizer),
                                                    "--out", str(tmp_path / "m")])
    assert set(mdm["heldout_masked_ce"]) == {"0.25", "0.5", "0.75", "1.0"}


# ------------------------------------------------------------------------------------ the benchmark
def test_dictionary_share_by_hand():
    bench = experiment_script("subject_bench")
    words = frozenset({"the", "order", "was", "shipped", "customer"})
    found, total = bench.dictionary_share(["The order was shiped.", "customer's 120 orders!"], words)
    # words: the, order, was, shiped | customer's, orders -> 4 found (the, order, was, customer's) of 6
    assert (found, total) == (4, 6)


def test_a_canvas_that_ended_early_is_scored_without_its_end_marks():
    bench = experiment_script("subject_bench")

    class Marks:
        eos_token, pad_token = "<eos>", "<pad>"

    assert bench.before_end("The order shipped.<eos><pad><pad>", Marks) == "The order shipped."
    assert bench.before_end("The order <pad><pad>", Marks) == "The order"
    assert bench.before_end("No end here", Marks) == "No end here"
    # petri-tiny's canvases open with <eos> (its entries' separator): the answer is what follows it
    assert bench.before_end("<eos>A hart is a deer.<eos>A trot is", Marks) == "A hart is a deer."
    assert bench.before_end(" <eos><pad> The order<eos>", Marks) == "The order"
    assert bench.before_end("<eos><pad>", Marks) == ""


def test_teacher_nll_matches_a_row_by_row_reference(tiny_teacher):
    bench = experiment_script("subject_bench")
    model, tok = teacher_corpus.load_teacher(tiny_teacher, torch.device("cpu"))
    prompts, answers = ["the order", "a customer ordered ten units"], ["was shipped today", "the stock"]
    total, count = bench.teacher_nll(model, tok, prompts, answers, batch_size=2)
    ref_total, ref_count = 0.0, 0
    for prompt, answer in zip(prompts, answers):  # unpadded, one row at a time
        head = teacher_corpus.chat_ids(tok, prompt)
        body = tok.encode(answer, add_special_tokens=False)
        ids = torch.tensor([head + body])
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        for j, token in enumerate(body):
            ref_total -= float(logp.detach()[len(head) + j - 1, token])
        ref_count += len(body)
    assert count == ref_count
    assert total == pytest.approx(ref_total, rel=1e-4)
