"""The Study tab's views of a paired (within-event) study: the slope chart (one line per event from
the reference condition to each other condition, :func:`petri.study.figures.paired_plots.paired_slope_figure`)
in the place of the group figure, and the paired statistics (:mod:`petri.study.results.paired_statistics`) as
the headline. Also how the tab's editor keeps a study's conditions (they have no table of their own:
they ride in the tab's study header, :func:`conditions_meta` / :func:`with_conditions`)."""

from __future__ import annotations

import math
from typing import Any, cast

from petri.study.figures.paired_plots import paired_slope_figure
from petri.study.schema import Study
from petri.web.ui.views import responsive

__all__ = ["conditions_meta", "with_conditions", "paired_stats_markdown", "paired_final_views", "paired_live_views"]


def conditions_meta(study: Study) -> dict[str, Any]:
    """What the tab's header keeps of ``study``'s conditions: the list and each event's own map."""
    if not study.paired:
        return {}
    return {"conditions": [c.to_dict() for c in study.conditions],
            "event_conditions": {e.id: {cid: v.to_dict() for cid, v in e.variants} for e in study.events if e.variants}}


def with_conditions(data: dict, meta: dict | None) -> dict:
    """``data`` (a study dict from the tab's tables) with the header's conditions put back: the list,
    and each event's map by event id (an event renamed in the table runs with its own text and concepts)."""
    meta = meta or {}
    if not meta.get("conditions"):
        return data
    per_event = meta.get("event_conditions") or {}
    events = [{**e, "conditions": per_event[e["id"]]} if e.get("id") in per_event else e for e in data["events"]]
    return {**data, "conditions": meta["conditions"], "events": events}


def _fmt(v: float) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:+.4g}"


def paired_stats_markdown(result, analysis) -> str:
    """The paired study's statistics summary: the paired test of each condition against the
    reference (the headline), the mixed models, the dose trend and the power."""
    paired = analysis.paired
    lines = [
        f"**Run** `{result.run_id}` — model `{result.model_id}` on `{result.device}`, {len(result.batches)} batches "
        f"× {result.samples} samples ({result.computed} computed, {result.resumed} from the store).",
        "",
        f"**Paired design:** every event ran under {len(paired.conditions)} conditions "
        f"({', '.join(paired.conditions)}; `{paired.reference}` is the reference) with the same templates, slot "
        "positions and seeds. The chart draws one line per event.",
    ]
    for c in paired.comparisons:
        w = c.wilcoxon
        test = (f"Wilcoxon p = {w.p_value:.3g} ({w.method})" if w.informative
                else f"Wilcoxon uninformative ({w.n_nonzero} non-zero differences; needs 6)")
        lines += ["", f"**{c.value}, {c.condition_b} vs {c.condition_a}:** higher under {c.condition_b} in "
                      f"{c.n_b_higher} of {c.n_events} events, lower in {c.n_b_lower}, equal in {c.n_zero}; "
                      f"Hodges-Lehmann {_fmt(c.hodges_lehmann)} [{100 * c.confidence:g}% CI {_fmt(c.hl_low)}, "
                      f"{_fmt(c.hl_high)}]; rank-biserial {_fmt(c.rank_biserial)}; {test}."]
    for m in paired.mixed + ([paired.dose_mixed] if paired.dose_mixed is not None else []):
        lines += ["", f"Mixed model: {m.summary()}"]
    for p in paired.page:
        lines += ["", f"Trend: {p.summary()}"]
    if paired.power is not None:
        lines += ["", f"**Power:** {paired.power.summary()}"]
    for note in [*paired.notes, *analysis.notes]:
        lines += ["", f"_Note: {note}_"]
    return "\n".join(lines)


def paired_final_views(result, analysis) -> dict:
    """The finished paired study's chart and statistics (they replace the group figure and summary)."""
    head = analysis.paired.headline
    fig = paired_slope_figure(analysis.events, list(analysis.paired.conditions), doses=analysis.paired.doses,
                              title=head.summary() if head is not None else "", model_id=result.model_id,
                              run_id=result.run_id)
    return {"instability": responsive(fig),
            "stats": "**Final** (every batch is in).\n\n" + paired_stats_markdown(result, analysis)}


def paired_live_views(study: Study, prov, label: str, model_id: str, run_id: str) -> dict:
    """The chart of a paired study from its batches so far (events with every condition in draw a full line)."""
    conditions = [c.id for c in study.conditions]
    doses = {c.id: cast(float, c.dose) for c in study.conditions} if study.dose_study else None  # all set
    fig = paired_slope_figure(prov.events, conditions, doses=doses, model_id=model_id, provisional=label, run_id=run_id)
    return {"instability": responsive(fig),
            "stats": f"**Run `{run_id}` — {label}** — provisional; the paired statistics come when every batch is in."}
