"""The Gradio UI (Blocks + plotly): tabs *Dish*, *Study* and *Model*.

Thin over :class:`~petri.service.PetriService`: every model job goes through the service's lock
(the UI's queue runs one job per event handler; an API job running at the same time makes the UI
wait). Requests are validated by the same pydantic models as ``POST /api/seed``.

While a dish samples, the sampler's ``on_step`` callback (worker thread) pushes each step's raw
argmax through a queue; the run handler is a generator that redraws the step × position flip
heatmap as the steps arrive.
"""

from __future__ import annotations

import queue
import tempfile
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from pydantic import ValidationError

from petri.api import (
    LIMITS,
    MAX_SAMPLES,
    FieldError,
    SeedRequest,
    SettingsIn,
    prepare_seed,
    run_seed,
    write_run_files,
)
from petri.dish import (
    DEFAULT_TEMPLATE,
    Dish,
    LayoutError,
    check_spans,
    concept_token_ids,
    encode_prompt,
    even_slots,
    pinned_arrays,
)
from petri.metrics import anchor_concepts, steps_run
from petri.study.plots import flips_bar
from petri.engine.seeding import plan_dish
from petri.service import BusyError, PetriService
from petri.tables import pairs_table, samples_table
from petri.trajectory import AnchorSpan, SamplerSettings, Trajectory

#: How long a UI job waits for a running job (an API request or another tab) before giving up.
UI_WAIT_S = 600.0
#: Redraw the live heatmap at most this often (seconds).
LIVE_REDRAW_S = 0.25

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
PREFIX_LABEL = "pinned prefix"

TEMPLATES = [
    DEFAULT_TEMPLATE,
    "{event}",
    "Event: {event}\nWrite a short report about this event that mentions {concepts}.",
    "Here is what happened: {event}\nExplain the situation in terms of {concepts}.",
]
EXAMPLE_EVENT = "Only 90 units are in stock, but a customer ordered 120."
EXAMPLE_CONCEPTS = "order, inventory, person"

UI_CSS = """
#petri-strip, #petri-heatmap { min-height: 0; }
.petri-note { color: var(--body-text-color-subdued); font-size: 0.9em; }
"""


# ------------------------------------------------------------------------------- pure helpers


def parse_concepts(text: str) -> list[str]:
    """``"order, inventory , person"`` → ``["order", "inventory", "person"]`` (empty entries kept
    as ``""`` so validation can name them)."""
    if not text or not text.strip():
        return []
    return [c.strip() for c in text.split(",")]


def concept_colors(concepts: Sequence[str]) -> dict[str, str]:
    """A colour per concept, assigned in sorted order so every view of a dish agrees."""
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(sorted(set(concepts)))}


class TokenText:
    """Readable text of single token ids (cached), for hovers and the highlighted final text."""

    def __init__(self, tokenizer):
        self._decode = lru_cache(maxsize=65536)(lambda i: tokenizer.decode([i]) if i >= 0 else "")

    def __call__(self, token_id: int) -> str:
        return self._decode(int(token_id))

    def grid(self, ids: np.ndarray) -> np.ndarray:
        return np.vectorize(self.__call__, otypes=[object])(ids) if ids.size else np.empty(ids.shape, dtype=object)


class LiveFlips:
    """Accumulates the on_step stream into a step × position count of samples whose (free)
    position flipped at that step, plus sample 0's argmax for the hover."""

    def __init__(self, pinned: np.ndarray):
        self.free = ~pinned
        self.rows: list[np.ndarray] = []
        self.tokens: list[np.ndarray] = []
        self.prev: np.ndarray | None = None
        self.done = np.zeros(pinned.shape[0], dtype=bool)

    def add(self, argmax: np.ndarray, finished: np.ndarray) -> None:
        running = ~self.done
        if self.prev is None:
            flips = np.zeros(argmax.shape[1], dtype=int)
        else:
            flips = ((argmax != self.prev) & self.free & running[:, None]).sum(axis=0)
        self.rows.append(flips)
        self.tokens.append(np.where(running[0], argmax[0], -1))
        self.prev = argmax
        self.done = self.done | np.asarray(finished, dtype=bool)

    def counts(self) -> np.ndarray:
        return np.array(self.rows) if self.rows else np.zeros((0, self.free.shape[1]), dtype=int)


