"""The trajectory viewer: one sample's canvas at step *t*, a step scrubber (slider, previous / next,
Play / Pause with a speed control; keyboard: ←/→ a step, Home/End, Space plays), the whole trajectory
at a glance (:func:`petri.study.figures.trajectory_plots.trajectory_figure`) with the per-step curves beside it,
and a download button for the replay files (:func:`petri.web.replay_files.export_bundle`: GIF, the
figures as HTML/PNG/SVG, the per-step table as CSV/Parquet).

The viewer knows the model family (:func:`view_modes`). By default it shows the canvas the sampler
held after each step (:attr:`petri.core.trajectory.Trajectory.canvas`): for uniform diffusion
(DiffusionGemma) the denoiser's accepted tokens solid and the renoised positions faded; for masked
diffusion ``[MASK]`` cells until a position is unmasked, a dotted outline at its unmask step, committed
tokens fixed from then on, and optionally the raw argmax inside the cells still masked. The raw
argmax is the other view. Anchors always show their own token, and the last frame is the returned
canvas, so it reads as the final text. Each token is coloured by its confidence ``exp(-entropy)``
(:mod:`petri.measure.replay`; the legend says so), flips of the argmax at this step outlined in dashed black,
anchors outlined in their concept colours (:func:`petri.web.ui.views.concept_colors`, as the chips
and heatmap boxes), special tokens shown as grey marks and whitespace as visible marks
(:func:`petri.measure.replay.visible_text`).

The view is a ``gr.HTML`` whose value is one sample's record (:func:`petri.measure.replay.sample_record`): the
browser draws only the step on screen, so scrubbing and Play never ask the server; a new sample is one
request. While a dish samples, the Dish tab sets a live record (:func:`petri.measure.replay.live_record`,
from the same ``on_step`` stream as its heatmap) and the view follows the newest step.

:class:`TrajectoryView` holds the handlers; :meth:`TrajectoryView.build` makes the components inside
a tab and returns them by name, :meth:`TrajectoryView.views` their values for a stored run.
"""

from __future__ import annotations

from typing import cast

import gradio as gr
import numpy as np

from petri.core.trajectory import MASKED_FAMILY, UNIFORM_FAMILY, Trajectory
from petri.measure.metrics import anchor_concepts
from petri.measure.replay import CONFIDENCE_LEGEND, live_record, sample_record
from petri.study.figures.trajectory_plots import (
    CONFIDENCE_SCALE,
    FIGURE_MODES,
    READABLE_CELL_PX,
    shown_mode,
    step_curves_figure,
    trajectory_figure,
)
from petri.web.access import Caller
from petri.web.replay_files import export_bundle, run_colors
from petri.web.tokens import TokenText
from petri.web.ui.access import UiAccess, export_dir
from petri.web.ui.views import responsive
from petri.web.ui.widgets.busy import busy_click

VIEW_HTML = """
<div class="pt" tabindex="0" role="group" aria-label="trajectory viewer: arrow keys move a step, Home/End, Space plays">
  <div class="pt-bar">
    <button type="button" class="pt-prev" aria-label="previous step">◀</button>
    <input type="range" class="pt-slider" min="0" max="0" step="1" value="0" aria-label="denoising step">
    <button type="button" class="pt-next" aria-label="next step">▶</button>
    <button type="button" class="pt-play" aria-pressed="false">▶ Play</button>
    <label class="pt-speed-label">speed <select class="pt-speed" aria-label="play speed">
      <option value="1000">1 step/s</option><option value="400" selected>2.5 steps/s</option>
      <option value="150">7 steps/s</option><option value="50">20 steps/s</option></select></label>
    <label class="pt-mode-label">show <select class="pt-mode" aria-label="what the cells show"></select></label>
    <label class="pt-flow-label"><input type="checkbox" class="pt-flow-toggle" aria-label="flowing text: word pieces joined"> flowing text</label>
  </div>
  <div class="pt-step" role="status" aria-live="polite"></div>
  <div class="pt-canvas"></div>
  <div class="pt-legend"></div>
</div>
"""  # noqa: E501 - served as written: its long lines are HTML, CSS or JavaScript

