"""The canvas control of the Dish and Compare tabs: the model's canvas as a strip of token positions,
each concept a chip as wide as its tokens that the user drags along the strip (or moves with the
arrow keys once focused). A chip snaps to token positions, each at least 10 px wide (a narrow screen
scrolls the strip sideways rather than squeeze the chips), and the chips' labels stack in rows
where they would overlap. A drop that would overlap another chip, cover the pinned prefix or run
past the canvas end is refused where it happens (the chip returns and the strip says why), never
silently corrected. The slot table beside it stays the precise editor; the two are kept
in sync by the tab.

Built as a ``gr.HTML`` with ``html_template`` / ``css_template`` / ``js_on_load`` (Gradio 6's custom
HTML components): the script draws ``props.value`` and, on a move, sets ``props.value`` and calls
``trigger("input")``, so the new layout reaches Python as the component's value. ``input`` (a user
move) rather than ``change`` (which Gradio also fires when Python sets the value) keeps the
table → canvas → table loop from feeding itself.

The value (a dict) is ``{"canvas_length": L, "prefix": P, "chips": [{"concept", "start", "tokens",
"color"}, …], "error": str, "seq": int | None}`` (and optionally ``"fixed": True``: the chips are
shown where the server laid them out and cannot be moved, as the Probe tab's frame): :func:`canvas_value` makes it from a layout
preview, :func:`placement_rows` reads the chips back. ``seq`` numbers the user's moves: the script
counts them (1, 2, …) and writes the count into the value on each move; the slot table's redraw of
the canvas (the echo of a move) carries the number of the newest move the table holds
(:func:`canvas_seq`, kept by the tab), or ``None`` when the server set the table itself (Spread,
Shuffle, a new concept list: authoritative). The script ignores an echo numbered below its newest
move (a quick second move made within one round trip would otherwise be drawn over by the first
move's echo, and the next move made from that drawing would lose it): it keeps the newer layout,
whose own echo follows.
"""

from __future__ import annotations

import gradio as gr

from petri.web.api.requests import LayoutPreview
from petri.web.ui.views import PALETTE

CANVAS_HTML = """
<div class="pc">
  <div class="pc-scroll"><div class="pc-inner">
    <div class="pc-track" role="group" aria-label="canvas: drag a concept chip, or focus it and use the arrow keys"></div>
    <div class="pc-axis"></div>
  </div></div>
  <div class="pc-msg" role="status" aria-live="polite"></div>
</div>
"""

CANVAS_CSS = """
.pc { padding: 0 0 2px 0; user-select: none; }
.pc-scroll { overflow-x: auto; overflow-y: hidden; }
.pc-inner { padding: 18px 0 0 0; }
.pc-track { position: relative; height: 46px; border: 1px solid #9ca3af; border-radius: 4px; background: #f9fafb; overflow: visible; }
.pc-tick { position: absolute; top: 0; bottom: 0; border-left: 1px solid #e5e7eb; pointer-events: none; }
.pc-tick.pc-major { border-left-color: #cbd5e1; }
.pc-prefix { position: absolute; top: 0; bottom: 0; left: 0; background: repeating-linear-gradient(45deg, #d1d5db, #d1d5db 4px, #e5e7eb 4px, #e5e7eb 8px);
  font-size: 11px; color: #374151; display: flex; align-items: center; justify-content: center; overflow: hidden; }
.pc-chip { position: absolute; top: 5px; bottom: 5px; border-radius: 5px; color: white; font-size: 12px; font-weight: 600;
  display: flex; align-items: center; justify-content: center; white-space: nowrap; overflow: visible; cursor: grab;
  box-shadow: 0 1px 2px rgba(0,0,0,.3); touch-action: none; outline-offset: 2px; }
.pc-chip:focus { outline: 3px solid #111827; }
.pc-chip.pc-shuffled { background-image: repeating-linear-gradient(135deg, rgba(255,255,255,.35) 0 4px, transparent 4px 8px); }
.pc-msg.pc-shuffle-note { color: #92400e; }
.pc-label { position: absolute; bottom: calc(100% + 6px); left: 0; font-size: 12px; line-height: 14px;
  font-weight: 700; white-space: nowrap; pointer-events: none; }
.pc-chip.pc-dragging { cursor: grabbing; opacity: .85; z-index: 3; }
.pc-chip.pc-invalid { background: repeating-linear-gradient(45deg, #b91c1c, #b91c1c 5px, #ef4444 5px, #ef4444 10px) !important; }
.pc-chip.pc-refused { outline: 3px solid #b91c1c; }
.pc-axis { position: relative; height: 16px; font-size: 10px; color: #6b7280; }
.pc-axis span { position: absolute; transform: translateX(-50%); }
.pc-msg { min-height: 1.3em; font-size: 13px; color: #374151; }
.pc-msg.pc-bad { color: #b91c1c; font-weight: 600; }
"""  # noqa: E501 - served as written: its long lines are HTML, CSS or JavaScript

