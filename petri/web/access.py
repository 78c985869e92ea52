"""Who may see and cancel what.

- **Local** (the server binds to loopback, the default): everything is visible to every caller, as
  before; nobody needs a token.
- **Public** (bound beyond loopback, e.g. a Hugging Face Space, or ``PETRI_PUBLIC=1``): every job
  and run belongs to whoever submitted it. A client proves who it is with the header
  ``X-Petri-Token``; a submission without one is handed a new server-issued token (256 random bits,
  in the response's ``token`` field and ``X-Petri-Token`` header). A browser is a caller too: the
  first page it loads sets a server-issued token in the HttpOnly cookie ``petri_caller``, which the
  UI's handlers and downloads read (:mod:`petri.web.ui.access`). A token is 22-128 characters of
  ``A-Z a-z 0-9 _ -`` (22 base64url characters are 128 bits); any other ``X-Petri-Token`` is a 400
  naming the header, never cut. Lists show only the caller's own jobs and runs; another caller's
  job or run is a 404 (its existence is not confirmed), and a list or job route without a token is
  a 401. Tokens are never stored: the store keeps a SHA-256 of each.
- **API token** (``PETRI_API_TOKEN`` set when the server starts): every route but ``/api/health``
  needs it, as ``Authorization: Bearer TOKEN``; a browser opens the UI once with ``/?api_token=TOKEN``,
  which sets a cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass

from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

CALLER_HEADER = "X-Petri-Token"
API_COOKIE = "petri_api_token"
CALLER_COOKIE = "petri_caller"
OPEN_PATHS = ("/api/health",)
#: A caller token's length bounds: 22 base64url characters are 128 bits.
TOKEN_MIN_CHARS, TOKEN_MAX_CHARS = 22, 128
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_-]+$")


class TokenError(ValueError):
    """A caller token that is not one (too short, too long, other characters); names the header."""


def new_token() -> str:
    """A server-issued caller token: 256 random bits, 43 base64url characters."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """``token`` if it is a well-formed caller token, else :class:`TokenError` naming the header
    (a token is never shortened: two long tokens that share a prefix stay two callers)."""
    if not TOKEN_MIN_CHARS <= len(token) <= TOKEN_MAX_CHARS:
        raise TokenError(f"{CALLER_HEADER}: a caller token has {TOKEN_MIN_CHARS}-{TOKEN_MAX_CHARS} characters, "
                         f"this one {len(token)}; send the token a submission returned (or none to get one)")
    if not _TOKEN_CHARS.match(token):
        raise TokenError(f"{CALLER_HEADER}: a caller token holds only A-Z, a-z, 0-9, '_' and '-'")
    return token


def caller_from(policy: AccessPolicy, headers, cookies) -> Caller:
    """The caller of a request with these ``headers`` and ``cookies`` (any mapping with ``.get``;
    header names lowercase): the ``X-Petri-Token`` header (checked: :class:`TokenError`), else a
    well-formed ``petri_caller`` cookie, else no token."""
    sent = headers.get(CALLER_HEADER.lower())
    if sent is not None:
        return Caller(public=policy.public, token=check_token(sent))
    cookie = cookies.get(CALLER_COOKIE)
    try:
        return Caller(public=policy.public, token=check_token(cookie) if cookie else None)
    except TokenError:
        return Caller(public=policy.public)


def owner_of(token: str) -> str:
    """What the store keeps of a caller token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class AccessPolicy:
    """``public``: jobs and runs belong to their submitters; ``api_token``: required on every route
    but the health check (None: not required)."""

    public: bool = False
    api_token: str | None = None


@dataclass(frozen=True)
class Caller:
    """The client of one request: its token (None: it sent none) on a server that is ``public``."""

    public: bool
    token: str | None = None

    @property
    def owner(self) -> str | None:
        """The owner id of what this caller submits: None on a local server (everything is shared)."""
        return owner_of(self.token) if self.public and self.token else None

    def may_see(self, owner: str | None) -> bool:
        """True when something owned by ``owner`` is visible to this caller."""
        return not self.public or (owner is not None and self.owner == owner)

    def may_open(self, runs, run_id: str) -> bool:
        """The one rule for a stored run (every route, UI handler and download asks it): everything
        on a local server; on a public one, only runs this caller submitted (``runs``: what answers
        ``owns_run(run_id, owner)``, the service or its run store)."""
        return not self.public or runs.owns_run(run_id, self.owner)

    def for_submission(self) -> Caller:
        """This caller, with a new token when a public server needs one and none was sent."""
        if self.public and not self.token:
            return Caller(public=True, token=new_token())
        return self

    def require_identity(self) -> None:
        """A public server's job and list routes need a caller token (401 without one)."""
        if self.public and not self.token:
            raise HTTPException(401, detail=f"{CALLER_HEADER}: this server is public; send the token your "
                                "submission returned", headers={"WWW-Authenticate": CALLER_HEADER})

    def hand_out(self, response: Response) -> None:
        """Return the caller's token with a public submission's response (header)."""
        if self.public and self.token:
            response.headers[CALLER_HEADER] = self.token


async def get_caller(request: Request) -> Caller:
    """The request's caller under the app's :class:`AccessPolicy` (``app.state.access``)."""
    try:
        return caller_from(request.app.state.access, request.headers, request.cookies)
    except TokenError as err:
        raise HTTPException(400, detail=str(err)) from None


class ApiTokenMiddleware:
    """ASGI middleware: with an API token configured, every HTTP request but ``/api/health`` must
    carry it (bearer header or the cookie that ``/?api_token=...`` sets); else 401."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token

    def _ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        request = Request(scope)
        if scope["type"] == "http" and "api_token" in request.query_params and request.method not in ("GET", "HEAD"):
            response = JSONResponse({"detail": "api_token: a query token only opens the UI in a browser (GET); "
                                     "send Authorization: Bearer TOKEN with this request"}, status_code=400)
            return await response(scope, receive, send)
        bearer = request.headers.get("authorization", "")
        given = bearer[7:] if bearer.lower().startswith("bearer ") else request.cookies.get(API_COOKIE)
        if self._ok(given):
            return await self.app(scope, receive, send)
        from_query = request.query_params.get("api_token")
        if scope["type"] == "http" and self._ok(from_query):
            target = request.url.remove_query_params("api_token")
            response = RedirectResponse(str(target), status_code=303)
            response.set_cookie(API_COOKIE, from_query, httponly=True, samesite="strict")
            return await response(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        response = JSONResponse(
            {"detail": "authorization: this server needs its API token (Authorization: Bearer TOKEN)"},
            status_code=401, headers={"WWW-Authenticate": "Bearer"},
        )
        return await response(scope, receive, send)


_SECRET_QUERY = re.compile(r"((?:^|[?&])api_token=)[^&\s\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the value of every ``api_token=`` query parameter replaced by ``***``."""
    return _SECRET_QUERY.sub(r"\1***", text)


class RedactSecrets(logging.Filter):
    """A logging filter (on ``uvicorn.access``) that keeps ``api_token`` values out of log lines:
    uvicorn logs each request's path with its query string."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True
