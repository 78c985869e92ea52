"""One sample's denoising as an animation: one frame per step it ran (Pillow; never imports torch).

Each frame is the canvas at that step on a fixed grid (``columns`` positions per row, so a token keeps
its place from frame to frame): cell colour = confidence (``exp(-entropy)``, light = unsure, dark =
certain, the scale of :data:`petri.study.figures.trajectory_plots.CONFIDENCE_SCALE`), renoised cells faded,
cells whose argmax flipped at that step outlined with a dashed black line (as in the viewer), anchors outlined in their concept colours, and
special tokens (``<eos>`` …) written grey. :func:`write_gif` writes a GIF;
:func:`write_mp4` an MP4 through ``ffmpeg`` where one is on ``PATH`` (:func:`mp4_available`).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from petri.core.trajectory import Trajectory
from petri.measure.replay import CONFIDENCE_LEGEND, sample_record
from petri.study.figures.trajectory_plots import CONFIDENCE_SCALE

_FONTS = ("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", "DejaVuSansMono.ttf")
CELL_W, CELL_H, PAD = 96, 30, 12


DASH_PX = 5


def dashed_rectangle(draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], width: int = 2) -> None:
    """Outline ``box`` (x0, y0, x1, y1) with black dashes of :data:`DASH_PX` (a flipped cell)."""
    x0, y0, x1, y1 = box
    for x in range(x0, x1, 2 * DASH_PX):
        for y in (y0, y1 - width + 1):
            draw.rectangle((x, y, min(x + DASH_PX, x1), y + width - 1), fill="black")
    for y in range(y0, y1, 2 * DASH_PX):
        for x in (x0, x1 - width + 1):
            draw.rectangle((x, y, x + width - 1, min(y + DASH_PX, y1)), fill="black")


def _font(size: int):
    for name in _FONTS:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size)


def _rgb(hex_color: str) -> tuple[int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def confidence_rgb(value: float, faded: bool = False) -> tuple[int, int, int]:
    """The colour of a confidence in [0, 1] on :data:`CONFIDENCE_SCALE` (blended toward white when faded)."""
    v = min(max(float(value), 0.0), 1.0) if value == value else 0.0
    for (a, ca), (b, cb) in zip(CONFIDENCE_SCALE, CONFIDENCE_SCALE[1:]):
        if v <= b:
            w = (v - a) / (b - a)
            rgb = tuple(round(x + (y - x) * w) for x, y in zip(_rgb(ca), _rgb(cb)))
            break
    if faded:
        rgb = tuple(round(255 - (255 - c) * 0.35) for c in rgb)
    return rgb


def frames(traj: Trajectory, sample: int, decode: Callable[[int], str], *, colors: dict[str, str] | None = None,
           special: Callable[[int], bool] | None = None, columns: int = 16) -> list[Image.Image]:
    """One RGB image per step sample ``sample`` ran (``steps[sample]`` images)."""
    rec = sample_record(traj, sample, decode, special)
    length, specials = rec["length"], set(rec["special"])
    rows = -(-length // columns)
    width, height = PAD * 2 + columns * CELL_W, PAD * 3 + 22 + rows * CELL_H + 18
    title_font, cell_font, note_font = _font(15), _font(12), _font(11)
    out = []
    for t in range(rec["steps"]):
        img = Image.new("RGB", (width, height), "white")
        draw = ImageDraw.Draw(img)
        draw.text((PAD, PAD), f"sample {rec['sample']} · step {t} of {rec['steps'] - 1} · "
                              f"{sum(rec['flipped'][t])} flips", fill="black", font=title_font)
        top = PAD * 2 + 22
        for i in range(length):
            x0, y0 = PAD + (i % columns) * CELL_W, top + (i // columns) * CELL_H
            box = (x0 + 1, y0 + 1, x0 + CELL_W - 2, y0 + CELL_H - 2)
            conf, token = rec["conf"][t][i], rec["ids"][t][i]
            fill = confidence_rgb(conf, faded=not rec["accepted"][t][i])
            concept = rec["anchor"][i]
            outline, line = (None, 1)
            if concept:
                outline, line = (colors or {}).get(concept, "#f4a261"), 3
            draw.rectangle(box, fill=fill, outline=outline or "#d1d5db", width=line)
            if rec["flipped"][t][i]:
                dashed_rectangle(draw, box, 3 if concept else 2)
            dark = sum(fill) < 380
            ink = "#9ca3af" if token in specials else ("white" if dark else "black")
            text = rec["texts"][str(token)][:11]
            draw.text((x0 + 6, y0 + 8), text, fill=ink, font=cell_font)
        draw.text((PAD, height - PAD - 12), f"{CONFIDENCE_LEGEND}; faded = renoised; dashed black = flipped at this step",
                  fill="#374151", font=note_font)
        out.append(img)
    return out


def write_gif(traj: Trajectory, sample: int, decode: Callable[[int], str], path: str | Path, *,
              frame_ms: int = 400, colors: dict[str, str] | None = None,
              special: Callable[[int], bool] | None = None) -> Path:
    """Write sample ``sample``'s denoising as a looping GIF (one frame per step, ``frame_ms`` each;
    the last frame held 4×). Returns the path."""
    images = frames(traj, sample, decode, colors=colors, special=special)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    durations = [frame_ms] * len(images)
    durations[-1] = frame_ms * 4
    images[0].save(path, save_all=True, append_images=images[1:], duration=durations, loop=0, optimize=False,
                   disposal=1)
    return path


def mp4_available() -> bool:
    """Whether an ``ffmpeg`` is on ``PATH`` (MP4 export needs one; GIF never does)."""
    return shutil.which("ffmpeg") is not None


def write_mp4(traj: Trajectory, sample: int, decode: Callable[[int], str], path: str | Path, *,
              frame_ms: int = 400, colors: dict[str, str] | None = None,
              special: Callable[[int], bool] | None = None) -> Path:
    """Write the animation as an H.264 MP4 through ``ffmpeg`` (RuntimeError naming it when absent)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise RuntimeError("MP4 export needs ffmpeg on PATH (apt-get install ffmpeg); the GIF needs nothing")
    images = frames(traj, sample, decode, colors=colors, special=special)
    stream = io.BytesIO()
    for img in images:
        img.save(stream, format="PNG")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fps = 1000.0 / frame_ms
    subprocess.run([ffmpeg, "-y", "-loglevel", "error", "-f", "image2pipe", "-framerate", f"{fps:g}", "-i", "-",
                    "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-pix_fmt", "yuv420p", "-c:v", "libx264", str(path)],
                   input=stream.getvalue(), check=True)
    return path
