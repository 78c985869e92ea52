"""Figures (plotly; never imports torch).

Study figures: (1) :func:`instability_figure`, instability distributions of the compared groups
and the extra ones with the event-level test on the figure; (2) :func:`event_ranking_figure`, mean
instability per event, ranked, with confidence intervals, coloured by group; (3)
:func:`jaccard_heatmap`, the template Jaccard matrix. One-sample views for the UI:
(4) :func:`flip_heatmap`, step × position, how many samples' raw argmax changed from the previous
step (the one drawing of it, also used live by the UI; :func:`sample_flip_heatmap` for one sample);
(5) :func:`flips_bar`, flips per position with the anchors highlighted.

:func:`save_figures` always writes HTML (with one shared ``plotly.min.js`` beside the files, so
they open offline); PNG/SVG only where a Chrome for kaleido is present (see
:func:`image_export_status`), and never fails for want of one.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from petri.core.trajectory import AnchorSpan, Trajectory
from petri.measure.metrics import flip_counts, flip_grid
from petri.stats.groups import LevelComparisons
from petri.study.figures.anchor_marks import ANCHOR_COLOR, LABEL_ROW_PX, mark_anchors, top_margin

log = logging.getLogger(__name__)

GROUP_COLORS = {"benign": "#2a9d8f", "contradictory": "#e63946", "control": "#6c757d"}
_PALETTE = ["#457b9d", "#f4a261", "#8d5fd3", "#e9c46a", "#264653", "#bc6c25"]


def group_colors(groups: Sequence[str]) -> dict[str, str]:
    """A colour per group: fixed ones for benign / contradictory / control, a palette otherwise."""
    out, spare = {}, iter(_PALETTE * 4)
    for g in groups:
        out[g] = GROUP_COLORS.get(g) or next(spare)
    return out


def tag_run(fig: go.Figure, run_id: str) -> go.Figure:
    """``fig`` with ``run_id`` in ``layout.meta`` (so a figure on screen says which run it draws)."""
    if run_id:
        fig.update_layout(meta={"run_id": run_id})
    return fig


def run_tag(run_id: str) -> str:
    """How a figure names the run it draws: ``"run 2fa97447"`` (the id's first 8 characters), or ``""``."""
    return f"run {run_id[:8]}" if run_id else ""


#: Characters a line of a compact figure's title holds (a 420 px screen draws about 50 of them).
COMPACT_WRAP = 46


def _wrap(text: str, width: int = 110) -> str:
    """Break a long line for a plotly title/annotation (which only knows <br>)."""
    words, lines, line = text.split(" "), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    return "<br>".join(lines)


# --------------------------------------------------------------------------- study figures


def instability_figure(
    segments: pd.DataFrame,
    events: pd.DataFrame,
    comparison: LevelComparisons | None,
    groups: Sequence[str],
    *,
    model_id: str = "",
    value: str = "instability",
    provisional: str = "",
    waiting: str = "",
    run_id: str = "",
    compact: bool = False,
) -> go.Figure:
    """Left: one point per event (its mean segment instability: the independent unit of the test)
    with a box per group. Right: every segment (non-independent), as violins. The event-level test
    is the title; the segment-level one is written under the right panel. While a study runs,
    ``provisional`` (e.g. ``"provisional: 12 of 36 batches; …"``) heads the title, and with no
    comparison yet (``None``) ``waiting`` says why in its place. ``run_id`` names the run under the
    figure. ``compact``: the two panels one above the other, every text wrapped to 46 characters and
    no legend (the groups are the x axis): a figure for a page, readable from a 420 px phone screen
    (where the side-by-side panels' titles and axes overlap) to a wide one (:data:`COMPACT_WRAP`)."""
    colors = group_colors(groups)
    wrap = COMPACT_WRAP if compact else None
    fig = make_subplots(
        rows=2 if compact else 1, cols=1 if compact else 2, column_widths=None if compact else [0.45, 0.55],
        horizontal_spacing=0.08, vertical_spacing=0.2,
        subplot_titles=("events: one point each (the test's unit)" if compact else
                        "events: one point per event (the test's unit)", "segments (non-independent)"),
    )
    second = {"row": 2, "col": 1} if compact else {"row": 1, "col": 2}
    for g in groups:
        ev = events.loc[events["group"] == g]
        fig.add_trace(
            go.Box(
                y=ev[value], x=[g] * len(ev), name=g, marker_color=colors[g], boxpoints="all", jitter=0.35,
                pointpos=0, text=ev["event_id"] + ": " + ev["event"], hovertemplate="%{text}<br>instability %{y:.4f}<extra></extra>",
                legendgroup=g,
            ),
            row=1, col=1,
        )
        seg = segments.loc[(segments["group"] == g) & segments[value].notna(), value]
        fig.add_trace(
            go.Violin(y=seg, x=[g] * len(seg), name=g, line_color=colors[g], box_visible=True, meanline_visible=True,
                      points=False, showlegend=False, legendgroup=g, hoverinfo="y"),
            **second,
        )
    fig.update_yaxes(title_text="instability (flips / free position)" if compact else
                     "instability (mean flips per free position)", row=1, col=1)
    fig.update_yaxes(title_text="segment instability", **second)
    title = _wrap(comparison.event.summary() if comparison is not None else (waiting or "no comparison yet"),
                  wrap or 110)
    if provisional:
        title = f"<span style='color:#b45309'>{_wrap(provisional, wrap) if wrap else provisional}</span><br>{title}"
    segment_line = _wrap(comparison.segment.summary(), wrap or 150) if comparison is not None else ""
    under = segment_line + "".join(f"<br>{part}" for part in (f"model: {model_id}" if model_id else "", run_tag(run_id)) if part)
    fig.update_layout(
        title={"text": f"<b>{title}</b>", "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
        template="plotly_white",
        width=1100,
        height=640,
        margin={"t": 110, "b": 150, "l": 70, "r": 30},
        showlegend=True,
    )
    if compact:  # room for the wrapped title above and the wrapped lines below, and no legend
        fig.update_layout(width=700, height=1000, showlegend=False, title_y=1, title_yanchor="top",
                          title_pad_t=30,  # below the plot's tool bar
                          margin={"t": 70 + 17 * (title.count("<br>") + 1), "l": 60, "r": 20,
                                  "b": 80 + 14 * (under.count("<br>") + 1)})
        fig.update_annotations(font_size=13)  # the two panel titles (the line under them comes next)
    fig.add_annotation(
        text=under, xref="paper", yref="paper", x=0, y=0 if compact else -0.13, yshift=-75 if compact else 0,
        yanchor="top", showarrow=False, align="left", xanchor="left", font={"size": 11, "color": "#555"},
    )
    return tag_run(fig, run_id)


def event_ranking_figure(events: pd.DataFrame, groups: Sequence[str] | None = None, *, confidence: float = 0.95, model_id: str = "",
                         provisional: str = "", run_id: str = "", compact: bool = False) -> go.Figure:
    """Mean instability per event, highest first, with its bootstrap CI, coloured by group
    (``provisional``: a label heading the title while the study runs; ``run_id``: named in it;
    ``compact``: the title and axis title wrapped to :data:`COMPACT_WRAP` characters and the legend
    above the plot, so that it reads on a 420 px screen)."""
    groups = list(groups) if groups is not None else list(dict.fromkeys(events["group"]))
    colors = group_colors(groups)
    ranked = events.sort_values("instability", ascending=True)  # plotly draws the first row at the bottom
    fig = go.Figure()
    for g in groups:
        d = ranked[ranked["group"] == g]
        fig.add_trace(
            go.Scatter(
                x=d["instability"], y=d["event_id"], mode="markers", name=g, marker={"color": colors[g], "size": 9},
                error_x={"type": "data", "symmetric": False, "array": d["ci_high"] - d["instability"],
                         "arrayminus": d["instability"] - d["ci_low"], "thickness": 1.5, "width": 3},
                text=d["event"], hovertemplate="%{y}: %{text}<br>instability %{x:.4f}<extra>" + g + "</extra>",
            )
        )
    ids = list(ranked["event_id"])
    fig.update_yaxes(categoryorder="array", categoryarray=ids, tickmode="array", tickvals=ids, ticktext=ids, title_text="event")
    axis = f"mean segment instability ({100 * confidence:g}% cluster-bootstrap CI over samples)"
    fig.update_xaxes(title_text=_wrap(axis, COMPACT_WRAP) if compact else axis)
    head = ("Mean instability per event, ranked" + (f" — model {model_id}" if model_id else "")
            + (f" — {run_tag(run_id)}" if run_id else ""))
    label = (_wrap(provisional, COMPACT_WRAP) if compact else provisional) if provisional else ""
    title = (f"<span style='color:#b45309'>{label}</span><br>" if label else "") + (_wrap(head, COMPACT_WRAP) if compact else head)
    fig.update_layout(title=title, template="plotly_white", width=900, height=max(420, 22 * len(events) + 160),
                      legend={"title": "group"})
    if compact:
        lines = title.count("<br>") + 1
        fig.update_layout(width=700, height=max(460, 22 * len(events) + 200 + 22 * lines), title_font_size=15,
                          title_pad_t=30, title_y=1, title_yanchor="top", margin={"t": 90 + 20 * lines, "l": 60, "r": 20},
                          legend={"title": "", "orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"})
    return tag_run(fig, run_id)


def jaccard_height(templates: int) -> int:
    """A Jaccard heatmap's height (px) for ``templates`` rows: about 80 px a row below a two-line
    title, 300 to 640 px (a 2 × 2 matrix was drawn 520 px tall, most of it two cells)."""
    return int(min(640, max(300, 170 + 80 * templates)))


def jaccard_heatmap(matrix: pd.DataFrame, mean_off_diagonal: float | None = None, *, tagger: str = "", top_n: int | None = None,
                    run_id: str = "", compact: bool = False) -> go.Figure:
    """Template × template Jaccard overlap of the top-N noun sets (``run_id``: named in the title;
    ``compact``: the title and the tagger under it wrapped to :data:`COMPACT_WRAP` characters at the
    figure's top, so that they read on a 420 px screen, where the one-line title ran 330 px past the figure)."""
    z = matrix.to_numpy(dtype=float)
    fig = go.Figure(
        go.Heatmap(
            z=z, x=list(matrix.columns), y=list(matrix.index), zmin=0, zmax=1, colorscale="Blues",
            text=np.vectorize(lambda v: "" if np.isnan(v) else f"{v:.2f}")(z), texttemplate="%{text}",
            hovertemplate="%{y} vs %{x}: %{z:.3f}<extra></extra>", colorbar={"title": "Jaccard"},
        )
    )
    title = "Template sensitivity: Jaccard of top" + (f"-{top_n}" if top_n else "-N") + " nouns"
    if mean_off_diagonal is not None and np.isfinite(mean_off_diagonal):
        title += f" (mean off-diagonal {mean_off_diagonal:.3f})"
    if run_id:
        title += f" — {run_tag(run_id)}"
    if compact:
        tagger_lines = (f"<sup>{t}</sup>" for t in _wrap(tagger, COMPACT_WRAP + 10).split("<br>") if t)
        lines = [*_wrap(title, COMPACT_WRAP).split("<br>"), *tagger_lines]
        title = "<br>".join(lines)
    elif tagger:
        title += f"<br><sup>{tagger}</sup>"
    height = jaccard_height(len(matrix.index))
    fig.update_layout(title=title, template="plotly_white", height=height, width=height + 140)
    if compact:  # room for every line of the title above the plot (jaccard_height holds two)
        extra = 20 * max(0, len(lines) - 2)
        fig.update_layout(height=height + extra, title={"font": {"size": 15}, "x": 0.01, "y": 1, "yref": "container", "yanchor": "top",
                                                        "pad": {"t": 20}}, margin={"t": 50 + 20 * len(lines)})
    fig.update_yaxes(autorange="reversed")
    return tag_run(fig, run_id)


# --------------------------------------------------------------------------- one-sample views


def token_texts(decode: Callable[[int], str], ids) -> np.ndarray:
    """Readable text of each token id, for hovers: ``ids`` any int shape → object array of that
    shape, each distinct id decoded once with ``decode(id)``, control characters escaped (a newline
    shows as ``\\n``), ``""`` for -1 (no token)."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return np.empty(ids.shape, dtype=object)
    table = {int(i): (repr(decode(int(i)))[1:-1] if i >= 0 else "") for i in np.unique(ids)}
    return np.vectorize(lambda i: table[int(i)], otypes=[object])(ids)


def _decoder(tokenizer) -> Callable[[int], str]:
    return lambda i: tokenizer.decode([i])


def _check_sample(traj: Trajectory, sample: int) -> int:
    if not 0 <= int(sample) < traj.n_samples:
        raise ValueError(f"sample must be in 0..{traj.n_samples - 1}, got {sample}")
    return int(sample)


def count_colorbar(top: float, title: str) -> dict:
    """A colour bar for counts 0…``top``: whole-number ticks only, at most about 8 of them (plotly's
    own ticks at 0.5 steps, printed as integers, read "0, 1, 1, 2, 2, 3, 3")."""
    step = max(1, math.ceil(abs(top) / 8))
    return {"title": {"text": title, "side": "top"}, "thickness": 12, "tickmode": "linear", "tick0": 0, "dtick": step,
            "tickformat": "d"}


def flip_heatmap(
    flips,
    *,
    n_samples: int = 1,
    anchors: Sequence[AnchorSpan] = (),
    pinned=None,
    blank_pinned: bool = False,
    tokens=None,
    colors: dict[str, str] | None = None,
    title: str = "",
) -> go.Figure:
    """The step × position flip map (the one drawing of it: one sample, a whole dish, or a dish
    while it samples). ``flips`` ``(T, L)``: how many of ``n_samples`` samples flipped at each step
    and position (0/1 for one sample; rows from :func:`petri.measure.metrics.flip_grid`). ``anchors`` are
    outlined and labelled; ``pinned`` ``(L,)`` bool marks the pinned prefix, and with
    ``blank_pinned`` its positions are drawn blank (not measured). ``tokens`` ``(T, L)`` text (from
    :func:`token_texts`) is shown on hover."""
    z = np.asarray(flips, dtype=float)
    if z.ndim != 2:
        raise ValueError(f"flips must have shape (T, L), got {z.shape}")
    length = z.shape[1]
    pinned = np.zeros(length, dtype=bool) if pinned is None else np.asarray(pinned, dtype=bool)
    if z.shape[0] == 0:
        z, tokens = np.full((1, length), np.nan), None
    if blank_pinned:
        z = z.copy()
        z[:, pinned] = np.nan
    hover = "step %{y}, position %{x}<br>samples flipping: %{z}"
    if tokens is not None:
        tokens = np.asarray(tokens, dtype=object)
        if tokens.shape != z.shape:
            raise ValueError(f"tokens must have the shape of flips {z.shape}, got {tokens.shape}")
        hover += "<br>token (sample 0): <b>%{customdata}</b>"
    fig = go.Figure(
        go.Heatmap(
            z=z, x=np.arange(length), y=np.arange(z.shape[0]), customdata=tokens, zmin=0, zmax=max(1, n_samples),
            colorscale="YlOrRd", showscale=n_samples > 1, hovertemplate=hover + "<extra></extra>", xgap=0, ygap=0,
            colorbar=count_colorbar(max(1, n_samples), "samples<br>flipping"),
        )
    )
    label_rows = mark_anchors(fig, anchors, pinned, outline=True, colors=colors)
    fig.update_layout(
        title={"text": title, "font": {"size": 14}, "x": 0.01}, template="plotly_white",
        height=max(400, min(900, 12 * z.shape[0] + 160)), margin={"l": 50, "r": 10, "t": top_margin(label_rows), "b": 40},
    )
    fig.update_xaxes(title_text="canvas position", range=[-0.5, length - 0.5])
    fig.update_yaxes(title_text="denoising step", autorange="reversed", tick0=0, dtick=max(1, -(-z.shape[0] // 12)))
    return fig


def flip_difference_heatmap(flips_a, flips_b, *, labels: tuple[str, str] = ("A", "B"), anchors: Sequence[AnchorSpan] = (),
                            pinned=None, n_samples: int = 1, title: str = "",
                            colors: dict[str, str] | None = None) -> go.Figure:
    """``flips_b - flips_a``: two dishes' step × position flip maps ``(T_a, L)`` and ``(T_b, L)``
    (samples flipping, as :func:`flip_heatmap` takes them) on the same layouts, the shorter padded
    with zero rows (a stopped dish flips no more). Red: ``labels[1]`` flips more; blue: fewer; the
    scale is symmetric and fitted to the largest difference drawn (at least 1; ``n_samples`` is
    the most it can be). Pinned positions (``pinned`` ``(L,)`` bool) are blank; anchors are
    outlined in ``colors`` (by concept)."""
    a, b = np.asarray(flips_a, dtype=float), np.asarray(flips_b, dtype=float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"flip maps must be (T, L) with the same L, got {a.shape} and {b.shape}")
    steps = max(a.shape[0], b.shape[0])
    z = np.zeros((steps, a.shape[1]))
    z[: b.shape[0]] += b
    z[: a.shape[0]] -= a
    if pinned is not None:
        z[:, np.asarray(pinned, dtype=bool)] = np.nan
    drawn = np.abs(z[np.isfinite(z)])
    bound = max(1.0, float(drawn.max()) if drawn.size else 0.0)
    fig = go.Figure(go.Heatmap(
        z=z, x=np.arange(a.shape[1]), y=np.arange(steps), zmin=-bound, zmax=bound, zmid=0, colorscale="RdBu_r",
        hovertemplate=f"step %{{y}}, position %{{x}}<br>{labels[1]} − {labels[0]}: %{{z}} samples flipping<extra></extra>",
        # under the plot, not beside it: beside it, the labels' title made the bar so wide that a
        # phone's plot was 130 px and the anchor labels above it ran into each other
        colorbar={**count_colorbar(bound, ""), "title": {"text": f"samples flipping, {labels[1]} − {labels[0]}", "side": "bottom"},
                  "orientation": "h", "x": 0.5, "xanchor": "center", "y": 0, "yref": "container", "yanchor": "bottom",
                  "ypad": 4, "lenmode": "pixels", "len": 260},
    ))
    label_rows = mark_anchors(fig, anchors, np.zeros(a.shape[1], dtype=bool) if pinned is None else pinned,
                               outline=True, colors=colors)
    fig.update_layout(
        title={"text": title or f"flip difference: {labels[1]} − {labels[0]}", "font": {"size": 14}, "x": 0.01},
        # the bar under the axis title takes 70 px more at the bottom: the plot keeps a flip map's height
        template="plotly_white", height=max(470, min(970, 12 * steps + 230)),
        margin={"l": 50, "r": 10, "t": top_margin(label_rows), "b": 110},
    )
    fig.update_xaxes(title_text="canvas position", range=[-0.5, a.shape[1] - 0.5])
    fig.update_yaxes(title_text="denoising step", autorange="reversed")
    return fig


def sample_flip_heatmap(traj: Trajectory, sample: int, tokenizer=None) -> go.Figure:
    """:func:`flip_heatmap` of one sample over the steps it ran: 1 where its raw argmax changed from
    the previous step (step 0 is all 0; anchors included: their raw argmax is the model's unforced
    proposal). With a tokenizer, hovering shows the argmax token at that step."""
    s = _check_sample(traj, sample)
    ran = int(traj.steps[s])
    z = flip_grid(traj.argmax[s : s + 1, :ran], traj.steps[s : s + 1])[0].astype(int)
    tokens = token_texts(_decoder(tokenizer), traj.argmax[s, :ran]) if tokenizer is not None else None
    return flip_heatmap(
        z, anchors=traj.anchors[s], pinned=traj.anchor_mask[s], tokens=tokens,
        title=f"Flips of sample {s}: {int(z.sum())} argmax changes over {ran} steps (anchors outlined)",
    )


def flips_bar(traj: Trajectory, sample: int, tokenizer=None) -> go.Figure:
    """Flips per canvas position of one sample (anchors count 0 and are shaded, labelled with the
    concept). With a tokenizer, hovering shows the final token."""
    s = _check_sample(traj, sample)
    flips = flip_counts(traj.argmax[s : s + 1], traj.steps[s : s + 1], traj.anchor_mask[s : s + 1])[0]
    colors = np.where(traj.anchor_mask[s], ANCHOR_COLOR, "#457b9d")
    hover = "position %{x}<br>flips %{y}"
    custom = None
    if tokenizer is not None:
        custom = token_texts(_decoder(tokenizer), traj.final_ids[s])
        hover += "<br>final token: %{customdata}"
    fig = go.Figure(go.Bar(x=np.arange(traj.canvas_length), y=flips, marker_color=list(colors), customdata=custom,
                           hovertemplate=hover + "<extra></extra>"))
    label_rows = mark_anchors(fig, traj.anchors[s], traj.anchor_mask[s])
    free = ~traj.anchor_mask[s]
    mean_free = float(flips[free].mean()) if free.any() else float("nan")
    fig.update_layout(  # two short title lines at the top, clear of the labels: one line ran off a 420 px screen
        title={"text": f"Flips per position, sample {s} ({int(traj.steps[s])} steps)<br><sup>mean over free positions "
                       f"{mean_free:.3f}</sup>", "font": {"size": 14}, "yref": "container", "y": 1, "yanchor": "top",
               "pad": {"t": 20}},
        template="plotly_white", height=380 + LABEL_ROW_PX * max(0, label_rows - 1), bargap=0.1,
        margin={"t": top_margin(label_rows) + 10},
    )
    fig.update_xaxes(title_text="canvas position")
    fig.update_yaxes(title_text="flips")
    return fig


# --------------------------------------------------------------------------- saving

_IMAGE_STATUS: tuple[bool, str] | None = None
_CHROMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chrome() -> str | None:
    """A Chrome/Chromium binary for kaleido: ``$BROWSER_PATH`` or one on ``PATH``."""
    env = os.environ.get("BROWSER_PATH")
    if env and Path(env).exists():
        return env
    for name in _CHROMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def image_export_status() -> tuple[bool, str]:
    """(available, note): whether PNG/SVG can be attempted here (kaleido importable and a Chrome
    found). Rendering failures later are caught by :func:`save_figures`, never raised."""
    global _IMAGE_STATUS
    if _IMAGE_STATUS is not None:
        return _IMAGE_STATUS
    try:
        import kaleido  # noqa: F401
    except Exception:
        _IMAGE_STATUS = (False, "PNG/SVG skipped: kaleido is not installed (HTML written)")
        return _IMAGE_STATUS
    chrome = find_chrome()
    if chrome is None:
        _IMAGE_STATUS = (False, "PNG/SVG skipped: kaleido needs Chrome/Chromium and none was found (HTML written)")
        return _IMAGE_STATUS
    os.environ.setdefault("BROWSER_PATH", chrome)
    _IMAGE_STATUS = (True, f"kaleido with {chrome}")
    return _IMAGE_STATUS


def save_figures(
    figures: dict[str, go.Figure],
    out_dir: str | Path,
    *,
    images: Sequence[str] = ("png", "svg"),
    plotlyjs: str | bool = "directory",
) -> tuple[dict[str, dict[str, Path]], list[str]]:
    """Write ``<name>.html`` for every figure (by default all share one ``plotly.min.js`` written
    beside them; ``plotlyjs=True`` inlines it into each file, ~4.8 MB apiece) and, where the machine can render them, ``<name>.png`` /
    ``.svg`` (one browser session for all). Returns (paths by name and format, notes); image failures are
    logged and noted, never raised."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict[str, Path]] = {}
    for name, fig in figures.items():
        html = out / f"{name}.html"
        fig.write_html(html, include_plotlyjs=plotlyjs, full_html=True)
        written[name] = {"html": html}
    notes: list[str] = []
    if not images or not figures:
        return written, notes
    ok, note = image_export_status()
    if not ok:
        log.info(note)
        return written, [note]
    jobs = [(name, fmt) for name in figures for fmt in images]
    try:
        import plotly.io as pio

        pio.write_images(
            [figures[name] for name, _ in jobs],
            [out / f"{name}.{fmt}" for name, fmt in jobs],
            format=[fmt for _, fmt in jobs],
            scale=[2 if fmt == "png" else 1 for _, fmt in jobs],
            width=[figures[name].layout.width or 1000 for name, _ in jobs],
            height=[figures[name].layout.height or 600 for name, _ in jobs],
        )
    except Exception as err:  # kaleido / Chrome failures come in many types
        note = f"PNG/SVG skipped: kaleido could not render ({type(err).__name__}: {str(err)[:200]}); HTML written"
        log.warning(note)
        return written, [note]
    for name, fmt in jobs:
        path = out / f"{name}.{fmt}"
        if path.exists():
            written[name][fmt] = path
    return written, notes

