"""The Probe tab's pure pieces (no Gradio): the question editor's rows and the requests they make,
the frame on the canvas control, the figures (per-slot bars, the settling over steps, the
reliability diagram), the answers table, and a probe run's row in the Runs tab.

A read's document is :func:`petri.runs.probe_results.read_document` (``reads``: one entry per
question × step, with ``alternatives`` and ``probs``); an evaluation's tables are the
:class:`~petri.study.probe.probe_eval.ProbeEvaluation`'s, as stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from petri.core.probe import ProbeInputError, ProbeRequest
from petri.core.wording import counted
from petri.engine.probe import layout_probe
from petri.runs.probe_results import EVAL_KIND, PROBE_KIND
from petri.web.tokens import PALETTE
from petri.web.ui.views import phone_table_css, responsive

if TYPE_CHECKING:
    from petri.engine.base import SamplingModel

QUESTION_COLUMNS = ["name", "slot", "alternatives", "labels", "ask_if"]
FRAME_COLOR = "#6b7280"
#: a question with more alternatives than this settles as a heat map, not as one line each
MAX_LINES = 8


#: the room above the first subplot (px): the figure's title sits in its top half, the subplot's own
#: title (drawn just above the subplot) in its bottom half, so the two never overlap
TITLE_ROOM_PX = 76


def figure_title(text: str) -> dict:
    """A figure title pinned to the figure's top edge (above the subplot titles)."""
    return {"text": text, "y": 1.0, "yref": "container", "yanchor": "top", "pad": {"t": 8}, "x": 0.01,
            "xanchor": "left", "font": {"size": 15}}


def _split(text) -> list[str]:
    return [part.strip() for part in str(text or "").split(",") if part.strip()]


def question_rows(questions: list[dict]) -> list[list[str]]:
    """The editor's rows of ``questions`` (the request's JSON): name, slot, alternatives and labels
    comma-separated, ``ask_if`` as ``question=alternative`` pairs."""
    return [[q["name"], q.get("slot") or q["name"], ", ".join(q["alternatives"]), ", ".join(q.get("labels") or []),
             ", ".join(f"{k}={v}" for k, v in (q.get("ask_if") or {}).items())] for q in questions]


def questions_of(rows) -> list[dict]:
    """The request's ``questions`` from the editor's rows (a DataFrame or lists); blank rows are
    left out, a blank slot is the name, blank labels are automatic, a blank ``ask_if`` is none."""
    values = rows.values.tolist() if isinstance(rows, pd.DataFrame) else list(rows or [])
    questions = []
    for row in values:
        name, slot, alternatives, labels, ask_if = [str(v if v is not None else "").strip() for v in
                                                    (list(row) + [""] * 5)[:5]]
        if not (name or alternatives):
            continue
        question: dict = {"name": name, "alternatives": _split(alternatives)}
        if slot:
            question["slot"] = slot
        if _split(labels):
            question["labels"] = _split(labels)
        if ask_if:
            pairs = [p.split("=", 1) for p in _split(ask_if)]
            question["ask_if"] = {k.strip(): (v[0].strip() if v else "") for k, *v in pairs}
        questions.append(question)
    return questions


def frame_canvas(lm: SamplingModel, request: ProbeRequest | None, error: str = "") -> dict:
    """The canvas control's value for ``request`` on ``lm``: the pinned prefix, each run of pinned
    frame text a grey chip (its text as the label), each slot a coloured one-position chip, all
    ``fixed`` (the frame's text places them); or an empty canvas carrying ``error`` where the request
    cannot be laid out."""
    empty = {"canvas_length": int(lm.canvas_length), "prefix": 0, "chips": [], "error": error, "seq": None,
             "fixed": True}
    if request is None:
        return empty
    try:
        plan = layout_probe(lm, request)
    except ProbeInputError as err:
        return {**empty, "error": str(err)}
    layout, prefix = plan.layout, len(plan.prefix_ids)
    slot_at = {at: name for name, at in layout.slots.items()}
    chips: list = []
    run: list[int] = []

    def close() -> None:
        if run:
            text = lm.tokenizer.decode([layout.pinned_ids[p] for p in run]).strip() or "·"
            chips.append({"concept": text[:24], "start": run[0], "tokens": len(run), "color": FRAME_COLOR})
            run.clear()

    for p in range(prefix, len(layout.pinned)):
        if layout.pinned[p] and p not in slot_at:
            run.append(p)
            continue
        close()
        if p in slot_at:
            chips.append({"concept": "{{" + slot_at[p] + "}}", "start": p, "tokens": 1,
                          "color": PALETTE[len([c for c in chips if c["color"] != FRAME_COLOR]) % len(PALETTE)]})
    close()
    return {**empty, "prefix": prefix, "chips": chips}


