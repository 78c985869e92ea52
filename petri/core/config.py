"""The process's configuration from its environment: one object for every ``PETRI_*`` variable.

:class:`PetriConfig` has a field per variable: its type, default, bounds, what it does
(``description``) and what it accepts (``allowed``); the variable is the field's alias. It is read
once, at an entry point (the ``petri`` command's :func:`petri.cli.main.main`, the web server's
:func:`petri.web.server.main`, which ``app.py`` and ``petri serve`` run), by
:meth:`PetriConfig.from_env`, and passed down from there: the command-line options take their
defaults from it, the server its address, access policy and prompt-cache limit, the ZeroGPU seam
its call duration. Nothing else reads a ``PETRI_*`` variable (``tests/test_one_definition.py``
checks). A value that cannot be read raises :class:`ConfigError`, naming the variable and saying
what it accepts. A blank value counts as unset.

Besides the ``PETRI_*`` variables, the object reads the two that Hugging Face Spaces set for the
address (``GRADIO_SERVER_NAME``, ``GRADIO_SERVER_PORT``). Platform variables that other packages
own are read where those packages define them, not here: ``SPACES_ZERO_GPU`` (read as the
``spaces`` package reads it, :func:`petri.web.gpu_executor.on_zero_gpu`), ``HF_HOME``
(huggingface_hub's cache), ``BROWSER_PATH`` (the Chromium kaleido draws PNGs with) and
``TORCHINDUCTOR_CACHE_DIR`` (torch's compile cache).

:func:`config_table` writes the variables as a Markdown table (docs/configuration.md holds it;
``tests/core/test_config.py`` checks that the two agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

#: Booleans: what reads as true and as false (any case); anything else is refused.
TRUE, FALSE = ("1", "true", "yes"), ("0", "false", "no")
#: The ZeroGPU card size a call asks for when ``PETRI_ZEROGPU_SIZE`` is unset: the whole card (the real
#: DiffusionGemma fits no tier on half of one: :func:`petri.engine.torch.card_placement.card_tier`).
DEFAULT_ZEROGPU_CARD = "xlarge"


class ConfigError(ValueError):
    """An environment variable whose value cannot be read; ``variable`` names it."""

    def __init__(self, variable: str, message: str):
        super().__init__(f"{variable}: {message}")
        self.variable = variable


def _setting(default: Any, env: str, allowed: str, description: str, **bounds: Any) -> Any:
    """A field read from environment variable ``env``: ``allowed`` says what it accepts (the
    error message and the docs table use it), ``description`` what it does."""
    return Field(default, alias=env, description=description, json_schema_extra={"allowed": allowed}, **bounds)


BOOLEAN = f"{' / '.join(TRUE)} or {' / '.join(FALSE)}"


class PetriConfig(BaseModel):
    """Every setting the environment gives (module docstring); ``PetriConfig()`` is the defaults,
    ``PetriConfig(model="x")`` sets one by field name."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    model: str | None = _setting(
        None, "PETRI_MODEL", "a hub id, a checkpoint folder or an embedded model's name",
        "The model a command or the server loads when `--model` is not given; unset: the real DiffusionGemma "
        "when cached on a GPU machine, else the embedded petri-small.")
    allow_download: bool = _setting(
        False, "PETRI_ALLOW_DOWNLOAD", BOOLEAN,
        "Fetch a hub model that is not in the local cache at start (`--allow-download`); what a Hugging Face "
        "Space sets.")
    compile: bool | None = _setting(
        None, "PETRI_COMPILE", BOOLEAN,
        "The compiled tier of the GPU fast path on or off (`--compile` / `--no-compile`); unset: on with CUDA "
        "and Triton, off elsewhere.")
    precision: str = _setting(
        "bf16", "PETRI_PRECISION", "bf16, fp8 or fp8-fast, with +sc-fp8 / +enc-fp8 after an FP8 tier",
        "The precision tier (`--precision`); checked by the command line when it starts.")
    backend: Literal["auto", "torch", "mlx"] = _setting(
        "auto", "PETRI_BACKEND", "auto, torch or mlx (any case)",
        "The compute backend (`--backend`); auto: MLX on Apple silicon without a torch GPU, else torch.")
    assets: Path | None = _setting(
        None, "PETRI_ASSETS", "a folder",
        "Where the embedded models and the study files are; unset: the checkout's assets/, else the installed "
        "copy's.")
    shipped_study: Path | None = _setting(
        None, "PETRI_SHIPPED_STUDY", "a folder",
        "The committed study run the Study tab opens with; unset: the one under the assets folder.")
    prompt_cache_mb: int | None = _setting(
        None, "PETRI_PROMPT_CACHE_MB", "a whole number of MiB, 0 or more",
        "MiB of encoded prompts a model keeps for reuse (0: none); unset: the engine's default, 1,024 "
        "(`petri.engine.torch.prompt_cache.DEFAULT_PROMPT_CACHE_MB`), and none (nor captured encoder passes) "
        "on a public server.", ge=0)
    api_token: SecretStr | None = _setting(
        None, "PETRI_API_TOKEN", "any text",
        "A token every route of the server but `/api/health` requires; unset: none. Kept out of the object's "
        "`repr`.")
    public: bool = _setting(
        False, "PETRI_PUBLIC", BOOLEAN,
        "Serve as public (jobs and runs private to their submitters) on loopback too; a server bound beyond "
        "loopback is public anyway.")
    gpu_duration_s: int | None = _setting(
        None, "PETRI_GPU_DURATION_S", "a whole number of seconds, 1 or more",
        "Seconds every ZeroGPU call asks for; unset: each call's own estimate from its samples, steps and shape "
        "(petri/web/gpu_cost.py).", ge=1)
    zerogpu_size: Literal["large", "xlarge"] = _setting(
        DEFAULT_ZEROGPU_CARD, "PETRI_ZEROGPU_SIZE", "large or xlarge",
        "The ZeroGPU card size each GPU call asks for (`spaces.GPU(size=...)`): large, half a card (48 GB), or "
        "xlarge, the whole card (96 GB, counted double against the quota); the model's tier is chosen for it.")
    host: str = _setting(
        "127.0.0.1", "GRADIO_SERVER_NAME", "an address or host name",
        "The address the server binds (`--host`); a Space sets 0.0.0.0.")
    port: int = _setting(
        7860, "GRADIO_SERVER_PORT", "a port, 1 to 65535", "The port the server listens on (`--port`).",
        ge=1, le=65535)

    @field_validator("allow_download", "compile", "public", mode="before")
    @classmethod
    def _boolean(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip().lower()
            if text in TRUE or text in FALSE:
                return text in TRUE
            raise ValueError(f"not one of {BOOLEAN}")
        return value

    @field_validator("backend", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("assets", "shipped_study")
    @classmethod
    def _home(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Each environment variable the object reads, with its field's name."""
        return {str(info.alias): name for name, info in cls.model_fields.items()}

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> PetriConfig:
        """The configuration ``environ`` (``os.environ`` at an entry point) gives: each variable of
        :meth:`variables` that is set and not blank; :class:`ConfigError` names the first that
        cannot be read and says what it accepts."""
        given = {env: environ[env].strip() for env in cls.variables() if environ.get(env, "").strip()}
        try:
            return cls.model_validate(given)
        except ValidationError as err:
            first = err.errors()[0]
            env = str(first["loc"][0])
            allowed = allowed_of(cls.variables()[env])
            raise ConfigError(env, f"got {given.get(env)!r}; expected {allowed}") from None


def variable(name: str) -> str:
    """The environment variable of :class:`PetriConfig`'s field ``name`` (``"model"``: ``PETRI_MODEL``)."""
    return str(PetriConfig.model_fields[name].alias)


def allowed_of(name: str) -> str:
    """What the field ``name`` of :class:`PetriConfig` accepts, in words."""
    extra = PetriConfig.model_fields[name].json_schema_extra
    return str(extra["allowed"]) if isinstance(extra, dict) else ""


def config_table() -> str:
    """The Markdown table of every variable :class:`PetriConfig` reads: name, default, what it
    accepts, what it does (docs/configuration.md)."""
    rows = ["| variable | default | accepts | what it does |", "|---|---|---|---|"]
    for name, info in PetriConfig.model_fields.items():
        default = ("unset" if info.default is None else f"`{int(info.default)}`" if isinstance(info.default, bool)
                   else f"`{info.default}`")
        rows.append(f"| `{info.alias}` | {default} | {allowed_of(name)} | {info.description} |")
    return "\n".join(rows) + "\n"