VIEW_CSS = """
.pt { padding: 6px 2px; outline-offset: 2px; }
.pt:focus { outline: 2px solid #2563eb; }
.pt-bar { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; }
.pt-bar button { padding: 2px 10px; border: 1px solid #9ca3af; border-radius: 4px; background: #f9fafb; cursor: pointer; }
.pt-bar label { white-space: nowrap; flex: none; }
.pt-bar select { width: auto; max-width: none; flex: none; }
.pt-slider { flex: 1 1 120px; min-width: 120px; }
.pt-step { font-size: 13px; margin: 4px 0; color: #111827; }
.pt-canvas { display: flex; flex-wrap: wrap; gap: 3px; font-family: ui-monospace, monospace; font-size: 12px; }
.pt-tok { padding: 1px 4px; border-radius: 3px; border: 1px solid #d1d5db; white-space: pre; min-width: 1ch; }
.pt-renoised { opacity: .38; }
.pt-masked { background: #e5e7eb !important; color: #6b7280 !important; border-style: dashed; }
.pt-peek { font-style: italic; opacity: .6; }
.pt-unmasked { outline: 2px dotted #111827; outline-offset: 1px; }
.pt-noconf { background: #e5e7eb; color: #111827; }
.pt-flip { outline: 2px dashed #111827; outline-offset: 1px; }
.pt-anchor { border-width: 3px; border-style: solid; font-weight: 700; }
.pt-special { font-style: italic; color: #6b7280 !important; background: repeating-linear-gradient(45deg, #f3f4f6, #f3f4f6 4px, #e5e7eb 4px, #e5e7eb 8px) !important; }
.pt-legend { font-size: 11px; color: #4b5563; margin-top: 6px; }
.pt-canvas.pt-flow { display: block; gap: 0; font-family: inherit; font-size: 14px; line-height: 1.9; white-space: pre-wrap; }
.pt-flow .pt-tok { padding: 0; border: none; border-radius: 0; min-width: 0; white-space: pre-wrap; }
.pt-flow .pt-anchor { border: none; border-bottom: 3px solid; font-weight: 700; }
/* flowing text: a renoised piece is a random token, not part of a word: set apart, not run into its neighbours */
.pt-flow .pt-renoised { margin: 0 0.3em; text-decoration: underline dotted; }
.pt-pause-mark { display: inline-block; width: 3px; height: 0.8em; border-left: 3px solid currentColor;
  border-right: 3px solid currentColor; vertical-align: -0.05em; }
"""  # noqa: E501 - served as written: its long lines are HTML, CSS or JavaScript