def trajectory_flip_grid(traj: Trajectory) -> np.ndarray:
    """(T, L) int: how many samples flipped at each (step, free position), from the trajectory."""
    argmax, steps = traj.argmax, traj.steps
    flipped = np.zeros(argmax.shape, dtype=bool)
    flipped[:, 1:] = argmax[:, 1:] != argmax[:, :-1]
    flipped &= steps_run(steps, argmax.shape[1])[:, :, None]
    flipped &= ~traj.anchor_mask[:, None, :]
    return flipped.sum(axis=0)


def canvas_strip(
    canvas_length: int, prefix: int, spans: Sequence[AnchorSpan], colors: dict[str, str], error: str = ""
) -> go.Figure:
    """The canvas as a strip: the pinned prefix in grey, each anchor as a coloured block."""
    fig = go.Figure()
    fig.add_shape(type="rect", x0=0, x1=canvas_length, y0=0, y1=1, fillcolor="#f3f4f6", line_width=1, line_color="#9ca3af")
    if prefix:
        fig.add_shape(type="rect", x0=0, x1=prefix, y0=0, y1=1, fillcolor="#d1d5db", line_width=0)
        fig.add_annotation(x=prefix / 2, y=0.5, text="prefix", showarrow=False, font=dict(size=10, color="#374151"))
    for i, span in enumerate(spans):
        color = colors.get(span.concept, PALETTE[i % len(PALETTE)])
        fig.add_shape(type="rect", x0=span.start, x1=span.end, y0=0, y1=1, fillcolor=color, line_width=0, opacity=0.9)
        fig.add_annotation(
            x=(span.start + span.end) / 2, y=1.0, yanchor="bottom", text=f"<b>{span.concept}</b> @{span.start}",
            showarrow=False, font=dict(size=12, color=color),
        )
    # an invisible trace so hovering the strip tells the position
    fig.add_trace(go.Scatter(x=list(range(canvas_length)), y=[0.5] * canvas_length, mode="markers",
                             marker=dict(opacity=0), hovertemplate="position %{x}<extra></extra>", showlegend=False))
    title = f"<span style='color:#b91c1c'>{error}</span>" if error else f"canvas: {canvas_length} positions"
    fig.update_layout(
        title=dict(text=title, font=dict(size=13), x=0.01, y=0.95),
        height=150, margin=dict(l=10, r=10, t=50, b=30), plot_bgcolor="white",
        xaxis=dict(range=[-0.5, canvas_length + 0.5], title=None, showgrid=False, zeroline=False),
        yaxis=dict(range=[0, 1.6], visible=False, fixedrange=True),
    )
    return fig


def flip_heatmap(
    counts: np.ndarray,
    token_ids: np.ndarray,
    tokens: TokenText,
    n_samples: int,
    pinned: np.ndarray,
    spans: Sequence[AnchorSpan],
    colors: dict[str, str],
    title: str,
) -> go.Figure:
    """Step × position heatmap of flips (number of samples whose free position changed its argmax
    at that step); pinned positions are blank; hover shows sample 0's token at that step."""
    counts = np.asarray(counts, dtype=float)
    length = pinned.shape[1]
    if counts.size == 0:
        counts = np.full((1, length), np.nan)
        token_ids = np.full((1, length), -1)
    z = counts.copy()
    z[:, pinned.all(axis=0)] = np.nan
    text = tokens.grid(np.asarray(token_ids))
    text = np.vectorize(lambda t: repr(t)[1:-1] if t else "", otypes=[object])(text)
    fig = go.Figure(
        go.Heatmap(
            z=z, text=text, x=list(range(length)), y=list(range(z.shape[0])),
            colorscale="YlOrRd", zmin=0, zmax=max(1, n_samples), xgap=0, ygap=0,
            colorbar=dict(title=dict(text="samples<br>flipping", side="top"), thickness=12, tickformat="d"),
            hovertemplate="step %{y}, position %{x}<br>token (sample 0): <b>%{text}</b>"
            "<br>samples flipping: %{z}<extra></extra>",
        )
    )
    for span in spans:
        color = colors.get(span.concept, "#888")
        fig.add_vrect(x0=span.start - 0.5, x1=span.end - 0.5, fillcolor=color, opacity=0.35, line_width=0)
        fig.add_annotation(x=(span.start + span.end - 1) / 2, y=1.0, yref="paper", yanchor="bottom",
                           text=f"<b>{span.concept}</b>", showarrow=False, font=dict(size=11, color=color))
    fig.update_layout(
        title=dict(text=title, font=dict(size=14), x=0.01, y=0.97),
        height=400, margin=dict(l=50, r=10, t=80, b=40), plot_bgcolor="#f9fafb",
        xaxis=dict(title="canvas position", range=[-0.5, length - 0.5]),
        yaxis=dict(title="denoising step", autorange="reversed"),
    )
    return fig