CANVAS_JS = r"""
const track = element.querySelector('.pc-track');
const inner = element.querySelector('.pc-inner');
const axis = element.querySelector('.pc-axis');
const msg = element.querySelector('.pc-msg');
let refusal = '';
let refusedIndex = -1;
let localSeq = 0;       // the number of this canvas's newest move (0: none yet)
let localValue = null;  // the value that move set

const MIN_POSITION_PX = 10.5, LABEL_ROW_PX = 16, LABEL_GAP_PX = 4;
const current = () => props.value || {canvas_length: 0, prefix: 0, chips: [], error: ''};
const pct = (x) => (100 * x / Math.max(1, current().canvas_length)) + '%';

function conflict(chips, index, start) {
  const val = current(), c = chips[index], end = start + c.tokens;
  if (val.prefix > 0 && start < val.prefix) return `${c.concept} at ${start} would cover the pinned prefix (positions 0-${val.prefix - 1})`;
  if (start < 0) return `${c.concept} at ${start} would start before the canvas (its first position is 0)`;
  if (end > val.canvas_length) return `${c.concept} at ${start} would run past the canvas (${val.canvas_length} positions)`;
  for (let j = 0; j < chips.length; j++) {
    const o = chips[j];
    if (j !== index && start < o.start + o.tokens && o.start < end)
      return `${c.concept} at ${start} would overlap ${o.concept} (positions ${o.start}-${o.start + o.tokens - 1})`;
  }
  return '';
}

function commit(index, start) {
  const val = current();
  const problem = conflict(val.chips, index, start);
  if (problem) { refusal = 'Refused: ' + problem + '; the chip stays at ' + val.chips[index].start + '.'; refusedIndex = index; render(index); return; }
  refusal = ''; refusedIndex = -1;
  localSeq += 1;
  props.value = {...val, error: '', seq: localSeq, chips: val.chips.map((c, j) => j === index ? {...c, start: start} : c)};
  localValue = props.value;
  render(index);
  trigger('input');
}

function render(focusIndex) {
  const val = current(), L = val.canvas_length;
  track.innerHTML = ''; axis.innerHTML = '';
  track.dataset.length = L; track.dataset.prefix = val.prefix; track.dataset.shuffled = val.shuffled ? '1' : '0';
  const step = L > 128 ? 16 : (L > 48 ? 8 : 4);
  for (let p = 0; p <= L; p++) {
    const t = document.createElement('div');
    t.className = 'pc-tick' + (p % step === 0 ? ' pc-major' : '');
    t.style.left = pct(p); track.appendChild(t);
    // a major tick just short of the end leaves its label to the end's (they would overlap)
    if ((p % step === 0 && (L - p >= step / 2 || p === L)) || p === L) {
      // centred under its tick, but the end labels lean inward: centred, "0" and "64" were cut in half by the strip's box
      const s = document.createElement('span'); s.textContent = p; s.style.left = pct(p);
      s.style.transform = p === 0 ? 'none' : (p === L ? 'translateX(-100%)' : 'translateX(-50%)');
      axis.appendChild(s);
    }
  }
  if (val.prefix > 0) {
    const pre = document.createElement('div'); pre.className = 'pc-prefix'; pre.style.width = pct(val.prefix);
    pre.textContent = 'prefix'; pre.title = `pinned prefix: positions 0-${val.prefix - 1}`; track.appendChild(pre);
  }
  val.chips.forEach((c, i) => {
    const chip = document.createElement('div');
    chip.className = 'pc-chip' + (conflict(val.chips, i, c.start) ? ' pc-invalid' : '') + (i === refusedIndex ? ' pc-refused' : '') +
      (val.shuffled ? ' pc-shuffled' : '');
    chip.style.left = pct(c.start); chip.style.width = pct(c.tokens); chip.style.background = c.color;
    const label = document.createElement('span'); label.className = 'pc-label'; label.style.color = c.color;
    label.textContent = `${c.concept} @${c.start}`; chip.appendChild(label);
    chip.tabIndex = 0; chip.dataset.concept = c.concept; chip.dataset.start = c.start; chip.dataset.tokens = c.tokens;
    chip.setAttribute('role', 'slider');
    chip.setAttribute('aria-label', `${c.concept}: ${c.tokens} token(s) starting at position ${c.start}`);
    chip.setAttribute('aria-valuemin', val.prefix); chip.setAttribute('aria-valuemax', L - c.tokens);
    chip.setAttribute('aria-valuenow', c.start);
    chip.title = `${c.concept} @${c.start} (${c.tokens} token${c.tokens === 1 ? '' : 's'})` + (val.fixed ? '' : ' - drag, or arrow keys');
    if (val.fixed) { chip.setAttribute('aria-readonly', 'true'); track.appendChild(chip); return; }
    chip.addEventListener('keydown', (e) => {
      const delta = {ArrowLeft: -1, ArrowRight: 1}[e.key];
      if (!delta) return;
      e.preventDefault();
      commit(i, c.start + delta * (e.shiftKey ? 5 : 1));
    });
    chip.addEventListener('pointerdown', (e) => startDrag(e, chip, i));
    track.appendChild(chip);
    if (i === focusIndex) chip.focus();
  });
  inner.style.minWidth = (MIN_POSITION_PX * L + 2) + 'px';  // + the track's border  // narrow screens scroll the strip instead of squeezing chips
  stackLabels();
  const bad = refusal || val.error;
  msg.className = 'pc-msg' + (bad ? ' pc-bad' : '');
  msg.textContent = bad || (!L ? '' : (val.fixed ? `canvas: ${L} positions, laid out from the text above (edit it to move what is pinned)`
    : `canvas: ${L} positions; drag a chip or focus it and press the arrow keys (Shift: 5 at a time)` +
      (val.shuffled ? '. Shuffled per sample: the chips mark the slots; each sample puts the concepts into them in its own ' +
                      'order (the flip map names, per sample, what sat in each slot)' : '')));
  msg.classList.toggle('pc-shuffle-note', !bad && !!val.shuffled);
}

function stackLabels() {
  // each label in the first row (above the chip, from its left edge) where it clears the labels
  // already placed; the strip's top padding makes room for the rows used
  const placed = [];  // per row: the right edge (px) of its last label
  const labels = [...track.querySelectorAll('.pc-label')];
  const box = track.getBoundingClientRect();
  if (!box.width) return;  // not on screen (another tab): stacked when it is drawn (the observer below)
  const items = labels.map((l) => { l.style.left = '0'; l.style.right = ''; return [l, l.getBoundingClientRect()]; })
    .sort((a, b) => a[1].left - b[1].left);
  for (const [label, r0] of items) {
    let r = r0;
    if (r.right > box.right) { label.style.left = 'auto'; label.style.right = '0'; r = label.getBoundingClientRect(); }
    let row = placed.findIndex((right) => r.left >= right + LABEL_GAP_PX);
    if (row < 0) { row = placed.length; placed.push(0); }
    placed[row] = r.right;
    label.style.bottom = `calc(100% + ${6 + LABEL_ROW_PX * row}px)`;
    label.dataset.row = row;
  }
  inner.style.paddingTop = (18 + LABEL_ROW_PX * Math.max(0, placed.length - 1)) + 'px';
}

function startDrag(e, chip, index) {
  e.preventDefault();
  chip.setPointerCapture(e.pointerId);
  chip.classList.add('pc-dragging');
  const val = current(), rect = track.getBoundingClientRect(), unit = rect.width / val.canvas_length;
  const grab = (e.clientX - rect.left) / unit - val.chips[index].start;
  let start = val.chips[index].start;
  const move = (ev) => {
    start = Math.round((ev.clientX - rect.left) / unit - grab);
    chip.style.left = pct(start);
    chip.querySelector('.pc-label').textContent = `${val.chips[index].concept} @${start}`;
    const problem = conflict(val.chips, index, start);
    chip.classList.toggle('pc-invalid', !!problem);
    msg.className = 'pc-msg' + (problem ? ' pc-bad' : '');
    msg.textContent = problem ? 'Cannot drop here: ' + problem : `${val.chips[index].concept} -> ${start}`;
  };
  const up = () => {
    chip.removeEventListener('pointermove', move);
    chip.removeEventListener('pointerup', up);
    chip.removeEventListener('pointercancel', up);
    commit(index, start);
  };
  chip.addEventListener('pointermove', move);
  chip.addEventListener('pointerup', up);
  chip.addEventListener('pointercancel', up);
}

watch('value', () => {
  // a value from Python (the slot table): redraw, keeping the keyboard focus on the chip that had it;
  // an echo of an older move than this canvas's newest (seq below it) is dropped, the newer layout
  // put back (its own echo is on the way; seq null: the server set the table, drawn whatever the number)
  const seq = current().seq;
  if (seq !== null && seq !== undefined && seq < localSeq && localValue) { props.value = localValue; return; }
  const focused = element.contains(document.activeElement) ? document.activeElement.dataset.concept : null;
  refusal = ''; refusedIndex = -1;
  render(current().chips.findIndex((c) => c.concept === focused));
});
render(-1);
new ResizeObserver(() => stackLabels()).observe(track);
"""  # noqa: E501 - served as written: its long lines are HTML, CSS or JavaScript


