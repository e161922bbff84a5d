"""Tiny HTTP client on http.client for the probe: manual cookies (the app sets Secure cookies
in production mode; we talk plain HTTP to 127.0.0.1), source address choice, CSRF like a
browser, and a scraper that posts a form's fields as a browser would."""

from __future__ import annotations

import http.client
import json as _json
import re
import time
from html.parser import HTMLParser
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode

from stack import HOST, WEB_PORT

PORT = WEB_PORT


class Resp:
    def __init__(
        self, status: int, headers: list[tuple[str, str]], body: bytes, elapsed: float
    ) -> None:
        self.status, self.headers, self.body, self.elapsed = status, headers, body, elapsed

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        try:
            return _json.loads(self.body)
        except ValueError:
            return None


class Client:
    def __init__(self, src: str = "127.0.0.1", token: str | None = None) -> None:
        self.src, self.token = src, token
        self.cookies: dict[str, str] = {}

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        json: Any = None,
        form: Any = None,
        timeout: float = 120,
        csrf: bool = True,
        auth: bool = True,
    ) -> Resp:
        h = {"Host": f"{HOST}:{PORT}"}
        if json is not None:
            body = _json.dumps(json).encode()
            h["Content-Type"] = "application/json"
        if form is not None:
            body = urlencode(form, doseq=True).encode()
            h["Content-Type"] = "application/x-www-form-urlencoded"
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        if self.token and auth:
            h["Authorization"] = f"Token {self.token}"
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if csrf and "csrftoken" in self.cookies and method not in ("GET", "HEAD"):
            h["X-CSRFToken"] = self.cookies["csrftoken"]
        h.update(headers or {})
        conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout, source_address=(self.src, 0))
        t0 = time.monotonic()
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for k, v in h.items():
                conn.putheader(k, v)
            if body is not None and not any(k.lower() == "content-length" for k in h):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            r = conn.getresponse()
            data = r.read()
            reply_headers = r.getheaders()
        finally:
            conn.close()
        elapsed = time.monotonic() - t0
        for k, v in reply_headers:
            if k.lower() == "set-cookie":
                c: SimpleCookie = SimpleCookie()
                c.load(v)
                for name, morsel in c.items():
                    if morsel.value == "" or morsel["max-age"] == "0":
                        self.cookies.pop(name, None)
                    else:
                        self.cookies[name] = morsel.value
        return Resp(r.status, reply_headers, data, elapsed)

    def get(self, path: str, **kw: Any) -> Resp:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Resp:
        return self.request("POST", path, **kw)

    def csrf_from(self, html: str) -> str:
        m = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        return m.group(1) if m else self.cookies.get("csrftoken", "")

    def login(self, username: str, password: str, path: str = "/accounts/login/") -> Resp:
        page = self.get(path)
        token = self.csrf_from(page.text)
        return self.post(
            path,
            form={"username": username, "password": password, "csrfmiddlewaretoken": token},
        )


class FormScraper(HTMLParser):
    """Fields of the form with id=form_id as a browser would post them (no button)."""

    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id, self.inside = form_id, False
        self.fields: list[tuple[str, str]] = []
        self._select: str | None = None
        self._sel_first: str | None = None
        self._sel_chosen: str | None = None
        self._textarea: str | None = None
        self._tbuf: list[str] = []
        self._opt_value: str | None = None
        self._in_template = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form" and a.get("id") == self.form_id:
            self.inside = True
            return
        if not self.inside:
            return
        if tag == "template":
            self._in_template += 1
        if self._in_template:
            return
        name = a.get("name")
        if tag == "input" and name:
            t = (a.get("type") or "text").lower()
            if t in ("submit", "button", "image", "file", "reset"):
                return
            if t in ("checkbox", "radio"):
                if "checked" in a:
                    value = a.get("value")
                    self.fields.append((name, "on" if value is None else value))
                return
            if "disabled" in a:
                return
            self.fields.append((name, a.get("value") or ""))
        elif tag == "select" and name and "disabled" not in a:
            self._select, self._sel_first, self._sel_chosen = name, None, None
        elif tag == "option" and self._select:
            v = a.get("value")
            self._opt_value = v
            if self._sel_first is None:
                self._sel_first = v
            if "selected" in a:
                self._sel_chosen = v
        elif tag == "textarea" and name and "disabled" not in a:
            self._textarea, self._tbuf = name, []

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self._tbuf.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.inside:
            self.inside = False
        if tag == "template" and self._in_template:
            self._in_template -= 1
        if tag == "select" and self._select:
            v = self._sel_chosen if self._sel_chosen is not None else self._sel_first
            self.fields.append((self._select, v or ""))
            self._select = None
        if tag == "textarea" and self._textarea:
            text = "".join(self._tbuf)
            if text.startswith("\n"):
                text = text[1:]
            self.fields.append((self._textarea, text))
            self._textarea = None


def scrape_form(html: str, form_id: str) -> list[tuple[str, str]]:
    p = FormScraper(form_id)
    p.feed(html)
    return [(k, v) for k, v in p.fields if "__prefix__" not in k]
