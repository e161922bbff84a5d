"""Fault case 5, in a real browser: Redis stops while a page is live, then comes back.

A private redis-server (on a free port) serves our own Daphne and Celery worker (whose
poller publishes the live events). The models page must notice the outage, keep
rendering, and, once Redis is back on the same port, reconnect by itself, resync over
HTTP (a change made during the outage shows), and take live events again.

Redis runs without persistence here (as `make run` starts it), so a restart also resets
the per-group sequence counters: the page must not drop the new events as duplicates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack import services as svc
from triton_api.client import TritonClient

from .conftest import SERVICE_START_S, login, start_celery_worker, start_web, wait_for, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parent.parent

# Records what the page's live socket (/ws/repository/; the notifications socket is left
# alone) and its resync fetches do, without changing them.
# (An init script runs through the DevTools protocol, so the page's CSP does not apply.)
SPY = """
(() => {
  const Native = window.WebSocket;
  const spy = { opens: 0, closes: 0, codes: [], events: [], resyncs: 0 };
  window.__spy = spy;
  function Spied(url, protocols) {
    const socket = protocols === undefined ? new Native(url) : new Native(url, protocols);
    if (!String(url).includes("/ws/repository/")) return socket;
    socket.addEventListener("open", () => { spy.opens += 1; });
    socket.addEventListener("close", (e) => { spy.closes += 1; spy.codes.push(e.code); });
    socket.addEventListener("message", (m) => {
      try { spy.events.push({ socket: spy.opens, ...JSON.parse(m.data) }); } catch (e) {}
    });
    return socket;
  }
  Spied.prototype = Native.prototype;
  for (const k of ["CONNECTING", "OPEN", "CLOSING", "CLOSED"]) Spied[k] = Native[k];
  window.WebSocket = Spied;
  const nativeFetch = window.fetch.bind(window);
  window.fetch = (url, ...rest) => {
    if (String(url).includes("/models/states.json")) spy.resyncs += 1;
    return nativeFetch(url, ...rest);
  };
})();
"""

CELL = "document.querySelector('tr[data-model=\"{}\"] [data-state-cell]').textContent"


def _state(client: TritonClient, name: str) -> str:
    return next((m.state for m in client.repository_index() if m.name == name), "")


def test_a_live_page_survives_a_redis_outage_and_resyncs_when_it_returns(
    tmp_path, triton, service_env, browser, admin_credentials
):
    triton_client = TritonClient(triton.grpc_url, triton.metrics_url)
    # Preconditions on the shared Triton: neither model is serving.
    for name in ("add_sub", "add_batched"):
        triton_client.unload(name)
        wait_for(lambda n=name: _state(triton_client, n) != "READY", 120, f"{name} unloaded")

    port = svc.free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis_log = tmp_path / "redis.log"
    redis_proc = svc.start_redis(tmp_path, port, redis_log)
    env = {**service_env, "REDIS_URL": url, "CELERY_BROKER_URL": url}
    worker_log, web_log = tmp_path / "worker.log", tmp_path / "daphne.log"
    worker = start_celery_worker(env, worker_log, "redis-ws-fault@localhost", wait=False)
    web, base = start_web(env, web_log)
    context = browser.new_context()
    context.add_init_script(SPY)
    page = context.new_page()
    try:
        wait_for(
            lambda: b"ready" in worker_log.read_bytes(),
            SERVICE_START_S,
            "the worker (and its poller)",
        )
        login(page, base, *admin_credentials)
        page.goto(f"{base}/models/")
        page.wait_for_selector("#live-status.ok")
        assert page.text_content("#live-status") == "live"
        assert page.evaluate("window.__spy.opens") == 1
        assert page.evaluate(CELL.format("add_sub")) != "READY"
        assert page.evaluate(CELL.format("add_batched")) != "READY"

        # (1) Live before the outage: a change made behind the page's back shows up.
        # Two changes, so the page's last sequence number is above what a fresh Redis starts at.
        triton_client.load("add_sub")
        wait_js(page, CELL.format("add_sub") + " === 'READY'")
        triton_client.unload("add_sub")
        wait_js(page, CELL.format("add_sub") + " !== 'READY'")
        seqs_before = page.evaluate(
            "window.__spy.events.filter(e => e.group === 'repository.default').map(e => e.seq)"
        )
        assert len(seqs_before) >= 2 and max(seqs_before) >= 2, seqs_before
        assert page.evaluate("window.__spy.closes") == 0

        # (2) Redis stops: the socket closes, the indicator says so, pages still render.
        svc.stop(redis_proc)
        wait_js(page, "window.__spy.closes >= 1")
        wait_js(page, "document.getElementById('live-status').className.includes('warning')")
        assert page.text_content("#live-status") == "reconnecting…"
        other = context.new_page()
        response = other.goto(f"{base}/models/")
        assert response is not None and response.status == 200
        assert other.locator('#models tr[data-model="add_batched"]').count() == 1
        other.close()
        assert page.locator("#models tr[data-model]").count() > 0

        # (3) A change while Redis is down: its live event is lost.
        triton_client.load("add_batched")
        wait_for(lambda: _state(triton_client, "add_batched") == "READY", 120, "add_batched")
        page.wait_for_timeout(3000)  # several poller ticks, a few reconnect attempts
        assert page.evaluate(CELL.format("add_batched")) != "READY"  # nothing resynced yet
        assert page.evaluate("window.__spy.opens") == 1  # no socket opened without Redis
        assert page.text_content("#live-status") == "reconnecting…"

        # (4) Redis returns on the same port (empty: no persistence). The page reconnects
        # on its own and resyncs over HTTP: the change it missed shows.
        resyncs = page.evaluate("window.__spy.resyncs")
        redis_proc = svc.start_redis(tmp_path, port, redis_log)
        wait_js(page, "window.__spy.opens >= 2")
        wait_js(page, "document.getElementById('live-status').className.includes('ok')")
        assert page.text_content("#live-status") == "live"
        assert page.evaluate("window.__spy.resyncs") > resyncs
        wait_js(page, CELL.format("add_batched") + " === 'READY'")
        # The page shows the true state of every model (nothing stale, nothing doubled).
        truth = page.evaluate(
            "fetch('/models/states.json', {credentials: 'same-origin'}).then(r => r.json())"
        )
        rows = page.evaluate(
            "[...document.querySelectorAll('#models tbody tr[data-model]')]"
            ".map(tr => [tr.dataset.model, tr.querySelector('[data-state-cell]').textContent])"
        )
        names = [name for name, _ in rows]
        assert len(names) == len(set(names)), names
        assert truth["triton"]["up"] is True
        for name, shown in rows:
            # The label a person reads ("unloaded" for a deliberate unload).
            expected = truth["models"].get(name, {"label": "not loaded"})["label"]
            assert shown == expected, (name, shown, expected)
        assert dict(rows)["add_batched"] == "READY"
        assert dict(rows)["add_sub"] != "READY"

        # Live events flow again, on the same reconnected socket, without another resync
        # (the DOM change comes from the event itself).
        opens, resyncs = page.evaluate("window.__spy.opens"), page.evaluate("window.__spy.resyncs")
        triton_client.unload("add_batched")
        wait_js(page, CELL.format("add_batched") + " !== 'READY'")
        triton_client.load("add_sub")
        wait_js(page, CELL.format("add_sub") + " === 'READY'")
        assert page.evaluate("window.__spy.opens") == opens
        assert page.evaluate("window.__spy.resyncs") == resyncs
        after = page.evaluate(
            f"window.__spy.events.filter(e => e.socket === {opens} && e.group === 'repository.default'"
            " && !e.snapshot).map(e => e.seq)"
        )
        # On the new socket, the repository events come in order with no holes or repeats.
        assert len(after) >= 2, after
        assert after == list(range(after[0], after[0] + len(after))), after
        assert page.text_content("#live-status") == "live"

        # (5) A second outage in which nothing changes: after it, Redis holds no snapshot
        # to send and its counters restart below the page's last sequence number, yet the
        # next live event must still show (not be dropped as a duplicate).
        opens = page.evaluate("window.__spy.opens")
        last_seq = max(page.evaluate("window.__spy.events.map(e => e.seq)"))
        svc.stop(redis_proc)
        wait_js(page, "document.getElementById('live-status').className.includes('warning')")
        redis_proc = svc.start_redis(tmp_path, port, redis_log)
        wait_js(page, f"window.__spy.opens > {opens}")
        wait_js(page, "document.getElementById('live-status').className.includes('ok')")
        assert page.evaluate(CELL.format("add_sub")) == "READY"
        opens = page.evaluate("window.__spy.opens")
        triton_client.unload("add_sub")
        wait_js(page, CELL.format("add_sub") + " !== 'READY'")
        fresh = page.evaluate(
            f"window.__spy.events.filter(e => e.socket === {opens}).map(e => e.seq)"
        )
        assert fresh and min(fresh) <= last_seq, (fresh, last_seq)  # counters did restart
        assert page.evaluate("window.__spy.opens") == opens
    finally:
        context.close()
        svc.stop(web)
        svc.stop(worker)
        svc.stop(redis_proc)
        triton_client.unload("add_sub")
        triton_client.unload("add_batched")