VIEW_JS = r"""
const root = element.querySelector('.pt');
const canvas = element.querySelector('.pt-canvas');
const slider = element.querySelector('.pt-slider');
const label = element.querySelector('.pt-step');
const playBtn = element.querySelector('.pt-play');
const speed = element.querySelector('.pt-speed');
const mode = element.querySelector('.pt-mode');
const legend = element.querySelector('.pt-legend');
const flow = element.querySelector('.pt-flow-toggle');
let step = 0, timer = null, lastKey = null, lastLive = false;

const cur = () => (props.value && props.value.ids) ? props.value : null;
const stepsOf = (v) => v ? v.ids.length : 0;
// frames: one per step, then the returned canvas (stored runs; a live run has not returned yet)
const count = () => { const v = cur(); return v ? stepsOf(v) + (v.final && stepsOf(v) ? 1 : 0) : 0; };
const rgb = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
function shade(stops, x) {
  x = Math.min(1, Math.max(0, x));
  for (let k = 1; k < stops.length; k++) {
    if (x <= stops[k][0]) {
      const [a, ca] = stops[k - 1], [b, cb] = stops[k], w = (x - a) / (b - a), p = rgb(ca), q = rgb(cb);
      return p.map((c, j) => Math.round(c + (q[j] - c) * w));
    }
  }
  return rgb(stops[stops.length - 1][1]);
}

function setModes(v) {  // the choices of what the cells show: the family's (v.modes), the canvas first;
  // a record that names its mode (v.mode: the one the figure below was drawn with) sets it
  const modes = (v && v.modes) || [], keep = (v && v.mode) || mode.value;
  const names = modes.map((m) => m[0]).join('|');
  if (mode.dataset.names !== names) {
    mode.replaceChildren(...modes.map(([value, text]) => { const o = document.createElement('option'); o.value = value; o.textContent = text; return o; }));
    mode.dataset.names = names;
  }
  if (mode.value !== keep || !modes.some((m) => m[0] === mode.value))
    mode.value = modes.some((m) => m[0] === keep) ? keep : (modes.length ? modes[0][0] : '');
  mode.disabled = modes.length < 2;
}

function render() {
  const v = cur(), n = count(), nsteps = stepsOf(v);
  root.dataset.steps = nsteps;
  setModes(v);
  if (!n) {
    canvas.replaceChildren(); slider.max = 0; slider.value = 0; slider.disabled = true;
    root.dataset.step = ''; label.textContent = (props.value && props.value.note) || 'No trajectory yet: run a dish.';
    legend.textContent = ''; return;
  }
  step = Math.min(Math.max(step, 0), n - 1);
  const result = step >= nsteps, t = Math.min(step, nsteps - 1), show = mode.value || 'argmax';
  slider.disabled = false; slider.max = n - 1; slider.value = step;
  slider.setAttribute('aria-valuetext', result ? 'the returned canvas' : `step ${step} of ${nsteps - 1}`);
  root.dataset.step = step; root.dataset.result = result ? '1' : '0'; root.dataset.mode = show;
  root.dataset.sample = v.sample; root.dataset.live = v.live ? '1' : '0'; root.dataset.family = v.family || '';
  const argmax = v.ids[t], flips = result ? null : v.flipped[t], acc = v.accepted ? v.accepted[t] : null;
  const onCanvas = v.canvas ? v.canvas[t] : null, fin = v.final;
  const conf = v.conf ? v.conf[t] : null, special = new Set(v.special), frag = document.createDocumentFragment();
  const masked = v.family === 'masked-diffusion', flowing = flow.checked;
  canvas.classList.toggle('pt-flow', flowing); root.dataset.flow = flowing ? '1' : '0';
  let nflip = 0;
  for (let i = 0; i < argmax.length; i++) {
    const concept = v.anchor[i];
    let id = result ? fin[i] : (show === 'argmax' || !onCanvas ? argmax[i] : onCanvas[i]);
    if (concept && !result) id = onCanvas ? onCanvas[i] : (fin ? fin[i] : id);  // an anchor shows its own token
    const isMask = masked && v.mask_id !== null && id === v.mask_id && !result && show !== 'argmax';
    const peek = isMask && show === 'peek';
    const shownId = peek ? argmax[i] : id;
    const s = document.createElement('span'), text = isMask && !peek ? '[MASK]' : (v.texts[String(shownId)] ?? String(shownId));
    // flowing text: word pieces joined as the tokenizer writes them (visible marks back to the spaces and
    // line breaks they stand for; a [MASK] keeps its spaces around it)
    const flowText = isMask && !peek ? ' [MASK] ' : text.replace(/␣/g, ' ').replace(/↵/g, '\n').replace(/⇥/g, '\t').replace(/^∅$/, '');
    s.className = 'pt-tok'; s.textContent = flowing ? flowText : text; s.dataset.pos = i; s.dataset.id = shownId;
    let tip = `position ${i}: ${JSON.stringify(text)}` + (isMask && !peek ? ' (still masked)' : ` (id ${shownId})`);
    if (argmax[i] !== shownId && argmax[i] >= 0) tip += `; the model's argmax here: ${JSON.stringify(v.texts[String(argmax[i])] ?? String(argmax[i]))}`;
    if (conf && !isMask) {
      const c = shade(v.scale, conf[i]);
      s.style.background = `rgb(${c.join(',')})`; s.style.color = (c[0] + c[1] + c[2] < 380) ? 'white' : '#111827';
      tip += `, confidence ${conf[i]}`;
    } else if (!conf) { s.classList.add('pt-noconf'); }
    if (isMask) { s.classList.add('pt-masked'); s.dataset.masked = 1; if (peek) s.classList.add('pt-peek'); }
    if (acc && !result) {
      s.dataset.accepted = acc[i];
      if (masked) { if (acc[i] && !concept) { s.classList.add('pt-unmasked'); tip += ', unmasked at this step'; } }
      else if (!acc[i]) { s.classList.add('pt-renoised'); tip += show === 'argmax' ? ', renoised' : ', renoised: a fresh random token the next step reads'; }
      else { tip += ', accepted'; }
    }
    if (flips && flips[i]) { s.classList.add('pt-flip'); s.dataset.flipped = 1; nflip++; tip += ', the argmax flipped at this step'; }
    if (special.has(shownId) && !isMask) s.classList.add('pt-special');
    if (concept) { s.classList.add('pt-anchor'); s.style.borderColor = (v.colors || {})[concept] || '#f4a261'; s.dataset.concept = concept; tip += `, anchor: ${concept}`; }
    tip += `; the argmax last changed at step ${v.commit[i]}`;
    s.title = tip; frag.appendChild(s);
  }
  canvas.replaceChildren(frag);
  root.dataset.flips = nflip;
  const where = result ? `result: the returned canvas (the final text), after step ${nsteps - 1}` : `step ${step} of ${nsteps - 1} · ${nflip} flips`;
  label.textContent = `${v.title || 'sample ' + v.sample} · ${where}` + (v.live ? ' · live: following the newest step' : '') +
    (v.status ? ` · ${v.status}` : '');
  legend.textContent = (v.legends || {})[result ? 'result' : show] || v.legend || '';
}

function go(t) { step = t; render(); }
function stop() {
  if (timer) { clearInterval(timer); timer = null; }
  playBtn.textContent = '▶ Play'; playBtn.setAttribute('aria-pressed', 'false'); root.dataset.playing = '0';
}
function play() {
  if (count() < 2) return;
  if (step >= count() - 1) step = 0;
  render();
  // the pause mark is drawn (two bars), not a glyph: U+23F8 was a box in fonts without it
  playBtn.innerHTML = '<span class="pt-pause-mark" aria-hidden="true"></span> Pause'; playBtn.setAttribute('aria-pressed', 'true'); root.dataset.playing = '1';
  timer = setInterval(() => { if (step >= count() - 1) { stop(); return; } go(step + 1); }, +speed.value);
}
const toggle = () => (timer ? stop() : play());

slider.addEventListener('input', () => { stop(); go(+slider.value); });
element.querySelector('.pt-prev').addEventListener('click', () => { stop(); go(step - 1); });
element.querySelector('.pt-next').addEventListener('click', () => { stop(); go(step + 1); });
playBtn.addEventListener('click', toggle);
speed.addEventListener('change', () => { if (timer) { stop(); play(); } });
mode.addEventListener('change', () => {
  // the step-by-step figure follows: the record, with the mode now shown, goes back to the server
  const v = cur();
  if (v && v.mode !== undefined && v.mode !== mode.value) {
    props.value = {...v, mode: mode.value};
    if (typeof trigger === 'function') trigger('input');
  }
  render();
});
flow.addEventListener('change', () => render());
root.addEventListener('keydown', (e) => {
  if (e.target === speed || e.target === mode || e.target === flow) return;
  const onSlider = e.target === slider;  // the range input moves itself on arrows and fires input
  const moves = {ArrowLeft: -1, ArrowDown: -1, ArrowRight: 1, ArrowUp: 1};
  if (e.key in moves && !onSlider) { e.preventDefault(); stop(); go(step + moves[e.key]); }
  else if (e.key === 'Home' && !onSlider) { e.preventDefault(); stop(); go(0); }
  else if (e.key === 'End' && !onSlider) { e.preventDefault(); stop(); go(count() - 1); }
  else if ((e.key === ' ' || e.key === 'k') && e.target.tagName !== 'BUTTON') { e.preventDefault(); toggle(); }
});

watch('value', () => {
  const v = cur(), key = v ? v.key : null;
  if (v && v.live) { stop(); step = count() - 1; }
  else if (lastLive) { step = count() - 1; }  // a finished live run opens on its last frame
  else if (key !== lastKey) { stop(); step = 0; }
  lastKey = key; lastLive = !!(v && v.live);
  render();
});
render();
"""  # noqa: E501 - served as written: its long lines are HTML, CSS or JavaScript

