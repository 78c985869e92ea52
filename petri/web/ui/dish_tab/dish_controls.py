"""The dish inputs the Dish and Compare tabs share, built and wired once: the anchor slot table with
its Spread / Shuffle buttons and the per-sample shuffle box, the canvas of concept chips
(:mod:`petri.web.ui.widgets.canvas`, kept in sync with the table), and the sampler settings of the served
model's family, made from its settings dataclass (:func:`petri.core.settings.controls`: one control
per setting and switch; DiffusionGemma's max steps, entropy bound, temperatures, adaptive stop and
its thresholds, the thought-block pin; masked diffusion's max steps, block length, unmask threshold,
temperature and the pin).

Each builder makes its components inside the open Blocks context and returns them by the control
names that :meth:`petri.web.ui.dish_tab.dish.DishController.controls_of` gives values for (``placement``,
``shuffle``, and the settings' control names: ``steps``, ``entropy_bound``, ``t_min``, ``t_max``,
``adaptive``, ``pin_thought``, …), so a reopened run sets them back in either tab. ``elem`` prefixes
the element ids (``petri`` on the Dish tab, ``petri-cmp`` on the Compare tab).
"""

from __future__ import annotations

from typing import cast

import gradio as gr

from petri.core.settings import Control, controls
from petri.web.api.settings import SettingsBase, settings_model
from petri.web.ui.widgets.canvas import canvas_control, canvas_seq

PLACEMENT_COLUMNS = ["concept", "start", "tokens"]


def placement_controls(ctl, concepts_text: str, elem: str = "petri") -> dict:
    """The slot table (``concepts_text`` spread evenly), Spread / Shuffle buttons and the per-sample
    shuffle box; ``ctl`` is the :class:`~petri.web.ui.dish_tab.dish.DishController`."""
    placement = gr.Dataframe(
        ctl.spread(concepts_text), headers=PLACEMENT_COLUMNS, datatype=["str", "number", "number"], interactive=True,
        static_columns=[0, 2], label="Anchor slots (drag the chips on the canvas, or type a start position)",
        elem_id=f"{elem}-placement",
    )
    with gr.Row():
        spread_btn = gr.Button("Spread evenly", size="sm", elem_id=f"{elem}-spread")
        shuffle_btn = gr.Button("Shuffle", size="sm", elem_id=f"{elem}-shuffle")
    # off by default: every sample keeps the layout the user placed (on, the canvas and the heatmap say so)
    shuffle = gr.Checkbox(False, label="Shuffle concepts over the slots per sample (every pair becomes adjacent somewhere; "
                          "the chips then mark the slots, not which concept each sample put there)",
                          elem_id=f"{elem}-shuffle-per-sample")
    return {"placement": placement, "spread_btn": spread_btn, "shuffle_btn": shuffle_btn, "shuffle": shuffle}


def chip_canvas(ctl, concepts_text: str, elem: str = "petri") -> gr.HTML:
    """The canvas control with ``concepts_text``'s chips spread evenly."""
    return canvas_control(ctl.canvas(ctl.spread(concepts_text)), elem_id=f"{elem}-canvas")


def setting_controls(defaults) -> tuple[Control, ...]:
    """The sampler-setting controls of ``defaults``' family (:func:`petri.core.settings.controls`),
    in the order the run handlers take them."""
    return controls(type(defaults))


def control_of(defaults, name: str) -> str:
    """The name of the control that holds setting ``name`` (``max_denoising_steps`` and
    ``pin_thought_channel``, which every family has: ``steps`` and ``pin_thought`` for the built-in ones)."""
    return next(c.control for c in setting_controls(defaults) if c.name == name)


def _component(control: Control, value, elem: str):
    """One setting's Gradio component at ``value``, as its metadata says (a slider for a bounded
    count, a checkbox for a boolean or a switch, else a number box; an int's box takes whole numbers)."""
    elem_id = f"{elem}-{control.control.replace('_', '-')}"
    if control.type is bool:
        return gr.Checkbox(value, label=control.label, elem_id=elem_id)
    if control.info.widget == "slider":
        return gr.Slider(cast(float, control.info.ge), cast(float, control.info.le), value=value,  # a slider is bounded
                         step=1 if control.type is int else None,
                         label=control.label, elem_id=elem_id)
    return gr.Number(value, label=control.label, elem_id=elem_id, precision=0 if control.type is int else None)


