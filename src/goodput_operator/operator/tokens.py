"""The report channel's gate: which bearer tokens are worth a TokenReview, and at what
rate. A flood of bogus tokens must neither load the API server nor delay the lease's
renewal: claims are checked locally first, refusals are remembered, new tokens are
rate-limited per source address, and reviews run on threads of their own with a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from goodput_operator import metrics, names
from goodput_operator.controllers.kube import Kube

Obj = dict[str, Any]
# Seconds an accepted token is trusted without asking again, less a random part of up to
# a quarter (the tokens of a gang that started together are not all reviewed again at
# once), and never past the token's own expiry. What a review would find out sooner is
# checked locally on every report: the pod the token is bound to must still exist with
# its UID (a deleted pod's token stops working at once), and the expiry; a second review
# only catches a deleted ServiceAccount or a rotated signing key. At 30 s, a 31,000-worker
# job cost the API server 1,000 TokenReviews a second; at 300 s, about 100.
REVIEW_TTL = 300.0
# Once an accepted token's trust lapses, its next report is still answered from the lapsed
# review while the token is reviewed again off the report's path (for up to this many more
# seconds, as long as the token itself has not expired): a 31,000-worker job reporting
# every 80 s would otherwise have a third of its reports wait for a TokenReview, and an
# API server that cannot be asked for a while would 503 them. A refusal then refuses the
# token's later reports.
STALE_SECONDS = REVIEW_TTL
REFUSAL_TTL = 60.0  # seconds a refused token is refused without asking again
REVIEW_TIMEOUT = 5.0  # seconds a TokenReview may take before the report gets a 503
REVIEW_THREADS = 4  # TokenReviews at once, on threads of their own (never the lease's)
REVIEW_RATE, REVIEW_BURST = 5.0, 20.0  # new tokens reviewed per second per source
MAX_REMEMBERED = 10_000  # refused tokens and sources remembered at most
# accepted tokens remembered at most: every live worker's of the largest fleet (Rainier's
# 31,000 nodes) with room for a restart's new pods; each is a few hundred bytes (the pod
# it is bound to), and only a pod that exists can have one
MAX_ACCEPTED = 100_000
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"


class Refused(Exception):
    """A report refused, with the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def remember(cache: dict[str, tuple[float, Any]], key: str, value: tuple[float, Any],
              limit: int, now: float) -> None:
    """Keep VALUE (expiry, what) under KEY; at LIMIT, the expired entries go first, and
    everything only when none has."""
    if len(cache) >= limit:
        for gone in [k for k, (until, _) in cache.items() if until <= now]:
            del cache[gone]
        if len(cache) >= limit:
            cache.clear()
    cache[key] = value


def bearer(authorization: str) -> str | None:
    """The token of an Authorization header `Bearer <token>`, or None."""
    token = authorization[7:].strip() if authorization.startswith("Bearer ") else ""
    return token or None