_MARKS = ("Dashed black outline = the argmax flipped at this step (a mark no concept colour takes); thick solid "
          "border = anchor (its own token, in its concept's colour); striped = special token.")


def view_modes(family: str, has_canvas: bool) -> dict:
    """What the viewer's cells can show for a model ``family`` (``modes``: ``[value, label]`` pairs,
    the default first) and the legend of each (``legends``, plus ``result`` for the last frame, the
    returned canvas). Without a recorded canvas (runs stored before it was) only the raw argmax."""
    colour = f"Colour: {CONFIDENCE_LEGEND}."
    if family == MASKED_FAMILY:
        modes = [["canvas", "canvas"], ["peek", "canvas + argmax under [MASK]"], ["argmax", "raw argmax"]]
        legends = {
            "canvas": f"The canvas after each step (masked diffusion): [MASK] = still masked; dotted black outline = unmasked at "
                      f"this step; every other token was committed at an earlier step and stays. {colour} {_MARKS}",
            "peek": f"The canvas after each step, with the model's raw argmax in italics inside each cell still masked "
                    f"(what it would write there now). Dotted black outline = unmasked at this step. {colour} {_MARKS}",
            "argmax": f"The model's raw argmax at every position at each step, masked or not, before anything is "
                      f"forced. {colour} {_MARKS}",
            "result": f"The returned canvas (the final text): every token as committed. {colour} (at the last step)",
        }
    else:
        modes = [["canvas", "canvas"], ["argmax", "raw argmax"]]
        legends = {
            "canvas": f"The canvas after each step (uniform diffusion, what the next step reads): solid = the "
                      f"denoiser's token, accepted at this step; faded = renoised, a fresh random token. {colour} {_MARKS}",
            "argmax": f"The model's raw argmax at each step, before anything is forced; solid = accepted at this step, "
                      f"faded = renoised. {colour} {_MARKS}",
            "result": "The returned canvas (the final text): DiffusionGemma returns the last step's argmax, anchors in "
                      f"place. {colour} (at the last step)",
        }
    if not has_canvas:
        modes = [["argmax", "raw argmax (this run was stored before the canvas was recorded)"]]
    return {"modes": modes, "legends": legends}