def canvas_value(preview: LayoutPreview, colors: dict[str, str], seq: int | None = None, shuffled: bool = False) -> dict:
    """The control's value for a layout preview: the canvas, its pinned prefix, one chip per span
    (``colors`` by concept), the layout check's error ("" when accepted), ``seq``, the number of
    the newest user move the layout holds (None: a layout the server set, drawn whatever the canvas did),
    and ``shuffled``: each sample shuffles the concepts over these slots (the strip says so and
    labels each chip as its slot)."""
    chips = [{"concept": s.concept, "start": int(s.start), "tokens": len(s.token_ids),
              "color": colors.get(s.concept, PALETTE[i % len(PALETTE)])} for i, s in enumerate(preview.spans)]
    return {"canvas_length": int(preview.canvas_length), "prefix": int(preview.prefix), "chips": chips,
            "error": preview.error, "seq": seq, "shuffled": bool(shuffled)}


def canvas_seq(value: dict | None) -> int | None:
    """The number of the user move a control value carries (None: none, e.g. a value the server set)."""
    seq = (value or {}).get("seq")
    return int(seq) if isinstance(seq, (int, float)) and not isinstance(seq, bool) else None


def placement_rows(value: dict | None) -> list[list]:
    """``[[concept, start, tokens], …]``: the chips of a control value, in chip order."""
    chips = (value or {}).get("chips") or []
    return [[str(c["concept"]), int(c["start"]), int(c["tokens"])] for c in chips]


def canvas_control(value: dict | None = None, elem_id: str = "petri-canvas") -> gr.HTML:
    """The control as a ``gr.HTML`` component (its ``input`` event carries a user's move)."""
    return gr.HTML(value, html_template=CANVAS_HTML, css_template=CANVAS_CSS, js_on_load=CANVAS_JS,
                   elem_id=elem_id, padding=False, container=False)
