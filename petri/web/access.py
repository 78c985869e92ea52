"""Who may see and cancel what.

- **Local** (the server binds to loopback, the default): everything is visible to every caller, as
  before; nobody needs a token.
- **Public** (bound beyond loopback, e.g. a Hugging Face Space, or ``PETRI_PUBLIC=1``): every job
  and run belongs to whoever submitted it. A client proves who it is with the header
  ``X-Petri-Token``; a submission without one is handed a new token (in the response's ``token``
  field and ``X-Petri-Token`` header). Lists show only the caller's own jobs and runs; another
  caller's job or run is a 404 (its existence is not confirmed), and a job route without a token is
  a 401. Tokens are never stored: the store keeps a SHA-256 of each.
- **API token** (``PETRI_API_TOKEN`` set when the server starts): every route but ``/api/health``
  needs it, as ``Authorization: Bearer TOKEN``; a browser opens the UI once with ``/?api_token=TOKEN``,
  which sets a cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

CALLER_HEADER = "X-Petri-Token"
API_TOKEN_ENV = "PETRI_API_TOKEN"
PUBLIC_ENV = "PETRI_PUBLIC"
API_COOKIE = "petri_api_token"
OPEN_PATHS = ("/api/health",)


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

    def for_submission(self) -> "Caller":
        """This caller, with a new token when a public server needs one and none was sent."""
        if self.public and not self.token:
            return Caller(public=True, token=secrets.token_urlsafe(24))
        return self

    def require_identity(self) -> None:
        """A public server's job routes need a caller token (401 without one)."""
        if self.public and not self.token:
            raise HTTPException(401, detail=f"{CALLER_HEADER}: this server is public; send the token your "
                                "submission returned", headers={"WWW-Authenticate": CALLER_HEADER})

    def hand_out(self, response: Response) -> None:
        """Return the caller's token with a public submission's response (header)."""
        if self.public and self.token:
            response.headers[CALLER_HEADER] = self.token


async def get_caller(request: Request) -> Caller:
    """The request's caller under the app's :class:`AccessPolicy` (``app.state.access``)."""
    policy: AccessPolicy = request.app.state.access
    token = request.headers.get(CALLER_HEADER) or None
    return Caller(public=policy.public, token=token[:200] if token else None)


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