def claims_of(token: str) -> Obj | None:
    """TOKEN's JWT claims, unverified; None for what is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def precheck(token: str, now: float) -> str | None:
    """Why TOKEN cannot be a live report token, judged from its claims alone (no signature
    check: the TokenReview does that), or None. Garbage, other audiences, expired tokens and
    tokens bound to no pod never cost the API server a TokenReview."""
    claims = claims_of(token)
    if claims is None:
        return "not a JWT"
    audiences = claims.get("aud")
    if names.REPORT_AUDIENCE not in ([audiences] if isinstance(audiences, str)
                                     else audiences if isinstance(audiences, list) else []):
        return f"not a token for audience {names.REPORT_AUDIENCE}"
    expiry = claims.get("exp")
    if not isinstance(expiry, int | float) or expiry <= now:
        return "expired"
    bound = claims.get("kubernetes.io")
    if not isinstance(bound, dict) or not isinstance(bound.get("pod"), dict):
        return "not bound to a pod"
    return None


class Buckets:
    """A token bucket per source address: RATE new tokens a second, BURST at once."""

    def __init__(self, rate: float = REVIEW_RATE, burst: float = REVIEW_BURST) -> None:
        self.rate, self.burst = rate, burst
        self.levels: dict[str, tuple[float, float]] = {}  # source -> (tokens, at)

    def take(self, source: str, now: float) -> bool:
        if len(self.levels) > MAX_REMEMBERED:
            self.levels.clear()
        tokens, at = self.levels.get(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1:
            self.levels[source] = (tokens, now)
            return False
        self.levels[source] = (tokens - 1, now)
        return True


class TokenGate:
    """One TokenReview per token per REVIEW_TTL, never for a token its claims already rule
    out or one refused within REFUSAL_TTL, at most REVIEW_RATE new tokens a second from
    one source, on REVIEW_THREADS threads of their own and within REVIEW_TIMEOUT."""

    def __init__(self, kube: Kube, audiences: Sequence[str] = (names.REPORT_AUDIENCE,),
                 check: Callable[[str, float], str | None] = precheck,
                 groups: bool = False) -> None:
        """AUDIENCES: what the TokenReview asks the token to be for (none: the API
        server's own); CHECK: why a token cannot be one worth a review (its claims);
        GROUPS: keep the user's uid and groups too (what an access review asks about; a
        report token keeps only what binds it to its pod, 100,000 of them)."""
        self.kube = kube
        self.audiences, self.check, self.groups = list(audiences), check, groups
        # sha256(token) -> (until when it is trusted, the review's user: the pod it is for)
        self.reviews: dict[str, tuple[float, Obj]] = {}
        self.refusals: dict[str, tuple[float, str]] = {}  # sha256(token) -> (expiry, why)
        self.buckets = Buckets()
        self.executor = ThreadPoolExecutor(REVIEW_THREADS, thread_name_prefix="token-review")
        self.renewing: dict[str, asyncio.Task[None]] = {}  # sha256(token) -> its re-review

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def renewed(self, cancel: bool = False) -> None:
        """Wait for the re-reviews under way (tests), or CANCEL them first (a stop)."""
        for renewal in list(self.renewing.values()) if cancel else []:
            renewal.cancel()
        await asyncio.gather(*self.renewing.values(), return_exceptions=True)

    async def review(self, token: str, source: str) -> Obj:
        """TOKEN's authenticated TokenReview status; Refused (401, 429, 503) otherwise."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached, refused = self.reviews.get(key), self.refusals.get(key)
        if refused is not None and refused[0] > now:
            raise Refused(401, f"token rejected: {refused[1]}")
        if cached is not None and cached[0] > now:
            return cached[1]
        why = self.check(token, time.time())
        if why is not None:
            self._refuse(key, why, now)
        if cached is not None and cached[0] + STALE_SECONDS > now:
            if key not in self.renewing:
                self.renewing[key] = asyncio.create_task(self._renew(token, key))
            return cached[1]
        if not self.buckets.take(source, now):
            raise Refused(429, f"too many new tokens from {source}: retry in a second")
        return self._accept(token, key, await self._review(token))

    async def _renew(self, token: str, key: str) -> None:
        """Review an accepted token again, its reports answered meanwhile: trusted anew, or
        refused from now on; an API server that cannot be asked leaves the lapsed review
        to answer (and be renewed) until STALE_SECONDS have passed."""
        try:
            self._accept(token, key, await self._review(token))
        except Refused as err:
            if err.status == 401:
                self.reviews.pop(key, None)
        finally:
            self.renewing.pop(key, None)

    def _accept(self, token: str, key: str, review: Obj) -> Obj:
        """What a TokenReview said of TOKEN: its authenticated user, trusted for
        REVIEW_TTL (Refused 401 when it is not)."""
        now = time.monotonic()
        if not review.get("authenticated"):
            self._refuse(key, review.get("error") or "not authenticated", now)
        user = review.get("user") or {}
        kept: Obj = {"authenticated": True, "user": {
            "username": user.get("username"),
            "extra": {k: v for k, v in (user.get("extra") or {}).items()
                      if k in (POD_NAME, POD_UID)}}}
        if self.groups:
            kept["user"] |= {"uid": user.get("uid"), "groups": list(user.get("groups") or [])}
        expiry = (claims_of(token) or {}).get("exp")  # none: a legacy token (CHECK allowed)
        left = float(expiry) - time.time() if isinstance(expiry, int | float) else REVIEW_TTL
        trusted = min(REVIEW_TTL * (1 - random.random() / 4), left)
        if trusted > 0:
            remember(self.reviews, key, (now + trusted, kept), MAX_ACCEPTED, now)
        return kept

    async def _review(self, token: str) -> Obj:
        loop = asyncio.get_running_loop()
        try:
            review: Obj = await asyncio.wait_for(loop.run_in_executor(
                self.executor, self.kube.review_token, token, self.audiences),
                REVIEW_TIMEOUT)
        except Exception as err:  # the API server is slow or away: the worker retries
            metrics.TOKEN_REVIEWS.labels("error").inc()
            raise Refused(503, f"could not check the token: {err or type(err).__name__}; "
                               "retry") from None
        metrics.TOKEN_REVIEWS.labels(
            "authenticated" if review.get("authenticated") else "rejected").inc()
        return review

    def _refuse(self, key: str, why: str, now: float) -> None:
        """Refuse the token (401), and remember that for REFUSAL_TTL."""
        remember(self.refusals, key, (now + REFUSAL_TTL, why), MAX_REMEMBERED, now)
        raise Refused(401, f"token rejected: {why}")
