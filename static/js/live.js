// Live updates over a websocket, with gap detection: every event carries a per-group
// sequence number; a missing number (or a reconnect) triggers a resync over HTTP.
"use strict";

window.Live = (function () {
  // The page's Triton server (base.html's meta; servers.js): a socket relays its events.
  function withServer(path) {
    const meta = document.querySelector('meta[name="triton-server"]');
    const server = meta ? meta.content : "";
    if (!server || server === "default") return path;
    return path + (path.indexOf("?") < 0 ? "?" : "&") + "server=" + encodeURIComponent(server);
  }

  function connect(path, handlers, resync) {
    const lastSeq = {};
    let socket = null;
    let retry = 500;
    const status = document.getElementById("live-status");

    function setStatus(text, cls) {
      if (status) { status.textContent = text; status.className = "small " + (cls || ""); }
    }

    function handle(event) {
      if (event.group && typeof event.seq === "number") {
        const prev = lastSeq[event.group];
        if (!event.snapshot && prev !== undefined && event.seq > prev + 1 && resync) resync();
        if (prev !== undefined && event.seq <= prev && !event.snapshot) return; // duplicate
        lastSeq[event.group] = event.seq;
      }
      // "*": a page's handler of the types it has none for (others ignore them).
      const handler = handlers[event.type] || handlers["*"];
      if (handler) handler(event);
    }

    function open() {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      socket = new WebSocket(scheme + "://" + location.host + withServer(path));
      socket.onopen = function () {
        retry = 500;
        // A new connection starts a new sequence: Redis may have restarted (its counters
        // with it), and the resync below covers whatever was missed in between.
        for (const group in lastSeq) delete lastSeq[group];
        setStatus("live", "ok");
        if (resync) resync();
      };
      socket.onmessage = function (msg) {
        try { handle(JSON.parse(msg.data)); } catch (e) { console.error(e); }
      };
      socket.onclose = function () {
        setStatus("reconnecting…", "warning");
        setTimeout(open, retry);
        retry = Math.min(retry * 2, 10000);
      };
    }
    open();
    return { lastSeq: lastSeq };
  }

  function csrfToken() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function post(url) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "X-CSRFToken": csrfToken(), "Accept": "application/json" },
      credentials: "same-origin",
    });
    let body = {};
    try { body = await response.json(); } catch (e) { body = { message: response.statusText }; }
    return { ok: response.ok, status: response.status, body: body };
  }

  // The server's label and tone (repository_app/status.py display); older events carry the
  // raw state only, so the same rule is applied here as a fallback.
  function tone(info) {
    if (info.tone) return info.tone;
    return { READY: "ok", LOADING: "busy", UNLOADING: "busy", UNAVAILABLE: info.reason === "unloaded" ? "neutral" : "error" }[info.state] || "neutral";
  }
  function label(info) {
    if (info.label) return info.label;
    return info.state === "UNAVAILABLE" && info.reason === "unloaded" ? "unloaded" : info.state;
  }
  function stateCell(el, info) {
    el.textContent = label(info);
    el.className = "state tone-" + tone(info);
    el.title = info.reason || "";
  }

  return { connect: connect, post: post, stateCell: stateCell, tone: tone, label: label };
})();
