"""Command-line options shared by the ``petri`` command and the web server (``app.py``,
``petri serve``): which model to load and how, and the sampler settings: a flag per setting of every
registered family, made from its settings dataclass (:mod:`petri.core.settings`), so every setting
of every family can be given on the command line."""

from __future__ import annotations

import argparse
from dataclasses import replace

from petri.core.config import ConfigError, PetriConfig, variable
from petri.core.settings import Control, FamilySettings, SettingError, apply_settings, controls
from petri.engine.base import SamplingModel
from petri.engine.families.registry import families
from petri.engine.precision_choice import parse_precision
from petri.study.executors import ModelSpec


def add_model_arguments(parser: argparse.ArgumentParser, config: PetriConfig = PetriConfig()) -> None:
    """The options that say which model to load and how, their defaults from ``config`` (the
    environment's ``PETRI_*`` variables, read by the entry point); the configuration's prompt-cache
    limit and assets folder ride along as defaults of no option (``prompt_cache_mb``, ``assets``), for
    :func:`spec_from_args`. A ``PETRI_PRECISION`` that cannot be read raises
    :class:`petri.core.config.ConfigError` naming it."""
    parser.add_argument("--model", default=config.model,
        help=f"hub id (local cache only, unless --allow-download) or checkpoint folder (env {variable('model')}); default: "
        "the real DiffusionGemma when cached on a GPU machine, else the embedded assets/petri-small (also by the name "
        "petri-small); petri-small-mdm: the embedded masked-diffusion model; petri-tiny and petri-tiny-mdm: the smaller, "
        "faster pair that writes invented words; a masked LM folder (BERT, ModernBERT) runs as masked diffusion")
    parser.add_argument(
        "--allow-download", action="store_true", default=config.allow_download,
        help="fetch a hub model that is not in the local cache at start, with a progress bar "
        f"(env {variable('allow_download')}=1, what a Hugging Face Space sets); off by default",
    )
    parser.add_argument("--device", default="auto", help="auto (cuda → mps → cpu), cuda, mps or cpu")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp16 on MPS, fp32 on CPU), bf16, fp16 or fp32")
    parser.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=config.compile,
        help="the compiled tier of the GPU fast path: compiled decoder and prompt-encoder layers, the fused experts op (the "
        "small-batch experts for one or two samples), the routers' fused top-k, the global layers' split attention, the "
        "stacked projections, the sampler's self-conditioning softmax and inverse-CDF "
        "draw (not bit-exact; see docs/performance.md). Default "
        f"(env {variable('compile')}=1/0 overrides): on with CUDA and Triton, off elsewhere; the first request pays "
        "the compilation (tens of seconds, cached on disk for the next start). On CUDA the tier is planned against the "
        "card's memory before the model loads: unnamed, the compiled tier where it fits, else the exact one; a tier that "
        "fits in no form is refused, naming the tier that fits (docs/performance.md, \"On one 80 GB card\")",
    )
    parser.add_argument(  # issue 25
        "--precision", default=config_precision(config), type=precision_text,
        metavar="PRECISION[+LEVER...]",
        help="fp8: the opt-in FP8 tier (CUDA, FP8 GPUs): the decoder's matrices, experts and lm head in e4m3 with "
        "per-row scales; fp8-fast: the same with the matrix units' fast accumulation. Opt-in levers after it: "
        "+sc-fp8 (the self-conditioning product in FP8, compiled tier) and +enc-fp8 (the prompt encoder in FP8); "
        "fp8-fast+sc-fp8 is the benchmark's fastest configuration. Their samples differ in distribution from bf16 "
        "by the shift the README reports, and every output names the tier (sampler '+fp8', '+fp8-fast', "
        "'+sc-fp8', '+enc-fp8'). Where the FP8 tier fits the card only without its bf16 copies, it runs so, with "
        f"+enc-fp8. Default bf16 (env {variable('precision')})",
    )
    parser.add_argument(
        "--trust-remote-code", action="store_true",
        help="let a masked-diffusion checkpoint run its own modelling code (LLaDA, Dream); off by default",
    )
    parser.add_argument(
        "--backend", default=config.backend,
        help=f"auto (MLX on Apple silicon without a torch GPU, else torch), torch or mlx (env {variable('backend')})",
    )
    parser.set_defaults(prompt_cache_mb=config.prompt_cache_mb, assets=None if config.assets is None else str(config.assets))


