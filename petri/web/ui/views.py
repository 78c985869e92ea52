"""The UI's pure helpers (no Gradio): parsing the concept field, the live flip count, the final text as the model's answer, and
one-line error messages (colours and token text are :mod:`petri.web.tokens`', re-exported here). The flip
figures themselves are :func:`petri.study.figures.plots.flip_heatmap`; flips are :mod:`petri.measure.metrics`'."""

from __future__ import annotations

import numpy as np

from petri.core.trajectory import Trajectory
from petri.measure.metrics import anchor_concepts, step_flips
from petri.measure.sample_metrics import sample_metrics
from petri.web.errors import FieldError, field_message, request_error_message  # noqa: F401 (re-exported)
from petri.web.tokens import END_OF_TURN_TOKENS, PALETTE, TokenText, concept_colors  # noqa: F401 (re-exported)

PREFIX_LABEL = "pinned prefix"
#: The label of an end-of-turn token on the final canvas (``<eos>``, ``<end_of_turn>`` …): shown as a
#: marker in a dark slate, never as the end of the answer (the diffusion canvas is written all at once,
#: so text after such a token is still what the model wrote).
END_TOKEN_LABEL = "end-of-turn token"
END_TOKEN_COLOR = "#475569"


def phone_table_css(elem_id: str, all_columns: list[str], columns: dict[str, int]) -> str:
    """CSS that, on a phone (600 px wide or less), shows only ``columns`` (name → % of the width) of
    the table ``elem_id`` whose columns are ``all_columns``, at 13 px with narrow cell padding, so
    each column's longest word fits it (at 420 px the runs table's nine columns scrolled sideways and
    the probe answers' headers broke as "quest/ion", "order/s"). Gradio's table sets each column's
    width inline (a header table, a hidden sizing body and the rows' cells), so each rule is
    ``!important``."""
    cells = f"#{elem_id} :is(th, td, .body-cell)"
    shown = [all_columns.index(name) + 1 for name in columns]
    hidden = ", ".join(f":nth-child({i + 1})" for i in range(len(all_columns)) if i + 1 not in shown)
    hide = f"  {cells}:is({hidden}) {{ display: none !important; }}\n" if hidden else ""
    widths = "\n".join(f"  {cells}:nth-child({i}) {{ width: {share}% !important; flex: 0 0 {share}% !important; }}"
                       for i, share in zip(shown, columns.values()))
    return f"""@media (max-width: 600px) {{
  #{elem_id} .header-table, #{elem_id} .virtual-body {{ width: 100% !important; }}
  #{elem_id} .header-table {{ table-layout: fixed !important; }}
{hide}  {cells} {{ min-width: 0 !important; max-width: none !important; font-size: 13px !important; }}
  {cells} .cell-wrap {{ padding-left: 6px !important; padding-right: 6px !important; }}
{widths}
}}
"""


def responsive(fig):
    """A figure that takes its container's width (figures are drawn at fixed widths for files; on a
    page they must fit a narrow screen); ``None`` stays ``None``."""
    if fig is not None:
        fig.update_layout(width=None, autosize=True)
    return fig


#: The text column of the Samples table: shown last, wide enough to wrap whole.
WIDE_COLUMN = "final_text"


def samples_columns() -> dict[str, int]:
    """The Samples table's columns and their widths (px): ``sample``, then every registered
    per-sample metric with a ``ui_width`` (:mod:`petri.measure.sample_metrics`) in registration
    order, :data:`WIDE_COLUMN` last (each header fits on its line; the table scrolls sideways on a
    narrow screen)."""
    shown = {m.column: m.ui_width for m in sample_metrics() if m.ui_width is not None}
    wide = {WIDE_COLUMN: shown.pop(WIDE_COLUMN)} if WIDE_COLUMN in shown else {}
    return {"sample": 90, **shown, **wide}


def parse_concepts(text: str) -> list[str]:
    """``"order, inventory , person"`` → ``["order", "inventory", "person"]`` (empty entries kept
    as ``""`` so validation can name them)."""
    if not text or not text.strip():
        return []
    return [c.strip() for c in text.split(",")]


