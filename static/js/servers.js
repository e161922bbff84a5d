// Which Triton server this page is about (registry/server_context.py): the header's
// switcher goes to the same page with ?server=NAME, and while that server is not the
// default one, this page's same-origin links, forms and fetches keep server=NAME, so the
// templates' {% url %} links need no change. Loaded in <head>, before any page script.
"use strict";

(function () {
  const meta = document.querySelector('meta[name="triton-server"]');
  const server = meta ? meta.content : "";

  document.addEventListener("change", function (event) {
    if (event.target.id !== "server-switcher") return;
    const url = new URL(location.href);
    if (event.target.value === "default") url.searchParams.delete("server");
    else url.searchParams.set("server", event.target.value);
    url.searchParams.delete("page");  // a page number of another server's list means nothing
    location.assign(url.toString());
  });

  if (!server || server === "default") return;

  // This site's own pages and endpoints (not static files, not other sites), as a URL.
  function ours(text) {
    let url;
    try { url = new URL(text, location.href); } catch (e) { return null; }
    if (url.origin !== location.origin || url.pathname.startsWith("/static/")) return null;
    return url;
  }

  // The URL with server=NAME, or null when it is not ours or already names a server.
  function carried(text) {
    const url = ours(text);
    if (!url || url.searchParams.has("server")) return null;
    url.searchParams.set("server", server);
    return url;
  }

  // Links are rewritten when followed (those added later by live updates too).
  function onLink(event) {
    const link = event.target.closest && event.target.closest("a[href]");
    if (!link || link.getAttribute("href").startsWith("#")) return;
    const url = carried(link.href);
    if (url) link.href = url.toString();
  }
  document.addEventListener("click", onLink, true);
  document.addEventListener("auxclick", onLink, true);
  document.addEventListener("contextmenu", onLink, true);

  // Forms: a GET form's query is built from its fields, so it gets a hidden field; a POST
  // form's action carries the parameter.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    if ((form.method || "get").toLowerCase() === "get") {
      // Browsers drop the action's own query on a GET submit: a field carries the server.
      if (form.querySelector('[name="server"]') || !ours(form.action)) return;
      const field = document.createElement("input");
      field.type = "hidden";
      field.name = "server";
      field.value = server;
      form.appendChild(field);
    } else {
      const url = carried(form.action);
      if (url) form.action = url.toString();
    }
  }, true);

  // Page scripts' requests (states, actions, JSON) go to the same server.
  const originalFetch = window.fetch.bind(window);
  window.fetch = function (input, init) {
    if (typeof input === "string" || input instanceof URL) {
      const url = carried(String(input));
      if (url) input = url.toString();
    }
    return originalFetch(input, init);
  };
})();
