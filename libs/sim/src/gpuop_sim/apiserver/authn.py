"""Optional authentication, so clients' credentials can be tested against the simulator as against a
real API server: bearer tokens and TLS client certificates (signed by the CA the server's TLS context
trusts). Off by default: the simulator then authenticates nobody and any token works. Authorization
(RBAC) is not simulated either way."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


@dataclass(frozen=True)
class Authenticator:
    """Who may call: holders of one of `tokens`, or of a client certificate whose CN is listed."""

    tokens: frozenset[str] = field(default_factory=frozenset)
    client_common_names: frozenset[str] = field(default_factory=frozenset)

    def authenticated(self, authorization: str, peer_cert: dict[str, Any] | None) -> bool:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip() in self.tokens:
            return True
        return common_name(peer_cert) in self.client_common_names


def common_name(peer_cert: dict[str, Any] | None) -> str | None:
    """The subject CN of a verified peer certificate (ssl's getpeercert() form)."""
    for rdn in (peer_cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def middleware(authenticator: Authenticator) -> Middleware:
    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport is not None else None
        if not authenticator.authenticated(request.headers.get("Authorization", ""), peer):
            return web.Response(status=401, text=json.dumps(UNAUTHORIZED), content_type="application/json")
        return await handler(request)

    return authenticate