def highlighted_text(traj: Trajectory, sample: int, tokens: TokenText) -> list[tuple[str, str | None]]:
    """Sample ``sample``'s final canvas, token by token, anchors labelled with their concept."""
    concepts = anchor_concepts(traj.anchors, traj.canvas_length)[sample]
    pinned = traj.anchor_mask[sample]
    out = []
    for i, token_id in enumerate(traj.final_ids[sample]):
        label = concepts[i] or (PREFIX_LABEL if pinned[i] else None)
        out.append((tokens(token_id), label or None))
    return out


def request_error_message(err: ValidationError | FieldError) -> str:
    """One line per bad field, naming it (as the API's 422 body does)."""
    if isinstance(err, FieldError):
        where = ".".join(str(p) for p in err.loc if p != "body")
        return err.msg if err.msg.startswith(where.split(".")[0] + ":") else f"{where}: {err.msg}"
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        lines.append(f"{where}: {e['msg']}")
    return "; ".join(lines)


# ------------------------------------------------------------------------------- the app


class DishController:
    """The Dish tab's handlers (kept apart from the layout code so they can be called directly)."""

    def __init__(self, service: PetriService):
        self.service = service
        self.lm = service.lm
        self.tokens = TokenText(self.lm.tokenizer)
        self.workdir = Path(tempfile.mkdtemp(prefix="petri-ui-"))

    # -- placement ------------------------------------------------------------------------
    def prefix_length(self, pin_thought: bool) -> int:
        return len(encode_prompt(self.lm.tokenizer, "x", pin_thought_channel=pin_thought).canvas_prefix_ids)

    def spread(self, concepts_text: str, pin_thought: bool = True) -> pd.DataFrame:
        concepts = [c for c in parse_concepts(concepts_text) if c]
        rows = []
        try:
            lengths = [len(concept_token_ids(self.lm.tokenizer, c)) for c in concepts]
            starts = even_slots(lengths, self.lm.canvas_length, self.prefix_length(pin_thought))
        except LayoutError:
            lengths, starts = [0] * len(concepts), [0] * len(concepts)
        for c, start, n in zip(concepts, starts, lengths):
            rows.append([c, int(start), int(n)])
        return pd.DataFrame(rows, columns=["concept", "start", "tokens"])

    def shuffle(self, placement: pd.DataFrame, pin_thought: bool = True) -> pd.DataFrame:
        table = self._clean(placement)
        if table.empty:
            return table
        order = np.random.default_rng().permutation(len(table))
        concepts = table["concept"].iloc[order].tolist()
        lengths = [len(concept_token_ids(self.lm.tokenizer, c)) for c in concepts]
        starts = sorted(table["start"].tolist())
        spans = [AnchorSpan(c, s, (0,) * n) for c, s, n in zip(concepts, starts, lengths)]
        try:
            check_spans(spans, self.lm.canvas_length, self.prefix_length(pin_thought))
        except LayoutError:
            starts = even_slots(lengths, self.lm.canvas_length, self.prefix_length(pin_thought))
        return pd.DataFrame({"concept": concepts, "start": [int(s) for s in starts], "tokens": lengths})

    @staticmethod
    def _clean(placement) -> pd.DataFrame:
        table = pd.DataFrame(placement, columns=["concept", "start", "tokens"]) if not isinstance(placement, pd.DataFrame) else placement.copy()
        if table.empty:
            return pd.DataFrame(columns=["concept", "start", "tokens"])
        table = table[table["concept"].astype(str).str.strip() != ""]
        table["concept"] = table["concept"].astype(str).str.strip()
        table["start"] = pd.to_numeric(table["start"], errors="coerce").fillna(0).astype(int)
        return table.reset_index(drop=True)

    def strip(self, placement, pin_thought: bool = True) -> go.Figure:
        table = self._clean(placement)
        prefix = self.prefix_length(pin_thought)
        spans, error = [], ""
        try:
            for c, s in zip(table["concept"], table["start"]):
                spans.append(AnchorSpan(c, int(s), concept_token_ids(self.lm.tokenizer, c)))
            check_spans(spans, self.lm.canvas_length, prefix)
        except LayoutError as err:
            error = str(err)
        return canvas_strip(self.lm.canvas_length, prefix, spans, concept_colors(list(table["concept"])), error)

    # -- the run ----------------------------------------------------------------------------
    def build_request(self, concepts_text, event, template, samples, seed, placement, shuffle, steps,
                      entropy_bound, t_min, t_max, adaptive, pin_thought) -> SeedRequest:
        concepts = parse_concepts(concepts_text)
        table = self._clean(placement)
        positions = None
        if list(table["concept"]) and sorted(table["concept"]) == sorted(c for c in concepts if c):
            concepts = list(table["concept"])  # the table's order is the slot order
            positions = [int(s) for s in table["start"]]
        settings = SettingsIn(
            max_denoising_steps=int(steps) if steps else None,
            entropy_bound=entropy_bound, t_min=t_min, t_max=t_max,
            adaptive_stop=bool(adaptive), pin_thought_channel=bool(pin_thought),
        )
        return SeedRequest(
            concepts=concepts, event=event or None, template=template or DEFAULT_TEMPLATE,
            positions=positions, shuffle=bool(shuffle), samples=int(samples or 1), settings=settings,
            seed=int(seed or 0),
        )

    #: Where a request field's error is shown: the index of the UI input that holds it.
    INPUT_OF_FIELD = {
        "concepts": 0, "event": 1, "template": 2, "samples": 3, "seed": 4, "positions": 5, "shuffle": 6,
        "max_denoising_steps": 7, "entropy_bound": 8, "t_min": 9, "t_max": 10, "adaptive_stop": 11,
        "pin_thought_channel": 12,
    }

    def validate(self, *inputs) -> list[dict]:
        """Gradio validator: one ``gr.validate`` per input, the bad ones carrying the message
        (the same checks as ``POST /api/seed``), so the UI marks the field itself."""
        problems: dict[int, list[str]] = {}
        request = None
        try:
            request = self.build_request(*inputs)
            prepare_seed(request, self.lm)
        except ValidationError as err:
            for e in err.errors():
                loc = [p for p in e["loc"] if p != "settings"]
                index = self.INPUT_OF_FIELD.get(str(loc[0]) if loc else "", 0)
                problems.setdefault(index, []).append(f"{'.'.join(map(str, e['loc']))}: {e['msg']}")
        except FieldError as err:
            loc = [p for p in err.loc if p not in ("body", "settings")]
            index = self.INPUT_OF_FIELD.get(str(loc[0]) if loc else "", 0)
            if err.kind == "layout_error" and request is not None and request.positions is not None:
                index = self.INPUT_OF_FIELD["positions"]  # the slots the user placed
            problems.setdefault(index, []).append(request_error_message(err))
        return [
            gr.validate(i not in problems, "; ".join(problems.get(i, [])))
            for i in range(len(inputs))
        ]

    def run(self, *inputs):
        """Generator: validate, start the job in a worker thread, redraw the heatmap per step,
        then yield every result. Yields dicts keyed by output component name."""
        try:
            request = self.build_request(*inputs)
            events, settings = prepare_seed(request, self.lm)
        except (ValidationError, FieldError) as err:
            raise gr.Error(request_error_message(err), title="Check the dish") from None
        dish: Dish = events[0].dish
        prompt, layouts = plan_dish(self.lm, dish, request.samples, settings, request.seed)
        pinned, _ = pinned_arrays(layouts, prompt.canvas_prefix_ids, self.lm.canvas_length)
        colors = concept_colors(dish.concepts)
        live = LiveFlips(pinned)
        steps_max = settings.max_denoising_steps
        messages: queue.Queue = queue.Queue()

        def on_step(index, argmax, finished):
            messages.put(("step", index, np.array(argmax, copy=True), np.array(finished, copy=True)))

        def work():
            try:
                result = run_seed(self.service, events, request.samples, settings, request.seed, on_step, UI_WAIT_S)
                messages.put(("done", result))
            except BaseException as err:  # noqa: BLE001 - handed to the generator
                messages.put(("error", err))

        if self.service.busy:
            yield {"status": "⏳ Waiting for the model: another job is running…"}
        threading.Thread(target=work, daemon=True, name="petri-ui-seed").start()
        last_draw = 0.0
        result = None
        while result is None:
            try:
                item = messages.get(timeout=0.5)
            except queue.Empty:
                continue
            if item[0] == "error":
                err = item[1]
                if isinstance(err, BusyError):
                    raise gr.Error(f"The model is busy: {err}", title="Busy")
                raise gr.Error(f"Sampling failed: {err}")
            if item[0] == "done":
                result = item[1]
                break
            _, index, argmax, finished = item
            live.add(argmax, finished)
            now = time.monotonic()
            if now - last_draw >= LIVE_REDRAW_S:
                last_draw = now
                yield {
                    "status": f"Sampling… step {index + 1} of at most {steps_max} "
                              f"({int(finished.sum())}/{len(finished)} samples settled)",
                    "heatmap": flip_heatmap(live.counts(), np.array(live.tokens), self.tokens, request.samples,
                                            pinned, layouts[0], colors, f"flips while sampling — step {index + 1}"),
                }
        traj = result.trajectories[0]
        files = write_run_files(result.run_id, result.trajectories, result.groups, self.workdir / result.run_id)
        yield {
            "status": (f"Done: run `{result.run_id}` — {traj.n_samples} samples, steps {traj.steps.tolist()}, "
                       f"{result.wall_s:.2f} s on {traj.device}. Stored; also at `/api/runs/{result.run_id}`."),
            "heatmap": self.final_heatmap(traj),
            "run_id": result.run_id,
            **self.sample_views(traj, 0),
            "pairs": self.pairs_view(traj),
            "samples_table": self.samples_view(traj),
            "files": [str(p) for p in files],
            "sample": gr.update(maximum=max(traj.n_samples - 1, 1), value=0, interactive=traj.n_samples > 1),
        }

    def final_heatmap(self, traj: Trajectory) -> go.Figure:
        colors = concept_colors([a.concept for a in traj.anchors[0]])
        pinned = traj.anchor_mask
        return flip_heatmap(trajectory_flip_grid(traj), traj.argmax[0], self.tokens, traj.n_samples, pinned,
                            traj.anchors[0], colors, f"flips per step and position ({traj.n_samples} samples)")

    def sample_views(self, traj: Trajectory, sample: int) -> dict:
        colors = concept_colors(sorted({a.concept for spans in traj.anchors for a in spans}))
        sample = min(max(sample, 0), traj.n_samples - 1)
        pieces = highlighted_text(traj, sample, self.tokens)
        color_map = {**colors, **({PREFIX_LABEL: "#d1d5db"} if any(l == PREFIX_LABEL for _, l in pieces) else {})}
        return {
            "final_text": gr.update(value=pieces, color_map=color_map),
            "flips": flips_bar(traj, sample, self.lm.tokenizer),
        }

    @staticmethod
    def pairs_view(traj: Trajectory) -> pd.DataFrame:
        table = pairs_table(traj)[["pair", "n_segments", "instability"]]
        return table.sort_values("instability", ascending=False, na_position="last").round(3)

    @staticmethod
    def samples_view(traj: Trajectory) -> pd.DataFrame:
        cols = ["sample", "steps", "anchor_layout", "mean_flips_free", "settled_share", "anchors_intact",
                "n_anchors", "mean_agreement", "final_text"]
        table = samples_table(traj)[cols].copy()
        return table.round(3)

    def show_sample(self, run_id: str, sample: int) -> dict:
        if not run_id:
            return {}
        stored = self.service.store.load_events(run_id)
        if not stored:
            return {}
        return self.sample_views(stored[0][2], int(sample))


