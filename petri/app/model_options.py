"""The options that name the model to load and how, shared by the ``petri`` command (:mod:`petri.cli`)
and the web server (``app.py``, ``petri serve``: :mod:`petri.web.server`), one layer below both,
so the web server imports nothing of the command line (which runs it): ``--model``,
``--allow-download``, ``--device``, ``--dtype``, ``--compile``, ``--precision``,
``--trust-remote-code`` and ``--backend``, their defaults from the configuration
(:class:`petri.core.config.PetriConfig`), read into a :class:`~petri.study.execution.executors.ModelSpec`.
The sampler's flags are the command line's own (:mod:`petri.cli.options`)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from petri.core.config import ConfigError, PetriConfig, variable
from petri.engine.base import SamplingModel
from petri.engine.precision_choice import parse_precision
from petri.study.execution.executors import ModelSpec


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
