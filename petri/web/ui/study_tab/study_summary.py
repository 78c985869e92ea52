"""The Study tab's summaries of a study run: the statistics summary of a finished run (the headline
test, the segment-level one beside it, the mixed model, preservation, template sensitivity,
convergence) and the template-sensitivity view (the Jaccard heatmap, or a sentence where the run
has one template)."""

from __future__ import annotations

import math

import gradio as gr
import pandas as pd

from petri.core.wording import counted
from petri.web.ui.views import responsive


def mixed_model_lines(statistics) -> list[str]:
    """The crossed mixed model's effect, in view beside the headline (the report holds the whole fit);
    a fit that did not converge says so first, so its Wald p is not read as a result."""
    m = getattr(statistics, "mixed", None)
    if m is None:
        return []
    a, b = statistics.groups
    line = (f"Mixed model (events × templates): {b} − {a} = {m.effect:+.4g} (SE {m.se:.3g}, Wald p = {m.p_value:.3g}); "
            "the whole fit is in the report below.")
    if not m.converged:
        line = ("**Caveat: the mixed model did NOT converge**, so its estimate and Wald p are not to be trusted; "
                "read the event-level test and the cluster bootstrap instead. " + line)
    return ["", line]


def statistics_markdown(result, analysis) -> str:
    """The statistics summary: the event-level test (the headline), the segment-level one beside it,
    secondary comparisons, preservation, template sensitivity, convergence and notes."""
    c = analysis.comparison
    lines = [
        f"**Run** `{result.run_id}` — model `{result.model_id}` on `{result.device}`, {counted(len(result.batches), 'batch')} "
        f"× {counted(result.samples, 'sample')} ({result.computed} computed, {result.resumed} from the store), "
        + (f"{result.wall_s:.1f} s." if result.computed else f"{result.wall_s:.1f} s of sampling, as stored."),
        "",
        f"**Headline (event level, independent units):** {c.event.summary()}",
        "",
        f"Segment level (segments of one event are not independent; shown beside it): {c.segment.summary()}",
    ]
    for comp in analysis.secondary:
        lines += ["", f"Secondary: {comp.summary()}"]
    lines += mixed_model_lines(analysis.statistics)
    p = analysis.preservation
    lines += [
        "",
        f"**Anchor preservation:** {p['anchors_intact']}/{p['anchors_total']} anchors intact in the final text "
        f"(reading 1); mean model agreement {p['mean_agreement']:.3f} (reading 2).",
    ]
    if math.isfinite(analysis.jaccard_mean):
        lines += ["", f"**Template sensitivity:** mean off-diagonal Jaccard of the top-{analysis.top_n} nouns "
                      f"{analysis.jaccard_mean:.3f} ({analysis.tagger})."]
    conv = analysis.convergence
    lines += ["", f"**Convergence:** mean {conv['mean_steps']:.1f} of {conv['max_denoising_steps']} steps; "
                  f"{100 * conv['stopped_early_share']:.0f}% of samples stopped early."]
    for note in analysis.notes:
        lines += ["", f"_Note: {note}_"]
    return "\n".join(lines)


def jaccard_views(matrix: pd.DataFrame, run_id: str, figure) -> dict:
    """The template-sensitivity view of study run ``run_id`` whose template × template Jaccard matrix
    is ``matrix``: the heatmap (``figure()`` draws it) where there are two templates or more, else a
    sentence in its place (one template has nothing to be compared with: its heatmap was one cell, 1.00)."""
    ids = [str(t) for t in matrix.index]
    if len(ids) >= 2:
        return {"jaccard": gr.update(value=responsive(figure()), visible=True),
                "jaccard_note": gr.update(value="", visible=False)}
    sentence = (f"**Template sensitivity** (run `{run_id}`): the run has {counted(len(ids), 'template')}"
                + (f" (`{ids[0]}`)" if ids else "") + ", so there is no other template to compare its top "
                "nouns with; run two or more templates to see how much the nouns depend on the template.")
    return {"jaccard": gr.update(value=None, visible=False), "jaccard_note": gr.update(value=sentence, visible=True)}
