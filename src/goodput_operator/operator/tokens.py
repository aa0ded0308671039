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
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from goodput_operator import metrics, names
from goodput_operator.controllers.kube import Kube

Obj = dict[str, Any]
REVIEW_TTL = 30.0  # seconds an accepted token is trusted without asking again (the pod
# itself is checked on every report: a deleted pod's token stops working at once)
REFUSAL_TTL = 60.0  # seconds a refused token is refused without asking again
REVIEW_TIMEOUT = 5.0  # seconds a TokenReview may take before the report gets a 503
REVIEW_THREADS = 4  # TokenReviews at once, on threads of their own (never the lease's)
REVIEW_RATE, REVIEW_BURST = 5.0, 20.0  # new tokens reviewed per second per source
MAX_REMEMBERED = 10_000  # tokens (accepted, refused) and sources remembered at most
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"


class Refused(Exception):
    """A report refused, with the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
    if len(cache) > MAX_REMEMBERED:
        cache.clear()
    cache[key] = value


def precheck(token: str, now: float) -> str | None:
    """Why TOKEN cannot be a live report token, judged from its claims alone (no signature
    check: the TokenReview does that), or None. Garbage, other audiences, expired tokens and
    tokens bound to no pod never cost the API server a TokenReview."""
    parts = token.split(".")
    if len(parts) != 3:
        return "not a JWT"
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return "not a JWT"
    if not isinstance(claims, dict):
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

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.reviews: dict[str, tuple[float, Obj]] = {}  # sha256(token) -> (expiry, review)
        self.refusals: dict[str, tuple[float, str]] = {}  # sha256(token) -> (expiry, why)
        self.buckets = Buckets()
        self.executor = ThreadPoolExecutor(REVIEW_THREADS, thread_name_prefix="token-review")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def review(self, token: str, source: str) -> Obj:
        """TOKEN's authenticated TokenReview status; Refused (401, 429, 503) otherwise."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached, refused = self.reviews.get(key), self.refusals.get(key)
        if refused is not None and refused[0] > now:
            raise Refused(401, f"token rejected: {refused[1]}")
        if cached is not None and cached[0] > now:
            return cached[1]
        why = precheck(token, time.time())
        if why is not None:
            self._refuse(key, why, now)
        if not self.buckets.take(source, now):
            raise Refused(429, f"too many new tokens from {source}: retry in a second")
        review = await self._review(token)
        if not review.get("authenticated"):
            self._refuse(key, review.get("error") or "not authenticated", now)
        _remember(self.reviews, key, (now + REVIEW_TTL, review))
        return review

    async def _review(self, token: str) -> Obj:
        loop = asyncio.get_running_loop()
        try:
            review: Obj = await asyncio.wait_for(loop.run_in_executor(
                self.executor, self.kube.review_token, token, [names.REPORT_AUDIENCE]),
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
        _remember(self.refusals, key, (now + REFUSAL_TTL, why))
        raise Refused(401, f"token rejected: {why}")