def control_values(defaults, stored: dict | None = None) -> dict:
    """Each setting control's value: ``stored`` (a stored run's settings, as ``to_dict()`` wrote
    them) where it has the setting, else ``defaults``; a switch is on when its first setting is set."""
    stored = stored or {}
    values = {}
    for control in setting_controls(defaults):
        name = control.switch.fields[0] if control.switch else control.name
        value = stored.get(name, getattr(defaults, name))
        values[control.control] = value is not None if control.switch else value
    return values


def sampler_settings(defaults, elem: str = "petri") -> dict:
    """The "Sampler settings" accordion (closed) of ``defaults``' family, at ``defaults``: its
    controls by name, one per setting and switch of the family's settings dataclass, laid out in
    the rows its metadata gives (element ids ``<elem>-<control>``: ``petri-steps``, ``petri-t-min``)."""
    found = setting_controls(defaults)
    values = control_values(defaults)
    built = {}
    with gr.Accordion("Sampler settings", open=False, elem_id=f"{elem}-settings"):
        for row in sorted({c.info.row for c in found}):
            with gr.Row():
                for control in (c for c in found if c.info.row == row):
                    built[control.control] = _component(control, values[control.control], elem)
    return {c.control: built[c.control] for c in found}


def settings_request(defaults, values: dict) -> SettingsBase:
    """The request's ``settings`` for the setting controls' ``values`` (by control name; a value
    left ``None`` is the model's default): whole numbers for an int, booleans for a boolean, the
    rest as the controls hold them."""
    given = {}
    for control in setting_controls(defaults):
        value = values.get(control.control)
        if value is None or value == "":
            continue
        given[control.name] = int(value) if control.type is int else bool(value) if control.type is bool else value
    return settings_model()(**given)


def settings_inputs(defaults, first: int, skip: tuple[str, ...] = ()) -> dict[str, int]:
    """Request field → index of the run handler's input that holds it, the setting controls (less
    ``skip``, by control name) taken from index ``first`` on (what the validators mark)."""
    kept = [c for c in setting_controls(defaults) if c.control not in skip]
    return {c.name: first + i for i, c in enumerate(kept)}


def server_table(table) -> tuple:
    """The tab's move number and a slot table the server set (Spread, Shuffle, a respread): None,
    so the canvas draws the table whatever moves it made; a kept table (``gr.update()``) leaves both."""
    kept = isinstance(table, dict) and table.get("__type__") == "update"
    return gr.update() if kept else None, table


def wire_placement(ctl, concepts, parts: dict, canvas, pin_thought) -> None:
    """Keep the slot table, the canvas and the concept field in sync: a new concept list or
    thought-block pin respreads the table (kept when it still fits), the buttons spread or shuffle
    it, a table edit (or the per-sample shuffle box, which the canvas names when on) redraws the
    chips, a chip move rewrites the table.

    A hidden number holds the number of the newest chip move the table holds (None when the server
    set the table), which the table's redraw of the canvas carries (:mod:`petri.web.ui.widgets.canvas`: the
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

    def redraw(table, pin, move, shuffled=False):
        return ctl.canvas(table, pin, None if move is None else int(move), bool(shuffled))

    def from_canvas(value):
        return canvas_seq(value), ctl.from_canvas(value)

    for source in (concepts, pin_thought):
        source.change(respread, [concepts, pin_thought, placement], [seq, placement], show_progress="hidden")
    parts["spread_btn"].click(spread, [concepts, pin_thought], [seq, placement], show_progress="hidden")
    parts["shuffle_btn"].click(shuffle, [placement, pin_thought], [seq, placement], show_progress="hidden")
    placement.change(redraw, [placement, pin_thought, seq, parts["shuffle"]], canvas, show_progress="hidden")
    parts["shuffle"].change(redraw, [placement, pin_thought, seq, parts["shuffle"]], canvas, show_progress="hidden")
    # a second move while the first one's table update is pending runs after it ("always_last";
    # Gradio's default for ``input``, "once", drops it: the chips then show a layout the table, and
    # so the run, does not have). ``change`` events are "always_last" by default.
    canvas.input(from_canvas, canvas, [seq, placement], show_progress="hidden", trigger_mode="always_last")