def _final_reads(document: dict) -> list[dict]:
    last: dict[str, dict] = {}
    for read in document.get("reads", []):
        last[read["question"]] = read
    return list(last.values())


def percent(share: float) -> str:
    """A share as a percentage of two significant digits ("13", "0.48", "100")."""
    value = 100 * float(share)
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def mass_words(read: dict) -> str:
    """The mass on a read's labels in words: "13 % of the model's probability is on these labels"."""
    return f"{percent(read['mass'])} % of the model's probability is on these labels"


def answer_words(read: dict) -> str:
    """A read's answer with its share of the labels' probability and, always, its mass in words; a
    null answer as "no answer (only 13 % … ; 50 % needed)"."""
    if read["answer"] is None:
        return (f"no answer (only {mass_words(read)}; {percent(read.get('min_mass', 0.0))} % needed for an answer)")
    share = read["probs"][read["alternatives"].index(read["answer"])]
    return f"{read['answer']}: {share:.2f} of the labels' probability; {mass_words(read)}"


def number(value, digits: int = 2) -> str:
    """``value`` rounded to ``digits`` significant digits ("0.67", "0.034", "1"); "–" for none."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    return f"{float(value):.{digits}g}" if abs(float(value)) >= 1e-9 else "0"  # an interval's 5.6e-17 is 0


def _labelled(read: dict) -> list[str]:
    labels = read.get("labels") or [""] * len(read["alternatives"])
    return [f"{alt} ({label})" if label else alt for alt, label in zip(read["alternatives"], labels)]


def bars_figure(document: dict) -> go.Figure | None:
    """One horizontal bar chart per question read: its alternatives' probabilities at the last step
    read (the answer in its colour, the rest grey)."""
    finals = _final_reads(document)
    if not finals:
        return None
    heights = [max(1, len(r["alternatives"])) for r in finals]
    fig = make_subplots(rows=len(finals), cols=1, row_heights=heights, vertical_spacing=0.35 / max(1, len(finals)),
                        subplot_titles=[f"{r['question']}: {r['answer'] if r['answer'] is not None else 'no answer'} "
                                        f"(step {r['step'] + 1}, {r.get('orders', 1)} order"
                                        f"{'s' if r.get('orders', 1) != 1 else ''})<br>{mass_words(r)}" for r in finals])
    for row, (read, color) in enumerate(zip(finals, PALETTE * len(finals)), 1):
        colors = [color if alt == read["answer"] else "#cbd5e1" for alt in read["alternatives"]]
        fig.add_trace(go.Bar(x=read["probs"], y=_labelled(read), orientation="h", marker_color=colors,
                             text=[f"{p:.2f}" for p in read["probs"]], textposition="auto", name=read["question"],
                             hovertemplate="%{y}: %{x:.3f}<extra></extra>"), row=row, col=1)
        fig.update_xaxes(range=[0, 1], row=row, col=1)
        fig.update_yaxes(autorange="reversed", automargin=True, row=row, col=1)
    fig.update_annotations(font={"size": 12})
    fig.update_layout(showlegend=False, height=140 + 26 * sum(heights) + 80 * len(finals),
                      margin={"l": 10, "r": 10, "t": TITLE_ROOM_PX + 16, "b": 30},
                      title=figure_title("Each alternative's share of the labels' probability"))
    return responsive(fig)


def settling_figure(document: dict) -> go.Figure | None:
    """How each question's alternatives settled over the steps read (None for a one-step read):
    one line per alternative, or a heat map (alternatives × steps) past :data:`MAX_LINES`."""
    reads = document.get("reads", [])
    steps = max((r["step"] for r in reads), default=0) + 1
    if steps < 2:
        return None
    names = list(dict.fromkeys(r["question"] for r in reads))
    fig = make_subplots(rows=len(names), cols=1, subplot_titles=names, vertical_spacing=0.3 / max(1, len(names)))
    for row, name in enumerate(names, 1):
        mine = sorted((r for r in reads if r["question"] == name), key=lambda r: r["step"])
        x = [r["step"] + 1 for r in mine]
        labels = _labelled(mine[0])
        if len(labels) > MAX_LINES:
            fig.add_trace(go.Heatmap(z=[[r["probs"][i] for r in mine] for i in range(len(labels))], x=x, y=labels,
                                     zmin=0, zmax=1, colorscale="Blues", showscale=row == 1,
                                     hovertemplate="step %{x}, %{y}: %{z:.3f}<extra></extra>"), row=row, col=1)
        else:
            for i, (label, color) in enumerate(zip(labels, PALETTE * len(labels))):
                fig.add_trace(go.Scatter(x=x, y=[r["probs"][i] for r in mine], mode="lines+markers", name=label,
                                         line={"color": color}, legendgroup=name,
                                         hovertemplate=f"{label}, step %{{x}}: %{{y:.3f}}<extra></extra>"), row=row, col=1)
            fig.update_yaxes(range=[0, 1], row=row, col=1)
        fig.update_xaxes(title_text="step", dtick=1, row=row, col=1)
    fig.update_layout(height=160 + 260 * len(names), margin={"l": 10, "r": 10, "t": TITLE_ROOM_PX, "b": 30},
                      title=figure_title("How the slot settled over the steps"), legend={"orientation": "h", "y": -0.15})
    return responsive(fig)


ANSWER_COLUMNS = ["question", "answer", "orders", "read"]
#: the answers table's column widths (shares of the table, so it fits a 420 px screen)
ANSWER_WIDTHS: list[str | int] = ["18%", "48%", "17%", "17%"]
#: On a phone: room for a header and a question name ("consistent") whole at 13 px (at 18 % they broke
#: as "quest/ion", "order/s", "consi/stent" at 420 px); the answer's words wrap.
ANSWERS_PHONE_CSS = phone_table_css("petri-probe-answers", ANSWER_COLUMNS,
                                    {"question": 27, "answer": 39, "orders": 17, "read": 17})


def answers_table(document: dict) -> pd.DataFrame:
    """Each question read: its answer in words (:func:`answer_words`: the answer's share of the
    labels' probability and the mass on the labels, or "no answer"), the orders read with the
    largest spread of an alternative over them, the draws and steps; then the skipped ones."""
    rows = [[r["question"], answer_words(r),
             f"{r.get('orders', 1)}" + (f", spread {number(max(r['spread']))}" if r.get("orders", 1) > 1 else ""),
             f"{r['draws']} draw{'s' if r['draws'] != 1 else ''}, {r['step'] + 1} step{'s' if r['step'] else ''}"]
            for r in _final_reads(document)]
    rows += [[name, "(skipped: ask_if did not match)", "", ""] for name in document.get("skipped", [])]
    return pd.DataFrame(rows, columns=ANSWER_COLUMNS)


def _share(row: dict, name: str, low: str, high: str) -> str:
    return f"{number(row.get(name))} [{number(row.get(low))}, {number(row.get(high))}]"


#: the evaluation summary's measures as shown, one row each (the CSV keeps the long names, docs/probe.md)
SUMMARY_VIEW = {"question": "measure", "answered": "answered of n (coverage)",
                "accuracy": "accuracy, answered", "with_abstentions": "accuracy, no answer = wrong",
                "first": "first listed: answers vs gold", "commonest": "always the commonest gold",
                "calibration": "ECE / Brier (answered)", "mass": "mass on labels", "spread": "order spread",
                "changed": "changed over repeats"}


SUMMARY_VIEW_COLUMNS = ["question", "measure", "value"]
SUMMARY_VIEW_WIDTHS: list[str | int] = ["22%", "38%", "40%"]


def summary_view(summary: pd.DataFrame) -> pd.DataFrame:
    """An evaluation's summary (:data:`petri.study.probe.probe_eval.SUMMARY_COLUMNS`) as the tab shows it:
    one row per question and measure (:data:`SUMMARY_VIEW`'s words), so it stays three columns
    wide on a phone; each share rounded to two significant digits with its Wilson interval."""
    columns = {}
    for row in summary.to_dict("records"):
        mass = row.get("mean_mass")
        columns[str(row["question"])] = [
            f"{row.get('answered', row['n'])} of {row['n']} ({_share(row, 'coverage', 'coverage_low', 'coverage_high')})",
            _share(row, "accuracy", "wilson_low", "wilson_high"),
            _share(row, "accuracy_with_abstentions", "with_abstentions_low", "with_abstentions_high"),
            f"{_share(row, 'answers_first', 'answers_first_low', 'answers_first_high')} vs "
            f"{_share(row, 'gold_first', 'gold_first_low', 'gold_first_high')}",
            number(row.get("commonest_gold_share")), f"{number(row.get('ece'))} / {number(row.get('brier'))}",
            f"{percent(mass)} %" if mass is not None and np.isfinite(mass) else "–", number(row.get("mean_order_spread")),
            f"{number(row.get('changed_share'))} over {row.get('repeats')}"]
    rows = [[question, measure, value] for question, values in columns.items()
            for measure, value in zip(list(SUMMARY_VIEW.values())[1:], values)]
    return pd.DataFrame(rows, columns=SUMMARY_VIEW_COLUMNS)


#: the predictions as shown (the full table is in the downloads), short headers
PREDICTION_VIEW = {"item_id": "item", "question": "question", "repeat": "repeat", "gold": "gold", "answer": "answer",
                   "p_answer": "p", "mass": "mass", "order_spread": "spread", "correct": "right"}


def predictions_view(predictions: pd.DataFrame) -> pd.DataFrame:
    """The predictions under short headers, numbers to three significant digits, a null answer as
    "no answer"."""
    shown = predictions.reindex(columns=list(PREDICTION_VIEW)).copy()
    shown["answer"] = shown["answer"].where(shown["answer"].notna(), "no answer")
    for column in ("p_answer", "mass", "order_spread"):
        shown[column] = [number(v, 3) for v in shown[column]]
    return shown.rename(columns=PREDICTION_VIEW)


def reliability_figure(reliability: pd.DataFrame) -> go.Figure | None:
    """The reliability diagram: per question, accuracy against mean confidence in each confidence
    bin (marker area by items), beside the diagonal of perfect calibration."""
    if reliability is None or reliability.empty:
        return None
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="calibrated", line={"dash": "dot", "color": "#9ca3af"}))
    groups = reliability.groupby("question", sort=False) if "question" in reliability else [("all", reliability)]
    for (name, frame), color in zip(groups, PALETTE * 8):
        shown = frame[frame["n"] > 0]
        fig.add_trace(go.Scatter(x=shown["mean_confidence"], y=shown["accuracy"], mode="lines+markers", name=str(name),
                                 line={"color": color}, marker={"size": [6 + min(18, n) for n in shown["n"]]},
                                 customdata=shown[["n", "bin_low", "bin_high"]].to_numpy(),
                                 hovertemplate="confidence %{x:.2f}, accuracy %{y:.2f}<br>%{customdata[0]} items in "
                                               "[%{customdata[1]:.1f}, %{customdata[2]:.1f})<extra></extra>"))
    fig.update_layout(title_text="Reliability diagram", xaxis_title="mean confidence (probability of the answer)",
                      yaxis_title="accuracy", xaxis={"range": [0, 1]}, yaxis={"range": [0, 1.02]}, height=420,
                      margin={"l": 10, "r": 10, "t": 50, "b": 40}, legend={"orientation": "h", "y": -0.2})
    return responsive(fig)


def probe_row(run: dict) -> tuple[str, str, str]:
    """(what, design, questions) of a probe run's row in the Runs tab."""
    request = run["request"]
    if run["kind"] == EVAL_KIND:
        labelled = request.get("set", {})
        questions = [q["name"] for q in labelled.get("questions", [])]
        # the set's name is its JSONL header's "probe_set" (a run row read "evaluation of" and nothing)
        name = labelled.get("probe_set") or labelled.get("name") or "an unnamed set"
        return (f"evaluation of {name}",
                f"{counted(len(labelled.get('items', [])), 'item')} × {counted(request.get('repeats', 1), 'repeat')}, "
                f"samples {request.get('samples')}, steps {request.get('steps')}", ", ".join(questions))
    probe = request.get("probe", {})
    questions = [q["name"] for q in probe.get("questions", [])]
    return (probe.get("prompt", "")[:80], f"{counted(len(questions), 'question')} × {counted(probe.get('steps', 1), 'step')}, "
            f"samples {probe.get('samples', 1)}, seed {probe.get('seed', 0)}", ", ".join(questions))


def probe_headline(results: dict[str, dict], kind: str) -> str:
    """A probe run's headline: each question's answer and the mass on its labels (a read), or
    each question's accuracy (an evaluation); ``""`` before anything is stored."""
    if kind == PROBE_KIND:
        return " · ".join(f"{r['question']} {r['answer'] if r['answer'] is not None else 'no answer'} "
                          f"({percent(r['mass'])} % on its labels)" for r in _final_reads(results.get("read", {})))
    summary = results.get("summary", {})
    rows = [dict(zip(summary.get("columns", []), row)) for row in summary.get("data", [])]
    return " · ".join(f"{r.get('question', '')} accuracy {number(r.get('accuracy'))} ({r.get('answered', r.get('n'))} of "
                      f"{r.get('n')} answered)" for r in rows)
