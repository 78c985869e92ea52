"""The dish inputs the Dish and Compare tabs share, built and wired once: the anchor slot table with
its Spread / Shuffle buttons and the per-sample shuffle box, the canvas of concept chips
(:mod:`petri.web.ui.canvas`, kept in sync with the table), and the sampler settings (max steps,
entropy bound, temperatures, adaptive stop, the thought-block pin).

Each builder makes its components inside the open Blocks context and returns them by the control
names that :meth:`petri.web.ui.dish.DishController.controls_of` gives values for (``placement``,
``shuffle``, ``steps``, ``entropy_bound``, ``t_min``, ``t_max``, ``adaptive``, ``pin_thought``), so a
reopened run sets them back in either tab. ``elem`` prefixes the element ids (``petri`` on the Dish
tab, ``petri-cmp`` on the Compare tab).
"""

from __future__ import annotations

import gradio as gr

from petri.core.trajectory import SamplerSettings
from petri.web.limits import MAX_STEPS
from petri.web.ui.canvas import canvas_control, canvas_seq

PLACEMENT_COLUMNS = ["concept", "start", "tokens"]
#: The sampler-setting controls, in the order the run handlers take them.
SETTING_NAMES = ("steps", "entropy_bound", "t_min", "t_max", "adaptive", "pin_thought")


def placement_controls(ctl, concepts_text: str, elem: str = "petri") -> dict:
    """The slot table (``concepts_text`` spread evenly), Spread / Shuffle buttons and the per-sample
    shuffle box; ``ctl`` is the :class:`~petri.web.ui.dish.DishController`."""
    placement = gr.Dataframe(
        ctl.spread(concepts_text), headers=PLACEMENT_COLUMNS, datatype=["str", "number", "number"], interactive=True,
        static_columns=[0, 2], label="Anchor slots (drag the chips on the canvas, or type a start position)",
        elem_id=f"{elem}-placement",
    )
    with gr.Row():
        spread_btn = gr.Button("Spread evenly", size="sm", elem_id=f"{elem}-spread")
        shuffle_btn = gr.Button("Shuffle", size="sm", elem_id=f"{elem}-shuffle")
    shuffle = gr.Checkbox(True, label="Shuffle concepts over the slots per sample (every pair becomes adjacent somewhere)",
                          elem_id=f"{elem}-shuffle-per-sample")
    return {"placement": placement, "spread_btn": spread_btn, "shuffle_btn": shuffle_btn, "shuffle": shuffle}


def chip_canvas(ctl, concepts_text: str, elem: str = "petri") -> gr.HTML:
    """The canvas control with ``concepts_text``'s chips spread evenly."""
    return canvas_control(ctl.canvas(ctl.spread(concepts_text)), elem_id=f"{elem}-canvas")


def sampler_settings(defaults: SamplerSettings, elem: str = "petri") -> dict:
    """The "Sampler settings" accordion (closed) at ``defaults``: its controls by name."""
    with gr.Accordion("Sampler settings", open=False, elem_id=f"{elem}-settings"):
        with gr.Row():
            steps = gr.Slider(1, MAX_STEPS, value=defaults.max_denoising_steps, step=1, label="Max denoising steps",
                              elem_id=f"{elem}-steps")
            entropy_bound = gr.Number(defaults.entropy_bound, label="Entropy bound", elem_id=f"{elem}-entropy-bound")
            t_min = gr.Number(defaults.t_min, label="t_min", elem_id=f"{elem}-t-min")
            t_max = gr.Number(defaults.t_max, label="t_max", elem_id=f"{elem}-t-max")
        with gr.Row():
            adaptive = gr.Checkbox(defaults.stability_threshold is not None, label="Adaptive stop",
                                   elem_id=f"{elem}-adaptive")
            pin_thought = gr.Checkbox(defaults.pin_thought_channel,
                                      label="Pin the empty thought block (chat-template models)", elem_id=f"{elem}-pin-thought")
    return {"steps": steps, "entropy_bound": entropy_bound, "t_min": t_min, "t_max": t_max, "adaptive": adaptive,
            "pin_thought": pin_thought}


def server_table(table) -> tuple:
    """The tab's move number and a slot table the server set (Spread, Shuffle, a respread): None,
    so the canvas draws the table whatever moves it made; a kept table (``gr.update()``) leaves both."""
    kept = isinstance(table, dict) and table.get("__type__") == "update"
    return gr.update() if kept else None, table


def wire_placement(ctl, concepts, parts: dict, canvas, pin_thought) -> None:
    """Keep the slot table, the canvas and the concept field in sync: a new concept list or
    thought-block pin respreads the table (kept when it still fits), the buttons spread or shuffle
    it, a table edit redraws the chips, a chip move rewrites the table.

    A hidden number holds the number of the newest chip move the table holds (None when the server
    set the table), which the table's redraw of the canvas carries (:mod:`petri.web.ui.canvas`: the
    script drops the echo of an older move). It is a component, not a ``gr.State``, and each writer
    sets it before the table: the page sends it with the table when the table's change starts the
    redraw, so the redraw gets the number of that table whatever order the server runs events in
    (a state is read when the event runs: the next move's write may have come first)."""
    placement = parts["placement"]
    seq = gr.Number(None, precision=0, visible=False, elem_id=f"{canvas.elem_id}-move")

    def respread(concepts_text, pin, table):
        return server_table(ctl.respread(concepts_text, pin, table))

    def spread(concepts_text, pin):
        return server_table(ctl.spread(concepts_text, pin))

    def shuffle(table, pin):
        return server_table(ctl.shuffle(table, pin))

    def redraw(table, pin, move):
        return ctl.canvas(table, pin, None if move is None else int(move))

    def from_canvas(value):
        return canvas_seq(value), ctl.from_canvas(value)

    for source in (concepts, pin_thought):
        source.change(respread, [concepts, pin_thought, placement], [seq, placement], show_progress="hidden")
    parts["spread_btn"].click(spread, [concepts, pin_thought], [seq, placement], show_progress="hidden")
    parts["shuffle_btn"].click(shuffle, [placement, pin_thought], [seq, placement], show_progress="hidden")
    placement.change(redraw, [placement, pin_thought, seq], canvas, show_progress="hidden")
    # a second move while the first one's table update is pending runs after it ("always_last";
    # Gradio's default for ``input``, "once", drops it: the chips then show a layout the table, and
    # so the run, does not have). ``change`` events are "always_last" by default.
    canvas.input(from_canvas, canvas, [seq, placement], show_progress="hidden", trigger_mode="always_last")
