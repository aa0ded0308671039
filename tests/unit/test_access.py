"""/sd/serving answers only a token whose user the API server allows to get it (a
TokenReview, then a SubjectAccessReview on the non-resource URL), at a bounded cost to the
API server whatever the rate of requests (operator.access)."""

from __future__ import annotations

import asyncio
import time

import pytest

from goodput_operator.controllers.state import State
from goodput_operator.operator.access import ACCESS_TTL, AccessGate, bearer_check
from goodput_operator.operator.runtime import Health
from goodput_operator.operator.tokens import Buckets, Refused
from tests.unit.test_reports import jwt

pytestmark = pytest.mark.unit
PROMETHEUS = "system:serviceaccount:monitoring:prometheus"


class ApiServer:
    """What the gate asks: who a token is (any JWT is its `sub`), and whether they may."""

    def __init__(self, readers: set[str]) -> None:
        self.readers = readers
        self.token_reviews: list[list[str]] = []  # the audiences asked for
        self.access_reviews: list[tuple[str, str, str]] = []
        self.away = False

    def review_token(self, token: str, audiences: list[str]) -> dict[str, object]:
        self.token_reviews.append(audiences)
        from goodput_operator.operator.tokens import claims_of
        return {"authenticated": True, "user": {
            "username": (claims_of(token) or {})["sub"], "uid": "u1",
            "groups": ["system:serviceaccounts", "system:authenticated"]}}

    def review_access(self, user: dict[str, object], path: str, verb: str) -> bool:
        if self.away:
            raise ConnectionError("the API server is away")
        self.access_reviews.append((str(user["username"]), path, verb))
        return user["username"] in self.readers


def gate(server: ApiServer) -> AccessGate:
    made = AccessGate(server, "/sd/serving")  # type: ignore[arg-type]
    made.tokens.buckets = Buckets(rate=1e9, burst=1e9)
    return made


def token(sub: str, exp: float | None = None) -> str:
    return jwt(sub=sub, exp=exp if exp is not None else time.time() + 3600)


def status_of(check: AccessGate, header: str) -> int:
    try:
        asyncio.run(check.check(header, "10.0.0.7"))
    except Refused as err:
        return err.status
    return 200


@pytest.mark.parametrize(("header", "status"), [
    ("", 401),                                       # no credentials at all
    ("Basic dXNlcjpwYXNz", 401),
    ("Bearer ", 401),
    ("Bearer not-a-token", 401),                     # no review for garbage
    (f"Bearer {token(PROMETHEUS, exp=1.0)}", 401),   # expired
    (f"Bearer {token('system:serviceaccount:team-a:default')}", 403),  # not a reader
    (f"Bearer {token(PROMETHEUS)}", 200),
])
def test_only_a_reader_s_token_is_answered(header: str, status: int) -> None:
    server = ApiServer({PROMETHEUS})
    assert status_of(gate(server), header) == status
    reviewed = status in (200, 403)
    assert bool(server.access_reviews) == reviewed, "garbage costs the API server nothing"
    assert server.token_reviews == ([[]] if reviewed else []), "the API server's audiences"


def test_a_get_loop_costs_one_review_of_each_kind_per_ttl(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from goodput_operator.operator import access
    clock = [1000.0]
    monkeypatch.setattr(access.time, "monotonic", lambda: clock[0])
    server = ApiServer({PROMETHEUS})
    check = gate(server)
    header = f"Bearer {token(PROMETHEUS)}"
    for _ in range(200):
        assert status_of(check, header) == 200
    assert (len(server.token_reviews), len(server.access_reviews)) == (1, 1)
    server.readers.clear()                           # the binding is removed
    clock[0] += ACCESS_TTL + 1
    assert status_of(check, header) == 403           # within a minute


def test_an_api_server_that_cannot_answer_is_a_503_not_an_open_door() -> None:
    server = ApiServer({PROMETHEUS})
    server.away = True
    assert status_of(gate(server), f"Bearer {token(PROMETHEUS)}") == 503


def test_a_legacy_token_without_expiry_is_left_to_the_review() -> None:
    assert bearer_check(jwt(sub="x"), time.time()) is None
    assert bearer_check(jwt(sub="x", exp="never"), time.time()) == "expired"


def test_sd_serving_refuses_a_request_without_credentials_with_the_reason() -> None:
    class Request:
        def __init__(self) -> None:
            self.headers: dict[str, str] = {}
            self.remote = "10.0.0.9"

    health = Health(State(), kube=None, sd_gate=gate(ApiServer({PROMETHEUS})))  # type: ignore[arg-type]
    answer = asyncio.run(health._serving_targets(Request()))  # type: ignore[arg-type]
    assert answer.status == 401
    assert b"needs a bearer token" in answer.body  # type: ignore[operator]
