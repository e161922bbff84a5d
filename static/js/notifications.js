// Personal notifications (e.g. "your sweep finished"), on every page, as toasts.
"use strict";
(function () {
  const box = document.getElementById("toasts");
  if (!box || !window.Live) return;
  function toast(text, url) {
    const item = document.createElement(url ? "a" : "div");
    item.className = "toast";
    item.textContent = text;
    if (url) item.href = url;
    box.appendChild(item);
    setTimeout(function () { item.remove(); }, 15000);
  }
  window.Live.toast = toast;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  let retry = 1000;
  function open() {
    const socket = new WebSocket(scheme + "://" + location.host + "/ws/notifications/");
    socket.onmessage = function (msg) {
      const event = JSON.parse(msg.data);
      if (event.type === "notify") toast(event.message, event.url);
    };
    socket.onopen = function () { retry = 1000; };
    socket.onclose = function () { setTimeout(open, retry); retry = Math.min(retry * 2, 30000); };
  }
  open();
})();