def mode_of(record) -> str:
    """What a viewer value's cells show (its ``mode``; the canvas by default)."""
    return str(record.get("mode") or "canvas") if isinstance(record, dict) else "canvas"


def run_label(run_id: str) -> str:
    """The run a panel shows, as its title starts (``""`` without a run id)."""
    return f"run {run_id[:12]} · " if run_id else ""


EXPORT_LABEL = "Prepare downloads (GIF, figures as PNG/SVG/HTML, steps CSV/Parquet)"
EXPORT_BUSY_LABEL = "Preparing the downloads… (GIF and figures take several seconds)"

#: The component names a tab adds to its result views (prefixed per view).
PARTS = ("view", "key", "sample", "figure", "curves", "files")


class TrajectoryView:
    """The handlers of one trajectory viewer (a tab may hold several: Compare has one per event)."""

    def __init__(self, service, tokens: TokenText, prefix: str = "traj"):
        self.service, self.tokens, self.prefix = service, tokens, prefix

    def name(self, part: str) -> str:
        return f"{self.prefix}_{part}"

    # -- values ---------------------------------------------------------------------------
    def record(self, traj: Trajectory, sample: int, key: str, title: str = "", status: str = "",
               mode: str = "canvas") -> dict:
        """The view's value for one stored sample (``status``: a note the step line carries, e.g.
        that the run was cancelled; ``mode``: what its cells show, as the figure beside it, which
        the viewer's choice sends back)."""
        rec = sample_record(traj, sample, self.tokens, self.tokens.is_special)
        return {**rec, **view_modes(rec["family"], rec["canvas"] is not None), "key": f"{key}:{sample}", "live": False,
                "mode": shown_mode(traj, mode if mode in FIGURE_MODES else "canvas"),
                "colors": run_colors(traj), "scale": CONFIDENCE_SCALE, "status": status,
                "title": f"{title}sample {rec['sample']} of {rec['n_samples']}"}

    def live(self, token_ids: np.ndarray, spans, pinned_row, colors: dict[str, str], *, canvas=None, accepted=None,
             family: str = UNIFORM_FAMILY, mask_id: int | None = None) -> dict:
        """The view's value while sampling: sample 0's raw argmax, canvas and accept mask so far
        ``(T, L)``, its anchor ``spans`` and pinned positions ``(L,)`` (no confidence: not streamed)."""
        anchor_row = anchor_concepts([spans], len(pinned_row))[0]
        rec = live_record(token_ids, anchor_row, pinned_row, self.tokens, self.tokens.is_special, canvas=canvas,
                          accepted=accepted, family=family, mask_id=mask_id)
        modes = view_modes(family, canvas is not None)
        live_note = (" Live: sample 0 as each step arrives (confidence is not streamed; the stored record replaces this view when "
                     "the run ends).")
        return {**rec, **modes, "legends": {k: v + live_note for k, v in modes["legends"].items()},
                "key": "live", "live": True, "colors": colors, "scale": CONFIDENCE_SCALE, "title": "sample 0 (live)"}

    def cleared(self, note: str) -> dict:
        """Every part emptied (a run starts), the view saying ``note``."""
        return {self.name("view"): {"note": note}, self.name("key"): None, self.name("figure"): None,
                self.name("curves"): None, self.name("files"): None,
                self.name("sample"): gr.update(value=0, maximum=1, interactive=False)}  # not the last run's range

    def views(self, run_id: str, event: int, traj: Trajectory, sample: int = 0, title: str = "",
              mode: str = "canvas") -> dict:
        """Every part's value for a stored run's event (after a run, and when a run is reopened);
        the viewer's step line names the run; the viewer's cells and the figure show ``mode``."""
        sample = min(max(int(sample), 0), traj.n_samples - 1)
        return {
            self.name("view"): self.record(traj, sample, f"{run_id}:{event}", run_label(run_id) + title, mode=mode),
            self.name("key"): {"run_id": run_id, "event": int(event), "title": title},
            self.name("sample"): gr.update(maximum=max(traj.n_samples - 1, 1), value=sample, interactive=traj.n_samples > 1),
            self.name("figure"): self.figure(traj, sample, mode),
            self.name("curves"): responsive(step_curves_figure(traj, sample)),
            self.name("files"): None,
        }

    def figure(self, traj: Trajectory, sample: int, mode: str = "canvas"):
        """The step-by-step figure of one sample, its cells showing ``mode`` as the viewer does. Cells
        wide enough to read their whole text: a canvas wider than the page scrolls sideways (its box
        has overflow-x: auto, UI_CSS), so the figure is never shrunk to unreadable cells."""
        return trajectory_figure(traj, sample, self.tokens, colors=run_colors(traj), cell_px=READABLE_CELL_PX,
                                 mode=mode if mode in FIGURE_MODES else "canvas")

    # -- handlers -------------------------------------------------------------------------
    def _stored(self, key: dict | None, caller: Caller | None):
        """The shown run's stored events, if ``caller`` (None: local) may open the run."""
        if not key or not key.get("run_id"):
            raise gr.Error("Run or reopen a dish first.", title="Trajectory")
        UiAccess.open_run(self.service, caller or Caller(public=False), key["run_id"])
        stored = self.service.load_events(key["run_id"])
        if not stored or key["event"] >= len(stored):
            raise gr.Error(f"run_id: no stored event {key['event']} in run {key['run_id']!r}", title="Trajectory")
        return stored

    def show_sample(self, key: dict | None, sample, caller: Caller | None = None, mode: str = "canvas") -> dict:
        """Another sample of the stored run: its record, figure and curves (cells showing ``mode``)."""
        stored = self._stored(key, caller)
        key = cast(dict, key)  # _stored refused a missing key
        views = self.views(key["run_id"], key["event"], stored[key["event"]][2], int(sample or 0), key.get("title", ""),
                           mode)
        views.pop(self.name("sample"))
        return views

    def show_mode(self, key: dict | None, record: dict | None, caller: Caller | None = None):
        """The figure after the viewer's choice of what the cells show changed (``record``: the
        viewer's value, its ``sample`` and ``mode``); unchanged while no stored run is shown."""
        if not key or not key.get("run_id") or not isinstance(record, dict) or "mode" not in record:
            return gr.update()
        stored = self._stored(key, caller)
        return self.figure(stored[key["event"]][2], int(record.get("sample") or 0), str(record["mode"]))

    def export(self, key: dict | None, sample, caller: Caller | None = None) -> list[str]:
        """The replay files of the shown sample (GIF, figures as HTML/PNG/SVG, steps CSV/Parquet),
        written into ``caller``'s own download folder (:func:`petri.web.ui.access.export_dir`)."""
        stored = self._stored(key, caller)
        key = cast(dict, key)  # _stored refused a missing key
        folder = export_dir(caller) / f"{key['run_id']}-replay-{self.prefix}"
        paths, notes = export_bundle([t for _, _, t in stored], [g for _, g, _ in stored], key["event"],
                                     int(sample or 0), folder, self.tokens)
        for note in notes:
            gr.Info(note)
        return [str(p) for p in paths]

    # -- components -----------------------------------------------------------------------
    def build(self, label: str = "Trajectory", access: UiAccess | None = None,
              empty_note: str = "No trajectory yet: run a dish.", sample_selector: bool = True) -> dict:
        """The components (inside an open Blocks context) by name, their events wired (``access``
        says who calls each handler); ``empty_note`` is what the viewer says before its first run.
        ``sample_selector=False``: the view's own sample slider is hidden (a tab whose one selector
        sets it, as the Dish tab's does)."""
        access = access or UiAccess()
        elem = f"petri-{self.prefix.replace('_', '-')}"
        with gr.Accordion(f"{label}: watch the text settle, step by step", open=True, elem_id=f"{elem}-box"):
            with gr.Row():
                sample = gr.Slider(0, 1, value=0, step=1, label="Sample shown (numbered from 0)", interactive=False,
                                   elem_id=f"{elem}-sample", scale=3, visible=sample_selector)
                export = gr.Button(EXPORT_LABEL, size="sm", elem_id=f"{elem}-export", scale=2)
            # right under its button: the files come where the user clicked, not 900 px lower
            files = gr.File(label="Replay downloads", file_count="multiple", interactive=False,
                            elem_id=f"{elem}-files")
            view = gr.HTML({"note": empty_note}, html_template=VIEW_HTML, css_template=VIEW_CSS, js_on_load=VIEW_JS, elem_id=elem,
                           padding=False, container=False)
            figure = gr.Plot(show_label=False, elem_id=f"{elem}-figure", elem_classes=["petri-wide-figure"])
            curves = gr.Plot(show_label=False, elem_id=f"{elem}-curves")
        key = gr.State(None)
        parts = {self.name("view"): view, self.name("key"): key, self.name("sample"): sample,
                 self.name("figure"): figure, self.name("curves"): curves, self.name("files"): files}
        outputs = [view, figure, curves, files]

        def on_sample(request: gr.Request, k, s, shown):
            views = self.show_sample(k, s, access.caller(request), mode_of(shown))
            return [views[self.name(p)] for p in ("view", "figure", "curves", "files")]

        def on_export(request: gr.Request, k, s):
            return self.export(k, s, access.caller(request))

        # every way the value moves (a drag, arrow keys, a number typed in its box); the last one wins
        def on_mode(request: gr.Request, k, shown):
            return self.show_mode(k, shown, access.caller(request))

        sample.input(on_sample, [key, sample, view], outputs, show_progress="hidden", trigger_mode="always_last",
                     api_name=self.name("sample"))
        # the viewer's choice of what the cells show (its select sends the record back): the figure follows
        view.input(on_mode, [key, view], figure, show_progress="minimal", trigger_mode="always_last")
        # about 15 s: the button says it is working (at once, outside the queue) and the files scroll into view
        busy_click(export, EXPORT_LABEL, EXPORT_BUSY_LABEL, on_export, [key, sample], files, f"{elem}-files",
                   api_name=self.name("export"))
        return parts