def model_card(model_source: str | None) -> str:
    """The model folder's README.md (a model card), if the model came from a local folder."""
    if not model_source:
        return ""
    folder = Path(model_source).expanduser()
    readme = folder / "README.md"
    try:
        if folder.is_dir() and readme.is_file():
            text = readme.read_text(encoding="utf-8", errors="replace")[:20000]
            if text.startswith("---"):  # YAML front matter of a Hub model card
                end = text.find("\n---", 3)
                text = text[end + 4 :].lstrip() if end != -1 else text
            return text
    except OSError:
        pass
    return ""


def model_markdown(service: PetriService, model_source: str | None) -> str:
    import torch
    import transformers

    info = service.lm.describe()
    defaults = service.lm.default_settings()
    lines = [
        "| property | value |", "|---|---|",
        f"| model | `{info['model_id']}` |",
        f"| source | `{model_source or 'in-process'}` |",
        f"| backend | PyTorch {torch.__version__} · transformers {transformers.__version__} "
        f"(`{type(service.lm.model).__name__}`) |",
        f"| device | `{info['device']}` |",
        f"| dtype | `{info['dtype']}` |",
        f"| canvas length | {info['canvas_length']} tokens |",
        f"| vocabulary | {info['vocab_size']} tokens |",
        f"| run store | `{service.store.path}` |",
        "",
        "**Sampler defaults** (from the model's generation config): "
        + ", ".join(f"`{k}={v}`" for k, v in defaults.to_dict().items()),
        "",
        "**Request limits** (UI and `POST /api/seed`): " + "; ".join(f"{k}: {v}" for k, v in LIMITS.items()),
    ]
    card = model_card(model_source)
    lines += ["", "---", "### Model card", "", card if card else "_No model card (README.md) in the model folder._"]
    return "\n".join(lines)


