"""The routing proxy, real (Debian's HAProxy 2.6, as sandbox/haproxy.py configures it for
an admin): the operator's runtime API client reads every region's server and sets its
weight, requests follow the weights, a region whose entry dies is taken out by the proxy's
health check while requests keep succeeding on the others, and a server the admin did not
declare is refused in the proxy's own words."""

from __future__ import annotations

import collections
import urllib.request
from collections.abc import Iterator

import pytest

from goodput_operator.controllers.routing import ProxyError, read
from goodput_operator.sandbox.entry import Entry
from goodput_operator.sandbox.haproxy import HAProxy
from tests.conftest import wait_for

pytestmark = pytest.mark.integration
BACKEND = "team-a.chat"


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[HAProxy, dict[str, Entry]]]:
    """The proxy and both regions' entries, started once for the module."""
    tmp_path = tmp_path_factory.mktemp("routing")
    entries = {n: Entry(n, 1.0, tmp_path / f"{n}.log") for n in ("east", "west")}
    proxy = HAProxy(tmp_path / "haproxy",
                    {("team-a", "chat"): {n: e.address for n, e in entries.items()}})
    try:
        for entry in entries.values():
            entry.start()
        proxy.start()
        yield proxy, entries
    finally:
        proxy.stop()
        for entry in entries.values():
            entry.stop()


@pytest.fixture
def regions(started: tuple[HAProxy, dict[str, Entry]]) -> tuple[HAProxy, dict[str, Entry]]:
    """As each test starts: both entries running, up in the proxy, weight 1 each."""
    proxy, entries = started
    for name, entry in entries.items():
        if entry.proc is None:
            entry.start()
        proxy.api.set_weight(BACKEND, name, 1)
    wait_for(lambda: all(e.up for e in read(proxy.api).entries.values()), timeout=20,
             what="both regions up in the proxy")
    return started


def answered(proxy: HAProxy, count: int) -> collections.Counter[str]:
    """Which region answered each of COUNT requests (an error counts as "")."""
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        request = urllib.request.Request(f"{proxy.url}/v1/completions", data=b"{}",
                                         headers={"Host": "chat.team-a"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                seen[response.headers.get("X-Region", "")] += 1
        except OSError:
            seen[""] += 1
    return seen


def test_weights_set_through_the_runtime_api_decide_where_requests_go(
        regions: tuple[HAProxy, dict[str, Entry]]) -> None:
    proxy, _ = regions
    proxy.api.set_weight(BACKEND, "east", 192)
    proxy.api.set_weight(BACKEND, "west", 64)
    view = read(proxy.api)
    assert (view.entries[(BACKEND, "east")].weight,
            view.entries[(BACKEND, "west")].weight) == (192, 64)
    seen = answered(proxy, 40)
    assert seen == {"east": 30, "west": 10}  # roundrobin: exactly in proportion
    proxy.api.set_weight(BACKEND, "east", 0)
    assert answered(proxy, 8) == {"west": 8}


def test_a_dead_entry_is_taken_out_and_requests_still_succeed(
        regions: tuple[HAProxy, dict[str, Entry]]) -> None:
    proxy, entries = regions
    entries["east"].stop()
    # before the health check notices, a refused connection is retried on the other region
    assert answered(proxy, 10) == {"west": 10}
    wait_for(lambda: not read(proxy.api).entries[(BACKEND, "east")].up, timeout=10,
             what="the proxy's health check marking east down")
    entries["east"].start()
    wait_for(lambda: read(proxy.api).entries[(BACKEND, "east")].up, timeout=10,
             what="east up again")
    assert set(answered(proxy, 10)) == {"east", "west"}


def test_a_server_the_admin_did_not_declare_is_refused(
        regions: tuple[HAProxy, dict[str, Entry]]) -> None:
    proxy, _ = regions
    with pytest.raises(ProxyError, match="No such server"):
        proxy.api.set_weight(BACKEND, "south", 10)
    with pytest.raises(ProxyError, match="No such"):
        proxy.api.set_weight("team-b.chat", "east", 10)
    gone = HAProxy(proxy.workdir / "never-started", {("x", "y"): {"east": "127.0.0.1:1"}})
    assert "No such file" in read(gone.api).error
