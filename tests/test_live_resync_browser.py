"""In a real browser: pages whose live socket drops catch up over HTTP when it reconnects,
so an event published while they were disconnected is not lost (overview's activity feed,
the config editor's "changed meanwhile" banner)."""

from __future__ import annotations

import pytest

from team import audit

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]

# Keeps every page socket reachable from the test, without changing how it behaves.
TRACK_SOCKETS = """
window.__sockets = [];
const NativeWebSocket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const socket = new NativeWebSocket(url, protocols);
  window.__sockets.push(socket);
  return socket;
};
window.WebSocket.prototype = NativeWebSocket.prototype;
"""


def sockets_to(path: str) -> str:
    return f"window.__sockets.filter(s => s.url.endsWith({path!r}))"


def drop_socket(page, path: str) -> None:  # type: ignore[no-untyped-def]
    wait_js(page, f"{sockets_to(path)}.length === 1 && {sockets_to(path)}[0].readyState === 1")
    page.evaluate(f"{sockets_to(path)}[0].close()")
    wait_js(page, f"{sockets_to(path)}[0].readyState === 3")  # closed


def reconnected(page, path: str) -> None:  # type: ignore[no-untyped-def]
    wait_js(page, f"{sockets_to(path)}.length === 2 && {sockets_to(path)}[1].readyState === 1")


def test_the_activity_feed_catches_up_after_a_reconnect(browser, web_server, admin_credentials):
    context = browser.new_context()
    context.add_init_script(TRACK_SOCKETS)
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/")
        drop_socket(page, "/ws/activity/")
        # Published while no socket of this page listens (it reconnects after 0.5 s).
        audit.record("rita", "load", model_name="add_sub", detail="missed while away")
        reconnected(page, "/ws/activity/")
        wait_js(
            page, "document.getElementById('activity').textContent.includes('missed while away')"
        )
        assert "rita" in page.text_content("#activity tr:first-child")
        # Live again: the next event arrives over the new socket.
        audit.record("rita", "unload", model_name="add_sub", detail="seen live")
        wait_js(page, "document.getElementById('activity').textContent.includes('seen live')")
    finally:
        context.close()


def test_the_editor_learns_of_a_change_made_while_it_was_disconnected(
    browser, web_server, admin_credentials, triton
):
    config = triton.repository / "add_sub" / "config.pbtxt"
    original = config.read_bytes()
    context = browser.new_context()
    context.add_init_script(TRACK_SOCKETS)
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_sub/config/")
        assert page.is_hidden("#config-changed")
        drop_socket(page, "/ws/editor/add_sub/")
        config.write_bytes(original + b"\n# edited on disk meanwhile\n")
        reconnected(page, "/ws/editor/add_sub/")
        wait_js(page, "!document.getElementById('config-changed').hidden")
        assert "changed on the server since you opened it" in page.text_content("#config-changed")
    finally:
        config.write_bytes(original)
        context.close()