def build_ui(service: PetriService, model_source: str | None = None) -> gr.Blocks:
    """The Blocks app: Dish, Study and Model tabs, all over the one service."""
    ctl = DishController(service)
    lm = service.lm
    defaults: SamplerSettings = lm.default_settings()
    max_samples = MAX_SAMPLES

    with gr.Blocks(title="Concept Petri Dish", analytics_enabled=False) as demo:
        gr.Markdown(
            "# Concept Petri Dish\n"
            "Pin concepts on a text-diffusion canvas, let the model fill in the relations, and watch where "
            "it struggles: positions whose most likely token keeps **flipping** between denoising steps. "
            f"Model: `{lm.model_id}` on `{lm.device}`. HTTP API: [`/docs`](/docs)."
        )
        with gr.Tab("Dish", id="dish"):
            with gr.Row():
                with gr.Column(scale=3):
                    concepts = gr.Textbox(EXAMPLE_CONCEPTS, label="Concepts (2–8, comma-separated)",
                                          elem_id="petri-concepts")
                    event = gr.Textbox(EXAMPLE_EVENT, label="Event", lines=3, max_length=2000, elem_id="petri-event")
                    template = gr.Dropdown(TEMPLATES, value=DEFAULT_TEMPLATE, allow_custom_value=True,
                                           label="Prompt template ({event}, {concepts})")
                with gr.Column(scale=2):
                    placement = gr.Dataframe(
                        ctl.spread(EXAMPLE_CONCEPTS), headers=["concept", "start", "tokens"],
                        datatype=["str", "number", "number"], interactive=True, static_columns=[0, 2],
                        label="Anchor slots (edit a start position)", elem_id="petri-placement",
                    )
                    with gr.Row():
                        spread_btn = gr.Button("Spread evenly", size="sm")
                        shuffle_btn = gr.Button("Shuffle", size="sm")
                    shuffle_per_sample = gr.Checkbox(
                        True, label="Shuffle concepts over the slots per sample (every pair becomes adjacent somewhere)")
            strip = gr.Plot(ctl.strip(ctl.spread(EXAMPLE_CONCEPTS)), label="Canvas", show_label=False, elem_id="petri-strip")
            with gr.Row():
                samples = gr.Slider(1, max_samples, value=8, step=1, label="Samples", elem_id="petri-samples")
                seed = gr.Number(0, precision=0, minimum=0, label="Seed")
            with gr.Accordion("Sampler settings", open=False):
                with gr.Row():
                    steps = gr.Slider(1, 256, value=defaults.max_denoising_steps, step=1, label="Max denoising steps",
                                      elem_id="petri-steps")
                    entropy_bound = gr.Number(defaults.entropy_bound, label="Entropy bound")
                    t_min = gr.Number(defaults.t_min, label="t_min")
                    t_max = gr.Number(defaults.t_max, label="t_max")
                with gr.Row():
                    adaptive = gr.Checkbox(defaults.stability_threshold is not None, label="Adaptive stop")
                    pin_thought = gr.Checkbox(defaults.pin_thought_channel,
                                              label="Pin the empty thought block (chat-template models)")
            run_btn = gr.Button("Run the dish", variant="primary", elem_id="petri-run")
            status = gr.Markdown("", elem_id="petri-status")
            heatmap = gr.Plot(label="Flips: step × position (live)", show_label=False, elem_id="petri-heatmap")
            run_id = gr.State("")
            with gr.Row():
                sample = gr.Slider(0, 1, value=0, step=1, label="Sample (numbered from 0, as in the CSVs)",
                                   interactive=False)
            final_text = gr.HighlightedText(label="Final text (anchors highlighted)", combine_adjacent=True,
                                            show_legend=True, elem_id="petri-final")
            flips = gr.Plot(label="Flips per position", show_label=False, elem_id="petri-flips")
            with gr.Row():
                pairs = gr.Dataframe(pd.DataFrame(columns=["pair", "n_segments", "instability"]),
                                     label="Pair instability (mean flips between adjacent anchors)",
                                     interactive=False, elem_id="petri-pairs")
                files = gr.File(label="CSV downloads (tidy tables + run.json)", file_count="multiple",
                                interactive=False, elem_id="petri-files")
            with gr.Accordion("Samples", open=False):
                samples_table_view = gr.Dataframe(interactive=False, wrap=True)

            run_inputs = [concepts, event, template, samples, seed, placement, shuffle_per_sample, steps,
                          entropy_bound, t_min, t_max, adaptive, pin_thought]
            names = {"status": status, "heatmap": heatmap, "run_id": run_id, "final_text": final_text,
                     "flips": flips, "pairs": pairs, "samples_table": samples_table_view, "files": files,
                     "sample": sample}

            def run_handler(*args):
                for update in ctl.run(*args):
                    yield {names[k]: v for k, v in update.items()}

            concepts.change(ctl.spread, [concepts, pin_thought], placement, show_progress="hidden")
            spread_btn.click(ctl.spread, [concepts, pin_thought], placement, show_progress="hidden")
            shuffle_btn.click(ctl.shuffle, [placement, pin_thought], placement, show_progress="hidden")
            placement.change(ctl.strip, [placement, pin_thought], strip, show_progress="hidden")
            pin_thought.change(ctl.spread, [concepts, pin_thought], placement, show_progress="hidden")
            run_btn.click(run_handler, run_inputs, list(names.values()), concurrency_limit=1,
                          concurrency_id="model", show_progress="minimal", validator=ctl.validate)

            def sample_handler(rid, s):
                return {names[k]: v for k, v in ctl.show_sample(rid, s).items()}

            sample.release(sample_handler, [run_id, sample], [final_text, flips], show_progress="hidden")

        with gr.Tab("Study", id="study"):
            from petri.ui_study import build_study_tab

            build_study_tab(service)

        with gr.Tab("Model", id="model"):
            gr.Markdown(model_markdown(service, model_source), elem_id="petri-model")
    return demo
