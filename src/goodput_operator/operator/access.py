"""Who may read /sd/serving: it lists every namespace's serving pods (names, IPs, ports,
endpoints), so it answers only a bearer token whose user the API server allows to `get`
that path, as kube-rbac-proxy and controller-runtime's secured metrics do: a TokenReview
says who the token is, a SubjectAccessReview on the non-resource URL says whether they may.
The chart grants it to the ServiceAccounts it is given (`serviceDiscovery.readers`);
Prometheus sends its own token (`authorization.credentials_file` in its http_sd_configs).

The costs are the report channel's (operator.tokens): a token is reviewed once per
REVIEW_TTL, garbage and refused tokens cost no review, new tokens are rate-limited per
source address, and an allowed user is not asked about again for ACCESS_TTL. A GET loop,
with or without credentials, costs the API server at most a few reviews a second.
"""

from __future__ import annotations

import asyncio
import json
import time

from goodput_operator import metrics
from goodput_operator.controllers.kube import Kube
from goodput_operator.operator.tokens import (
    MAX_REMEMBERED,
    REVIEW_TIMEOUT,
    Refused,
    TokenGate,
    bearer,
    claims_of,
    remember,
)

ACCESS_TTL = 60.0  # seconds an access review's answer holds (a revoked binding: a minute)


def bearer_check(token: str, now: float) -> str | None:
    """Why TOKEN cannot be a live ServiceAccount or user token, from its claims alone:
    not a JWT, or expired (a legacy token has no expiry; the review decides)."""
    claims = claims_of(token)
    if claims is None:
        return "not a JWT"
    expiry = claims.get("exp")
    if expiry is not None and (not isinstance(expiry, int | float) or expiry <= now):
        return "expired"
    return None


class AccessGate:
    """Bearer token -> allowed to VERB PATH, or Refused (401, 403, 429, 503)."""

    def __init__(self, kube: Kube, path: str, verb: str = "get") -> None:
        self.kube, self.path, self.verb = kube, path, verb
        self.tokens = TokenGate(kube, audiences=(), check=bearer_check, groups=True)
        self.answers: dict[str, tuple[float, bool]] = {}  # user -> (until, allowed)

    def close(self) -> None:
        self.tokens.close()

    async def check(self, authorization: str, source: str) -> None:
        """AUTHORIZATION: the request's header, as sent."""
        token = bearer(authorization)
        if token is None:
            raise Refused(401, f"{self.path} needs a bearer token (Prometheus: "
                               "authorization.credentials_file in http_sd_configs)")
        user = (await self.tokens.review(token, source))["user"]
        key = json.dumps([user.get("username"), sorted(user.get("groups") or [])])
        now = time.monotonic()
        cached = self.answers.get(key)
        allowed = cached[1] if cached is not None and cached[0] > now else \
            await self._review(user, key, now)
        if not allowed:
            raise Refused(403, f"{user.get('username')} may not {self.verb} {self.path} "
                               "(the chart grants it to serviceDiscovery.readers)")

    async def _review(self, user: dict[str, object], key: str, now: float) -> bool:
        loop = asyncio.get_running_loop()
        try:
            allowed = await asyncio.wait_for(loop.run_in_executor(
                self.tokens.executor, self.kube.review_access, user, self.path, self.verb),
                REVIEW_TIMEOUT)
        except Exception as err:  # the API server is slow or away: Prometheus retries
            metrics.TOKEN_REVIEWS.labels("error").inc()
            raise Refused(503, f"could not check access: {err or type(err).__name__}; "
                               "retry") from None
        remember(self.answers, key, (now + ACCESS_TTL, allowed), MAX_REMEMBERED, now)
        return allowed
