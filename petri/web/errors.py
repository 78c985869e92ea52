"""How the web app says no: :class:`FieldError` (a field that passed pydantic but not the model's
checks), JSON error bodies that name the field, the body-size middleware and the exception handlers.

Every bad field is a 4xx whose body names the field (``detail[*].loc``); a body over
:data:`~petri.web.limits.MAX_BODY_BYTES` is a 413; a busy model is a 503 with ``Retry-After``; a run
store that cannot be written (full disk, read-only folder) is a 507 whose detail says so.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from petri.app.service import BusyError
from petri.core.probe import ProbeInputError
from petri.runs.store import StoreError
from petri.study.schema import DuplicateKeyError, strict_loads
from petri.web.limits import MAX_BODY_BYTES, RETRY_AFTER_S

log = logging.getLogger("petri.web")

#: The error answers of the POST routes, for the OpenAPI docs.
POST_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "the body is not parseable JSON (too deeply nested, not UTF-8)"},
    413: {"description": f"the body is larger than {MAX_BODY_BYTES:,} bytes"},
    422: {"description": "a bad field (named in detail[*].loc)"},
    503: {"description": "busy: the model runs one job at a time (Retry-After)"},
    507: {"description": "the run store cannot be written (full disk, unwritable folder)"},
}


class FieldError(Exception):
    """A request field that passed pydantic but not the model's checks (layout, template, prompt
    length): ``loc`` names it as pydantic would (``["body", "events", 2, "event"]``)."""

    def __init__(self, loc: Sequence[str | int], msg: str, kind: str = "value_error", **extra):
        self.loc, self.msg, self.kind, self.extra = list(loc), msg, kind, extra
        super().__init__(msg)

    def body(self) -> dict:
        """The 422 body: one ``detail`` entry (type, loc, msg and any extra keys such as ``concept``)."""
        return {"detail": [{"type": self.kind, "loc": self.loc, "msg": self.msg, **self.extra}]}


def request_error_message(err: ValidationError | FieldError) -> str:
    """One line per bad field, naming it (as the API's 422 body does)."""
    if isinstance(err, FieldError):
        where = ".".join(str(p) for p in err.loc if p != "body")
        return err.msg if err.msg.startswith(where.split(".")[0] + ":") else f"{where}: {err.msg}"
    return "; ".join(field_message(e) for e in err.errors())


def field_message(error: Mapping[str, Any]) -> str:
    """One pydantic error (``ValidationError.errors()`` item) as a sentence naming its field: a list
    too short or too long says how many it needs and got ("concepts: at least 2 are needed, got 1"),
    instead of pydantic's "List should have at least 2 items after validation, not 1"."""
    where = ".".join(str(p) for p in error["loc"] if p != "body")
    ctx = error.get("ctx") or {}
    if error["type"] == "too_short" and "min_length" in ctx:
        return f"{where}: at least {ctx['min_length']} are needed, got {ctx.get('actual_length', 'fewer')}"
    if error["type"] == "too_long" and "max_length" in ctx:
        return f"{where}: at most {ctx['max_length']} are allowed, got {ctx.get('actual_length', 'more')}"
    return f"{where}: {error['msg']}"


_INDEX = re.compile(r"\[(\d+)\]")


def field_loc(field: str) -> list[str | int]:
    """A field written as a path (``questions[2].labels``, as :class:`~petri.core.probe.ProbeInputError`
    names it) as a 422's ``loc`` (``["body", "questions", 2, "labels"]``)."""
    loc: list[str | int] = ["body"]
    for part in _INDEX.sub(r".\1", field or "").split("."):
        if part:
            loc.append(int(part) if part.isdigit() else part)
    return loc


def clean_text(text) -> str:
    """``text`` as a string that encodes to UTF-8 (a lone surrogate from a ``\\ud800`` escape
    becomes the escape again instead of breaking the response)."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def safe_error(error: dict) -> dict:
    """A pydantic error as JSON-safe data: type, loc, msg and (short, plain) input only; a NaN, a
    lone surrogate or a huge payload is never echoed back."""
    out: dict[str, Any] = {"type": clean_text(error.get("type", "")),
           "loc": [p if isinstance(p, int) else clean_text(p)[:200] for p in error.get("loc", ())],
           "msg": clean_text(error.get("msg", ""))}
    value = error.get("input")
    if isinstance(value, bool) or value is None:
        out["input"] = value
    elif isinstance(value, int):
        out["input"] = value if abs(value) < 10**30 else clean_text(f"{str(value)[:40]}... ({len(str(value))} digits)")
    elif isinstance(value, float):
        out["input"] = value if math.isfinite(value) else None
    elif isinstance(value, str):
        out["input"] = clean_text(value[:200])
    return out


def body_error(kind: str, msg: str) -> dict:
    """An error body that names the whole request body (``loc`` ``["body"]``)."""
    return {"detail": [{"type": kind, "loc": ["body"], "msg": msg}]}


def busy_error(err: BusyError) -> HTTPException:
    """The 503 (with ``Retry-After``) for a model that is taken."""
    return HTTPException(
        status_code=503,
        detail=f"busy: {err}. The model runs one job at a time; retry in a few seconds.",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


class BodyTooLarge(StarletteHTTPException):
    """Raised while a request body is read once it passes the limit (an HTTPException, so FastAPI
    passes it on unchanged instead of calling it a parse error)."""

    def __init__(self) -> None:
        super().__init__(413, "Content Too Large")


class BodyLimitMiddleware:
    """Refuse a request body over ``limit`` bytes on ``/api/`` routes with 413 and a JSON detail that
    names the body: at once when ``Content-Length`` says so, else as soon as the streamed (chunked)
    body passes the limit, so a huge body is never buffered or parsed. The Gradio UI (uploads) keeps
    its own limits."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES, prefix: str = "/api/"):
        self.app, self.limit, self.prefix = app, limit, prefix

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            response = JSONResponse(body_error("body_too_large", f"the request body is larger than {self.limit:,} bytes"),
                                    status_code=413)
            return await response(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge()
            return message

        await self.app(scope, limited_receive, send)


class StrictJsonRequest(Request):
    """A request whose JSON body must be UTF-8 (no byte-order mark, so no UTF-16 or UTF-32, which
    ``json.loads`` would guess silently) and name each key of an object once."""

    async def json(self):
        if not hasattr(self, "_json"):
            body = await self.body()
            if body.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")) or (len(body) > 1 and b"\x00" in body[:4]):
                raise BodyNotUtf8("the body is not UTF-8 JSON (a byte-order mark or UTF-16/UTF-32); send UTF-8")
            self._json = strict_loads(body.decode("utf-8"))
        return self._json


class StrictJsonRoute(APIRoute):
    """An API route that reads its body with :class:`StrictJsonRequest`."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict(request: Request):
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


class BodyNotUtf8(ValueError):
    """A JSON body in another encoding than UTF-8."""


def parse_failure(err: BaseException | None) -> str:
    """Why a request body could not be parsed at all (FastAPI answers 400 without saying)."""
    if isinstance(err, (DuplicateKeyError, BodyNotUtf8)):
        return str(err)
    if isinstance(err, RecursionError):
        return "the JSON is nested too deeply"
    if isinstance(err, UnicodeDecodeError):
        return "the body is not valid UTF-8"
    if isinstance(err, ValueError) and "digits" in str(err):
        return "the JSON holds an integer with too many digits"
    return "the body could not be parsed as JSON"


def install_error_handlers(app: FastAPI) -> None:
    """The body-size middleware and one handler per kind of failure, each answering JSON that says
    what went wrong (never a bare 500 for a known failure)."""
    app.add_middleware(BodyLimitMiddleware, limit=MAX_BODY_BYTES)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, err: RequestValidationError):
        return JSONResponse({"detail": [safe_error(e) for e in err.errors()]}, status_code=422)

    @app.exception_handler(FieldError)
    async def _field_error(_: Request, err: FieldError):
        return JSONResponse(err.body(), status_code=422)

    @app.exception_handler(ProbeInputError)
    async def _probe_error(_: Request, err: ProbeInputError):
        # a probe request the probe refuses (petri.core.probe): the field it names, as pydantic would
        return JSONResponse(FieldError(field_loc(err.field), clean_text(err), kind="probe_input").body(), status_code=422)

    @app.exception_handler(BusyError)
    async def _busy_error(_: Request, err: BusyError):
        exc = busy_error(err)
        return JSONResponse({"detail": exc.detail}, status_code=503, headers=exc.headers)

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, err: StoreError):
        # A full disk or an unwritable run folder: said plainly (507 Insufficient Storage), never a bare 500.
        log.error("run store failure: %s", err)
        return JSONResponse({"detail": clean_text(f"{err}; the run was not stored")}, status_code=507)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException):
        # The two answers FastAPI gives before a body is validated, with the field (the body) named.
        if err.status_code == 413:
            return JSONResponse(body_error("body_too_large", f"the request body is larger than {MAX_BODY_BYTES:,} bytes"),
                                status_code=413)
        if err.status_code == 400 and err.detail == "There was an error parsing the body":
            return JSONResponse(body_error("body_unparsable", parse_failure(err.__cause__)), status_code=400)
        return await http_exception_handler(request, err)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, err: Exception):  # pragma: no cover - a bug, logged
        log.exception("unexpected error")
        return JSONResponse({"detail": f"internal error: {type(err).__name__}"}, status_code=500)