class LiveFlips:
    """The flip map while a dish samples, from the ``on_step`` stream (:class:`petri.engine.base.LiveStep`):
    per step, how many samples flipped at each free position (:func:`petri.measure.metrics.step_flips`
    of the step against the one before, for the samples still running), plus sample 0's rows (raw
    argmax, canvas, accepted) for the hover and the trajectory viewer. Once every step is in,
    :meth:`counts` equals ``flip_grid(argmax, steps, anchor_mask).sum(axis=0)``."""

    def __init__(self, pinned: np.ndarray):
        """``pinned`` ``(S, L)`` bool: the positions pinned in each sample (never counted)."""
        self.free = ~np.asarray(pinned, dtype=bool)
        self.rows: list[np.ndarray] = []
        self.tokens: list[np.ndarray] = []
        self.canvas: list[np.ndarray] = []
        self.accepted: list[np.ndarray] = []
        self.prev: np.ndarray | None = None
        self.done = np.zeros(self.free.shape[0], dtype=bool)

    def add(self, step) -> None:
        """One :class:`~petri.engine.base.LiveStep`: its ``argmax``, ``canvas``, ``accepted`` ``(S, L)``
        and ``finished`` ``(S,)`` bool (the samples that stop after it)."""
        argmax = np.asarray(step.argmax)
        running = ~self.done
        if self.prev is None:
            flips = np.zeros(argmax.shape[1], dtype=int)
        else:
            flips = (step_flips(self.prev, argmax) & self.free & running[:, None]).sum(axis=0)
        self.rows.append(flips)
        self.tokens.append(np.where(running[0], argmax[0], -1))
        self.canvas.append(np.where(running[0], np.asarray(step.canvas)[0], -1))
        self.accepted.append(running[0] & np.asarray(step.accepted, dtype=bool)[0])
        self.prev = argmax
        self.done = self.done | np.asarray(step.finished, dtype=bool)

    def counts(self) -> np.ndarray:
        """``(T, L)`` int: samples flipping per step so far and position."""
        return np.array(self.rows) if self.rows else np.zeros((0, self.free.shape[1]), dtype=int)

    def token_ids(self) -> np.ndarray:
        """``(T, L)`` int: sample 0's argmax per step so far (-1 once it stopped)."""
        return np.array(self.tokens) if self.tokens else np.zeros((0, self.free.shape[1]), dtype=int)

    def canvas_ids(self) -> np.ndarray:
        """``(T, L)`` int: sample 0's canvas after each step so far (-1 once it stopped)."""
        return np.array(self.canvas) if self.canvas else np.zeros((0, self.free.shape[1]), dtype=int)

    def accepted_rows(self) -> np.ndarray:
        """``(T, L)`` bool: what sample 0's sampler accepted at each step so far."""
        return np.array(self.accepted) if self.accepted else np.zeros((0, self.free.shape[1]), dtype=bool)


def highlighted_text(traj: Trajectory, sample: int, tokens: TokenText) -> list[tuple[str, str | None]]:
    """Sample ``sample``'s final canvas as the model wrote it, token by token: anchors labelled with
    their concept, the pinned prefix (the empty thought block) left out, other special tokens hidden,
    and every end-of-turn token (``<eos>``, ``<end_of_turn>`` …) kept as a marker labelled
    :data:`END_TOKEN_LABEL`; a run of them (e.g. trailing ``<eos>`` fill, hidden specials between
    ignored) is one marker ``"<eos> ×n"``. Text on either side of a marker is the answer, unlabelled."""
    concepts = anchor_concepts(traj.anchors, traj.canvas_length)[sample]
    pinned = traj.anchor_mask[sample]
    out: list[tuple[str, str | None]] = []
    run: list[str] = []  # the texts of the end-of-turn tokens in a row, not yet written

    def close_run() -> None:
        if run:
            out.append((run[0] + (f" ×{len(run)}" if len(run) > 1 else ""), END_TOKEN_LABEL))
            run.clear()

    for i, token_id in enumerate(traj.final_ids[sample]):
        if concepts[i]:
            close_run()
            out.append((tokens(token_id), concepts[i]))
        elif pinned[i]:
            continue
        elif tokens.ends_turn(token_id):
            run.append(tokens(token_id))
        elif not tokens.is_special(token_id):
            close_run()
            out.append((tokens(token_id), None))
    close_run()
    return out
