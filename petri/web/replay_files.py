"""The files a stored run's replay is exported as, one definition for the CLI (``petri replay``) and the
UI's download button: the animation (GIF; MP4 where ffmpeg exists), the whole-trajectory figure and
the per-step curves (HTML always; PNG/SVG where kaleido finds a Chromium), and the per-step table
(CSV, Parquet). Everything reads the stored trajectories; nothing is sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from petri.core.trajectory import Trajectory
from petri.runs.export import Conditions
from petri.runs.formats import FORMATS, write_table
from petri.study.figures.animation import mp4_available, write_gif, write_mp4
from petri.study.figures.plots import save_figures
from petri.study.figures.trajectory_plots import step_curves_figure, trajectory_figure
from petri.web.tokens import TokenText, concept_colors

#: the replay's own kinds: the animation and the whole-trajectory figure
FIGURE_SUFFIXES = ("gif", "mp4", "html", "png", "svg")


def replay_suffixes() -> tuple[str, ...]:
    """Every suffix ``write_replay`` takes: the figures' and each registered table format's
    (:data:`petri.runs.formats.FORMATS`: the per-step table)."""
    return FIGURE_SUFFIXES + tuple(FORMATS)


def ids_decoder(tokens: TokenText):
    """``tokens`` (one id → its text) as the tables' decoder (token ids → their texts)."""
    return lambda ids: [tokens(int(i)) for i in ids]


def run_colors(traj: Trajectory) -> dict[str, str]:
    """The concept colours of a run, as its chips and heatmap boxes have them."""
    return concept_colors(sorted({a.concept for spans in traj.anchors for a in spans}))


def pick(trajectories: Sequence[Trajectory], event: int, sample: int) -> Trajectory:
    """Event ``event``'s trajectory after checking ``event`` and ``sample`` (ValueError naming them)."""
    if not 0 <= event < len(trajectories):
        raise ValueError(f"event: the run has events 0..{len(trajectories) - 1}, got {event}")
    traj = trajectories[event]
    if not 0 <= sample < traj.n_samples:
        raise ValueError(f"sample: event {event} has samples 0..{traj.n_samples - 1}, got {sample}")
    return traj


def write_replay(stored: list, event: int, sample: int, out: str | Path, *, tokenizer=None,
                 tokens: TokenText | None = None, frame_ms: int = 400, conditions: Conditions = None) -> tuple[Path, str]:
    """Write one export of a stored run (``stored`` as :meth:`petri.runs.store.RunStore.load_events` gives it),
    the kind chosen by ``out``'s suffix (:func:`replay_suffixes`). Token text: ``tokens``, else the
    tokenizer of ``tokenizer`` (a folder or cached hub id), else of the run's model id. ``conditions``
    (a paired study's run: :func:`petri.study.execution.runner.stored_conditions`) tags the steps table's rows. Returns
    (path, note); a PNG/SVG that cannot be rendered here raises RuntimeError naming why."""
    out = Path(out)
    suffix = out.suffix.lstrip(".").lower()
    trajectories, groups = [t for _, _, t in stored], [g for _, g, _ in stored]
    traj = pick(trajectories, event, sample)
    if tokens is None:
        from petri.engine.torch.model import load_tokenizer

        tokens = TokenText(load_tokenizer(tokenizer or traj.model_id))
    out.parent.mkdir(parents=True, exist_ok=True)
    colors = run_colors(traj)
    if suffix == "gif":
        return write_gif(traj, sample, tokens, out, frame_ms=frame_ms, colors=colors, special=tokens.is_special), \
            f"{int(traj.steps[sample])} frames"
    if suffix == "mp4":
        if not mp4_available():
            raise RuntimeError("MP4 export needs ffmpeg on PATH (apt-get install ffmpeg); .gif needs nothing")
        return write_mp4(traj, sample, tokens, out, frame_ms=frame_ms, colors=colors, special=tokens.is_special), ""
    if suffix in FORMATS:
        write_table(out, trajectories, "steps", suffix, groups, ids_decoder(tokens), conditions)
        rows = sum(int(traj.steps.sum()) * traj.argmax.shape[2] for traj in trajectories)
        return out, f"{rows} rows"
    if suffix in ("html", "png", "svg"):
        fig = trajectory_figure(traj, sample, tokens, colors=colors)
        written, notes = save_figures({out.stem: fig}, out.parent, images=() if suffix == "html" else (suffix,),
                                      plotlyjs=True)
        if suffix not in written[out.stem]:
            raise RuntimeError(f"--out: {suffix.upper()} needs kaleido and a Chromium here ({'; '.join(notes)}); "
                               ".html always works")
        return written[out.stem][suffix], ""
    raise ValueError(f"out: must end in one of {', '.join('.' + s for s in replay_suffixes())}, got {out.name!r}")


def export_bundle(trajectories: Sequence[Trajectory], groups: Sequence, event: int, sample: int, folder: str | Path,
                  tokens: TokenText, *, images: bool = True, frame_ms: int = 400) -> tuple[list[Path], list[str]]:
    """Every replay file of one (event, sample) into ``folder``: the GIF (and MP4 where ffmpeg exists),
    the trajectory figure and the per-step curves as HTML (+ PNG/SVG where possible), and the run's
    per-step table in every registered format (CSV and Parquet, :mod:`petri.runs.formats`). Returns (paths, notes)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    traj = pick(trajectories, event, sample)
    colors, stem = run_colors(traj), f"e{event}-s{sample}"
    paths = [write_gif(traj, sample, tokens, folder / f"replay-{stem}.gif", frame_ms=frame_ms, colors=colors,
                       special=tokens.is_special)]
    notes = [] if mp4_available() else ["MP4 skipped: no ffmpeg on PATH"]
    if mp4_available():
        paths.append(write_mp4(traj, sample, tokens, folder / f"replay-{stem}.mp4", frame_ms=frame_ms, colors=colors,
                               special=tokens.is_special))
    figures = {f"trajectory-{stem}": trajectory_figure(traj, sample, tokens, colors=colors),
               f"step-curves-{stem}": step_curves_figure(traj, sample)}
    written, fig_notes = save_figures(figures, folder, images=("png", "svg") if images else (), plotlyjs=True)
    paths += [p for by_format in written.values() for p in by_format.values()]
    for suffix in FORMATS:  # the run's per-step table in every registered format
        paths.append(write_table(folder / f"steps.{suffix}", trajectories, "steps", suffix, list(groups),
                                 ids_decoder(tokens)))
    return paths, notes + fig_notes