def config_precision(config: PetriConfig) -> str:
    """``config``'s precision checked (:func:`petri.engine.precision_choice.parse_precision`) and
    written out in its canonical order; :class:`ConfigError` names ``PETRI_PRECISION`` when it cannot be read."""
    try:
        return parse_precision(config.precision).text
    except ValueError as error:
        raise ConfigError(variable("precision"), str(error).removeprefix("precision: ")) from None


def precision_text(text: str) -> str:
    """``--precision``'s value checked (:func:`petri.engine.precision_choice.parse_precision`) and
    written out in its canonical order; argparse reports the error under the option's name."""
    try:
        return parse_precision(text).text
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("precision: ")) from None


def sampler_controls() -> dict[str, tuple[Control, tuple[str, ...]]]:
    """Every registered family's settings and switches (:func:`petri.core.settings.controls`), each
    name once, with the families that have it: what :func:`add_sampler_arguments` makes flags of."""
    found: dict[str, tuple[Control, tuple[str, ...]]] = {}
    for family in families():
        for control in controls(family.settings):
            known, ids = found.get(control.name, (control, ()))
            found[control.name] = (known, (*ids, family.id))
    return found


def add_sampler_arguments(parser: argparse.ArgumentParser) -> None:
    """A flag per setting and switch of every registered family (:func:`sampler_controls`: the
    settings dataclasses' metadata makes them); a setting some families lack says whose it is."""
    group = parser.add_argument_group("sampler (defaults: the model's generation config)")
    every = len(families())
    for name, (control, ids) in sampler_controls().items():
        whose = "" if len(ids) == every else f"[{', '.join(ids)}] "
        if control.type is bool:
            group.add_argument(control.flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                               help=whose + control.info.help)
        else:
            group.add_argument(control.flag, dest=name, type=control.type, default=None, help=whose + control.info.help,
                               metavar=control.flag.lstrip("-").replace("-", "_").upper())


def spec_from_args(args: argparse.Namespace) -> ModelSpec:
    """The ``add_model_arguments`` options (and ``--threads`` where the command has it) as a
    :class:`ModelSpec`, which a worker process or machine can load on its own."""
    return ModelSpec(args.model, args.backend, args.device, args.dtype, args.compile, getattr(args, "threads", None),
                     bool(getattr(args, "allow_download", False)), getattr(args, "precision", "bf16"),
                     bool(getattr(args, "trust_remote_code", False)), getattr(args, "prompt_cache_mb", None),
                     getattr(args, "assets", None))


def load_from_args(args: argparse.Namespace) -> SamplingModel:
    """The model the ``add_model_arguments`` options name, compiled as ``--compile`` says (torch only)."""
    return replace(spec_from_args(args), threads=None).load()


def settings_from_args(defaults: FamilySettings, args: argparse.Namespace,
                       canvas_length: int | None = None) -> FamilySettings:
    """``defaults`` (the model's) with the sampler flags the user gave
    (:func:`petri.core.settings.apply_settings`: bounds, switches, the family's checks for a canvas
    of ``canvas_length``); a flag of another family, or a value refused, raises ``ValueError``
    naming the flag."""
    controls_ = sampler_controls()
    given = {name: getattr(args, name, None) for name in controls_}
    try:
        return apply_settings(defaults, given, canvas_length)
    except SettingError as err:
        raise ValueError(f"{controls_[err.field][0].flag}: {err.message}") from None
