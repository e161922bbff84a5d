"""Hostile-Operator probe against the dashboard in production mode (DJANGO_DEBUG=false) at
http://127.0.0.1:18080, started by `make run` with the environment of stack.py.

`make probe` (scripts/security_probe/run.sh) starts that stack, runs this and stops it. Against
a stack already running from this checkout with the same work folder:

    .venv/bin/python scripts/security_probe/probe.py [--out FILE] [--only fleet]

prints a markdown table (`| # | what was tried | answer | expected? |`) on stdout (and to FILE),
progress on stderr, and exits 1 when any row is not as expected. ``--only fleet``: the setup,
then only the Fleet boundaries rows (F1...), for a quick rerun.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import ipaddress
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from urllib.parse import quote, urlsplit

import hc
import redis
import stack

HERE = Path(__file__).resolve().parent
CLONE = stack.ROOT
PY = str(CLONE / ".venv/bin/python")
WORK = stack.work_dir()
ENV = stack.process_env(WORK)
VAR = Path(ENV["VAR_DIR"])
REPO = VAR / "model_repository"
RUN_LOG = Path(os.environ.get("PROBE_RUN_LOG") or WORK / "run.log")
HOSTPORT = f"{stack.HOST}:{stack.WEB_PORT}"
ORIGIN = stack.BASE_URL
TS = str(int(time.time()))
ROWS: list[tuple[str, str, str, str]] = []
NOTES: list[str] = []
FIG: dict[str, str] = {}


def manage_shell(code: str) -> str:
    r = subprocess.run(
        [PY, "manage.py", "shell", "-c", code],
        cwd=CLONE,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return (r.stdout + r.stderr).strip()


def clip(text: str, n: int = 160) -> str:
    text = re.sub(r"\s+", " ", str(text)).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def row(num: str, tried: str, answer: str, ok: bool | None) -> None:
    mark = "yes" if ok else ("no" if ok is not None else "n/a")
    ROWS.append((num, tried.replace("|", "\\|"), clip(answer), mark))
    print(f"  [{num}] {mark}: {clip(answer, 200)}", file=sys.stderr, flush=True)


def ans(r: hc.Resp, *keys: str) -> str:
    j = r.json()
    if isinstance(j, dict):
        parts = [f"{k}={j.get(k)!r}" for k in (keys or ("message", "field")) if k in j]
        if not parts:
            parts = [json.dumps(j)[:140]]
        return f"{r.status} " + " ".join(parts)
    text = re.sub(r"<[^>]+>", " ", r.text)
    return f"{r.status} {text.strip()[:140]}"


def json_field(r: hc.Resp, key: str):
    j = r.json()
    return j.get(key) if isinstance(j, dict) else None


def web_pid() -> int:
    return stack.web_pid(WORK)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def tiny_onnx(batch: bool = True) -> bytes:
    from onnx import TensorProto, helper

    first: str | int = "batch" if batch else 2
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [first, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [first, 3])
    graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def make_zip(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return buffer.getvalue()


def make_targz(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# What a refused code-loading config change says (repository_app/modelconfig/code_loading.py
# refusal; it names roles, not the team.upload_code permission).
CODE_REFUSAL = "load or run different code"
MODEL_PY = b"import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n    def execute(self, requests):\n        return []\n"


def create_upload(c: hc.Client, **fields) -> hc.Resp:
    return c.post("/api/v1/uploads/", json=fields)


def send_chunk(c: hc.Client, upload_id: str, data: bytes, offset: int, headers=None) -> hc.Resp:
    h = {"Upload-Offset": str(offset), "Content-Type": "application/octet-stream"}
    h.update(headers or {})
    return c.request("PATCH", f"/api/v1/uploads/{upload_id}/", body=data, headers=h)


def full_upload(c: hc.Client, data: bytes, **fields) -> tuple[hc.Resp, hc.Resp | None]:
    created = create_upload(c, size=len(data), sha256=hashlib.sha256(data).hexdigest(), **fields)
    if created.status != 201:
        return created, None
    uid = created.json()["id"]
    for off in range(0, len(data), 64 * 1024):
        r = send_chunk(c, uid, data[off : off + 64 * 1024], off)
        if r.status != 200:
            return created, r
    return created, c.post(f"/api/v1/uploads/{uid}/complete?wait=1")


def put_config(c: hc.Client, name: str, text: str) -> hc.Resp:
    cur = c.get(f"/api/v1/models/{quote(name, safe='')}/config")
    sha = (cur.json() or {}).get("sha256", "x")
    return c.request(
        "PUT",
        f"/api/v1/models/{quote(name, safe='')}/config",
        json={"text": text},
        headers={"If-Match": f'"{sha}"'},
    )


def raw_big(
    method: str, path: str, total: int, send_max: int, headers: dict[str, str], cookie: str = ""
) -> tuple[str, int, float]:
    """Declare `total` bytes, stream up to `send_max`, stop as soon as the server answers.
    Returns (status line + excerpt, bytes sent, seconds)."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {HOSTPORT}\r\n"
        f"Content-Length: {total}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + (f"Cookie: {cookie}\r\n" if cookie else "")
        + "\r\n"
    ).encode()
    block = b"a" * (1024 * 1024)
    sent = 0
    t0 = time.monotonic()
    reply = b""
    with socket.create_connection((stack.HOST, stack.WEB_PORT), timeout=60) as sock:
        sock.sendall(head)
        try:
            while sent < send_max:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable:
                    break
                sock.sendall(block)
                sent += len(block)
        except OSError as exc:
            NOTES.append(f"raw_big {path}: send stopped after {sent} bytes: {exc}")
        sock.settimeout(30)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                reply += data
                if b"\r\n\r\n" in reply and len(reply) > 600:
                    break
        except OSError as exc:
            if not reply:
                reply = f"(no reply: {exc})".encode()
    elapsed = time.monotonic() - t0
    text = reply.decode("utf-8", "replace")
    status = text.split("\r\n", 1)[0]
    body = text.split("\r\n\r\n", 1)[1] if "\r\n\r\n" in text else ""
    body = re.sub(r"<[^>]+>", " ", body)
    return f"{status} {body.strip()[:110]}", sent, elapsed


def ws_handshake(path: str, cookie: str, origin: str, host: str = HOSTPORT) -> str:
    key = base64.b64encode(os.urandom(16)).decode()
    req = (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {origin}\r\n"
        f"Cookie: {cookie}\r\n\r\n"
    ).encode()
    with socket.create_connection((stack.HOST, stack.WEB_PORT), timeout=10) as sock:
        sock.sendall(req)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            status = data.split(b"\r\n", 1)[0].decode()
            extra = ""
            if status.startswith("HTTP/1.1 101"):
                sock.settimeout(3)
                rest = data.split(b"\r\n\r\n", 1)[1]
                try:
                    while len(rest) < 2:
                        rest += sock.recv(4096)
                    # first frame: opcode and (for a close) the code
                    opcode = rest[0] & 0x0F
                    if opcode == 8 and len(rest) >= 4:
                        extra = f"; first frame: close {int.from_bytes(rest[2:4], 'big')}"
                    else:
                        extra = f"; first frame opcode {opcode} ({rest[2:60]!r})"
                except OSError:
                    extra = "; no frame within 3 s"
            else:
                body = data.split(b"\r\n\r\n", 1)
                extra = " " + (body[1][:60].decode("utf-8", "replace") if len(body) > 1 else "")
            return status + extra
        except OSError as exc:
            return f"(error {exc}) {data[:80]!r}"


# A search the API accepts (items 3, 15 and F7/F11 change one field of it).
SEARCH_GOOD = {
    "model": "busy_compute",
    "mode": "grid",
    "kind": "KIND_CPU",
    "counts": "1:2",
    "batching_on": True,
    "delays": "200",
    "preferred": "none",
    "concurrency_range": "2",
    "measurement_interval": 300,
    "max_trials": 3,
    "stability_percentage": 100,
    "percentile": "95",
    "latency_budget": 50,
    "objective": "max_throughput",
}


def wait_sweep(c: hc.Client, pk: int, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    body: dict = {}
    while time.monotonic() < deadline:
        body = c.get(f"/api/v1/sweeps/{pk}/").json() or {}
        if body.get("state") in ("succeeded", "failed", "cancelled", "interrupted"):
            return body
        time.sleep(2)
    return body


# ---------------------------------------------------------------------------------------------
# Fleet boundaries (#27): rows F1... Each is a request against the running stack; the names
# below are those setup_users.py registers and narrows.
HIDDEN, HIDDEN_LABEL = "hidden-probe", "probehide=zz27"


def web_rss_total() -> int:
    """RSS (KiB) of the web front and its Daphnes together: a request lands on any one."""
    return sum(rss_kib(p) for p in stack.web_pids(WORK))


def names_hidden(text: str) -> bool:
    """Whether ``text`` names the hidden server or its label (key or value)."""
    return any(w in text for w in (HIDDEN, *HIDDEN_LABEL.split("=")))


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "manage.py", *args], cwd=CLONE, env=ENV, capture_output=True, text=True, timeout=300
    )


def tail_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(nothing)"


def listening(port: int) -> list[str]:
    """Addresses with a TCP socket listening on ``port`` (/proc/net/tcp and tcp6)."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            host, _, hexport = local.partition(":")
            if state != "0A" or int(hexport, 16) != port or len(host) != width:
                continue
            raw = bytes.fromhex(host)
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(str(ipaddress.ip_address(raw)))
    return sorted(set(found))


def fleet_boundaries(
    tokens: dict[str, str], pw: dict[str, str], sessions: dict[str, hc.Client], search_good: dict
) -> None:
    otto, admin = sessions["otto"], sessions["admin"]
    otto_api = hc.Client(token=tokens["otto"])
    vera_api = hc.Client(token=tokens["vera"])
    admin_api = hc.Client(token=tokens["admin"])
    nina_api = hc.Client(token=tokens["nina"])
    nadia_api = hc.Client(token=tokens["nadia"])
    nina = hc.Client()
    r = nina.login("nina", pw["nina"])
    NOTES.append(f"setup: nina (Operator, narrowed to none on {HIDDEN}) signs in: {r.status}")

    # ---- F1. a JSON bomb: 200,000 empty objects --------------------------------------------
    bomb = '{"junk": [' + ", ".join(["{}"] * 200_000) + "]}"
    json_headers = {"Content-Type": "application/json"}
    rss0 = web_rss_total()
    r = vera_api.post("/api/v1/rollouts/", body=bomb, headers=json_headers)
    row(
        "F1",
        f"Viewer vera: POST /api/v1/rollouts/ {{junk: [{{}} × 200,000]}} ({len(bomb):,} bytes)",
        ans(r) + f" ({r.elapsed * 1000:.0f} ms)",
        r.status == 403 and "cannot load or unload" in r.text,
    )
    answers = [
        otto_api.post("/api/v1/rollouts/", body=bomb, headers=json_headers) for _ in range(3)
    ]
    time.sleep(1)
    rss1 = web_rss_total()
    r = answers[-1]
    row(
        "F1'",
        f"Operator otto: the same body, 3 times; RSS of the web front and its Daphnes "
        f"({len(stack.web_pids(WORK))} processes) before/after",
        f"{[a.status for a in answers]} {ans(r)} ({r.elapsed * 1000:.0f} ms); "
        f"RSS {rss0} → {rss1} KiB (Δ {rss1 - rss0:+d})",
        all(a.status == 400 for a in answers) and "100,000" in r.text and rss1 - rss0 < 20 * 1024,
    )
    FIG["F1: web RSS before/after the JSON bombs (KiB, front + Daphnes)"] = f"{rss0} → {rss1}"

    # ---- F2. a look-alike username shares the account's lockout ------------------------------
    most = int(
        tail_line(
            manage_shell("from django.conf import settings; print(settings.LOGIN_MAX_FAILURES)")
        )
    )
    att = hc.Client(src="127.0.0.6")
    failures = [att.login("lockme", f"wrong-{i}").status for i in range(most)]
    lookalike = "\uff4c" + "ockme"  # FULLWIDTH LATIN SMALL LETTER L: NFKC makes it "l"
    r1 = hc.Client(src="127.0.0.7").login(lookalike, pw["lockme"])
    r2 = hc.Client(src="127.0.0.8").login(lookalike, pw["lockme"], path="/admin/login/")
    r3 = hc.Client(src="127.0.0.7").login("LockMe", pw["lockme"])
    m = re.search(r"Too many failed logins for this account[^<]*", r1.text)
    row(
        "F2",
        f"{most} wrong passwords for lockme (127.0.0.6; LOGIN_MAX_FAILURES {most}), then the right "
        f"one as `{lookalike}` on /accounts/login/ and /admin/login/, and as `LockMe` "
        "(other addresses)",
        f"failures {failures}; look-alike {r1.status} ({m.group(0).strip() if m else r1.text[:60]}), "
        f"admin {r2.status}, case variant {r3.status}",
        failures == [200] * most
        and r1.status == 429
        and m is not None
        and r2.status == 429
        and r3.status == 429,
    )

    # ---- F3. a server narrowed to none does not exist for the user ---------------------------
    r = admin_api.post(
        "/api/v1/rollouts/?wait=1",
        json={"action": "load", "model": "probe27_absent", "servers": ["default", HIDDEN]},
    )
    rollout_pk = json_field(r, "id")
    seen = admin_api.get("/api/v1/audit/?action=rollout&limit=1000")
    admin_rows = [e for e in (seen.json() or {}).get("results", []) if HIDDEN in json.dumps(e)]
    row(
        "F3",
        f"Admin: rollout (API) of probe27_absent on default + {HIDDEN}; the Admin's audit API",
        f"{ans(r, 'id', 'state', 'summary')}; audit rows naming {HIDDEN}: {len(admin_rows)} "
        f"(server column {[e.get('server') for e in admin_rows if e.get('action') == 'rollout']})",
        r.status in (200, 201)
        and any(e.get("action") == "rollout" and not e.get("server") for e in admin_rows),
    )
    for url in (
        "/api/v1/servers/",
        "/servers/",
        "/fleet/",
        "/",
        "/rollouts/new?model=add_sub",
        "/rollouts/",
        "/api/v1/rollouts/",
        "/audit/",
        "/audit.csv",
        "/api/v1/audit/?limit=1000",
    ):
        client = nina_api if url.startswith("/api/") else nina
        r = client.get(url)
        leaks = [w for w in (HIDDEN, *HIDDEN_LABEL.split("=")) if w in r.text]
        # The same page for the Admin names it: so its absence for nina is the narrowing's.
        control = (admin_api if url.startswith("/api/") else admin).get(url)
        row(
            "F3'",
            f"nina (narrowed to none on {HIDDEN}) GET {url}",
            f"{r.status} {len(r.body):,} bytes; names it: {leaks or 'no'} "
            f"(the Admin's: {control.status}, names it: {names_hidden(control.text)})",
            r.status == 200 and not leaks and names_hidden(control.text),
        )
    unknown = "nothere-27"
    for url in (
        f"/api/v1/servers/{HIDDEN}/",
        f"/servers/{HIDDEN}/edit/",
        f"/models/?server={HIDDEN}",
        f"/api/v1/models/?server={HIDDEN}",
        *([f"/api/v1/rollouts/{rollout_pk}/", f"/rollouts/{rollout_pk}/"] if rollout_pk else []),
    ):
        client = nina_api if url.startswith("/api/") else nina
        r = client.get(url)
        other = client.get(url.replace(HIDDEN, unknown)) if HIDDEN in url else None
        said = ans(r, "message", "detail")
        same = (
            other is not None and ans(other, "message", "detail").replace(unknown, HIDDEN) == said
        )
        row(
            "F3''",
            f"nina GET {url}" + (f" (and the same for unknown `{unknown}`)" if other else ""),
            said + ("" if other is None else f" / {other.status}" + (", the same" if same else "")),
            r.status == 404 and (other is None or same),
        )

    # ---- F4. one address under another name ------------------------------------------------
    for alias in ("localhost:18001", "[::1]:18001", "0.0.0.0:18001", "LOCALHOST:18001"):
        r = admin_api.post(
            "/api/v1/servers/",
            json={
                "name": "alias-probe",
                "grpc_url": alias,
                "http_url": "127.0.0.1:7",
                "metrics_url": "http://127.0.0.1:8/metrics",
            },
        )
        row(
            "F4",
            f"Admin: register `alias-probe` at gRPC {alias} (default is 127.0.0.1:18001)",
            ans(r),
            r.status == 400
            and json_field(r, "field") == "grpc_url"
            and "already" in r.text
            and admin_api.get("/api/v1/servers/alias-probe/").status == 404,
        )
    r = nadia_api.post(
        "/api/v1/servers/",
        json={
            "name": "alias2-probe",
            "grpc_url": "localhost:1",
            "http_url": "127.0.0.1:9",
            "metrics_url": "http://127.0.0.1:10/metrics",
        },
    )
    row(
        "F4'",
        f"Admin nadia (narrowed to none on {HIDDEN}, gRPC 127.0.0.1:1): register localhost:1",
        ans(r),
        r.status == 400
        and json_field(r, "field") == "grpc_url"
        and "already registered" in r.text
        and not names_hidden(r.text),
    )

    # ---- F5. a TensorFlow SavedModel is code -------------------------------------------------
    saved = make_zip(
        [
            ("model.savedmodel/saved_model.pb", b"\x08\x01"),
            ("model.savedmodel/variables/variables.index", b"\0"),
        ]
    )
    name = f"tfsm_{TS}"
    created, done = full_upload(
        otto,
        saved,
        model=name,
        new_model=True,
        backend="tensorflow_savedmodel",
        filename="model.zip",
    )
    last = done or created
    row(
        "F5",
        "Operator otto: new model, TensorFlow SavedModel archive (model.savedmodel/saved_model.pb)",
        f"create {created.status}; " + ans(last),
        last.status == 403 and "code" in last.text and not (REPO / name).exists(),
    )

    # ---- F6. the command line checks the user it acts as -------------------------------------
    res = manage("perf_sweep", "add_sub", "--as-user", "vera")
    row(
        "F6",
        "`manage.py perf_sweep add_sub --as-user vera` (a Viewer)",
        f"exit {res.returncode}: {tail_line(res.stderr or res.stdout)}",
        res.returncode != 0 and "not allowed" in res.stderr,
    )
    res = manage("perf_sweep", "add_sub", "--server", HIDDEN, "--as-user", "nina")
    row(
        "F6'",
        f"`manage.py perf_sweep add_sub --server {HIDDEN} --as-user nina` (narrowed to none there)",
        f"exit {res.returncode}: {tail_line(res.stderr or res.stdout)}",
        res.returncode != 0 and "no Triton server named" in res.stderr,
    )

    # ---- F7. numbers a page or an API cannot hold --------------------------------------------
    r = otto.get("/sweeps/compare/?ids=%C2%B2&ids=1")
    row(
        "F7",
        "GET /sweeps/compare/?ids=²&ids=1",
        f"{r.status} → {r.header('Location')}",
        r.status in (302, 400, 404),
    )
    r = admin_api.get(f"/api/v1/audit/?limit={10**30}")
    page = r.json() if isinstance(r.json(), dict) else {}
    got = page.get("results")
    row(
        "F7'",
        "GET /api/v1/audit/?limit=10^30 (Admin)",
        f"{r.status}, {len(got)} of {page.get('count')} rows"
        if r.status == 200 and got is not None
        else ans(r),
        (r.status == 200 and got is not None and len(got) <= 1000) or r.status == 400,
    )
    for label, value in (("5,000 digits", "1" * 5000), ("1:<5,000 digits>", "1:" + "9" * 5000)):
        r = otto_api.post("/api/v1/sweeps/", json={"model": "add_sub", "sequence_id_range": value})
        row(
            "F7''",
            f"sweep API sequence_id_range {label}",
            clip(ans(r), 140),
            r.status == 400 and json_field(r, "field") == "sequence_id_range",
        )
    r = otto_api.post("/api/v1/searches/", json={**search_good, "mode": "quick", "max_runs": 2**63})
    row(
        "F7'''",
        "search API max_runs 2^63",
        ans(r),
        r.status == 400 and json_field(r, "field") == "max_runs",
    )

    # ---- F8 + F9. a server's addresses and repository ----------------------------------------
    r = admin_api.post("/api/v1/servers/", json={"name": "unix-probe", "grpc_url": "unix:/tmp/x:1"})
    row(
        "F8",
        "Admin: register `unix-probe` at gRPC unix:/tmp/x:1",
        ans(r),
        r.status == 400
        and "grpc_url" in ((r.json() or {}).get("errors") or {json_field(r, "field"): 1})
        and admin_api.get("/api/v1/servers/unix-probe/").status == 404,
    )
    link = VAR / "etc_link"
    if not link.is_symlink():
        os.symlink("/etc", link)
    for num, repository in (("F9", "/etc"), ("F9'", str(link))):
        r = admin_api.post(
            "/api/v1/servers/",
            json={
                "name": "etc-probe",
                "grpc_url": "127.0.0.1:5",
                "http_url": "127.0.0.1:6",
                "metrics_url": "http://127.0.0.1:11/metrics",
                "repository": repository,
            },
        )
        row(
            num,
            f"Admin: register `etc-probe` with repository {repository}"
            + (" (a link to /etc inside VAR_DIR)" if repository != "/etc" else ""),
            ans(r),
            r.status == 400
            and json_field(r, "field") == "repository"
            and "MODEL_REPOSITORY_ROOTS" in r.text
            and admin_api.get("/api/v1/servers/etc-probe/").status == 404,
        )

    # ---- F10. an archive that expands past the ratio -----------------------------------------
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with archive.open("model.xml", "w", force_zip64=True) as member:
            zeros = bytes(1024 * 1024)
            for _ in range(101):
                member.write(zeros)
        archive.writestr("model.bin", b"\0\1\2\3")
    blob = buffer.getvalue()
    name = f"ratio_{TS}"
    created, done = full_upload(
        otto, blob, model=name, new_model=True, backend="openvino", filename="model.zip"
    )
    last = done or created
    row(
        "F10",
        f"Operator otto: new openvino model, zip of {len(blob):,} bytes holding 101 MiB of zeros",
        f"create {created.status}; " + ans(last),
        last.status in (400, 413, 422)
        and "UPLOAD_MAX_ARCHIVE_RATIO" in last.text
        and not (REPO / name).exists(),
    )

    # ---- F11. small items ------------------------------------------------------------------
    r = otto.get("/models/inj%24(x)/benchmark/")
    row("F11", "GET /models/inj%24(x)/benchmark/", f"{r.status}", r.status == 404)
    r = nina_api.post("/api/v1/searches/", json={**search_good, "server": HIDDEN})
    other = nina_api.post("/api/v1/searches/", json={**search_good, "server": unknown})
    row(
        "F11'",
        f"nina: POST /api/v1/searches/ with server {HIDDEN} (and unknown `{unknown}`)",
        f"{ans(r)} / {other.status}",
        r.status == 404 and other.status == 404 and other.text.replace(unknown, HIDDEN) == r.text,
    )
    formula = " =1+1"
    r = hc.Client(src="127.0.0.9").login(formula, "guess")
    csvr = admin.get("/audit.csv")
    line = next((ln for ln in csvr.text.splitlines() if "=1+1" in ln), "(no row)")
    row(
        "F11''",
        f"failed login as `{formula}` (a leading blank), then /audit.csv (Admin)",
        f"login {r.status}; csv {csvr.status}: {line}",
        csvr.status == 200 and (",' =1+1," in line or ',"\' =1+1",' in line),
    )
    # Just under the 1 MiB a config may hold, so the limit on messages is what answers.
    params = "".join(
        f'parameters{{key:"p{i:05d}" value:{{string_value:"v"}}}}\n' for i in range(20_000)
    )
    text = (REPO / "add_sub" / "config.pbtxt").read_text() + params
    r = otto.post(
        "/models/add_sub/config/validate",
        body=text,
        headers={"Content-Type": "text/plain; charset=utf-8"},
    )
    findings = (r.json() or {}).get("findings", []) if isinstance(r.json(), dict) else []
    rules = sorted({f.get("rule") for f in findings})
    row(
        "F11'''",
        f"editor check POST /models/add_sub/config/validate, {len(text):,} bytes, 20,000 parameters",
        f"{r.status} rules {rules} ({r.elapsed * 1000:.0f} ms)",
        r.status == 200 and "parse.too-many" in rules,
    )

    # ---- F12. where the stack's Redis listens ------------------------------------------------
    url = ENV["REDIS_URL"]
    parts = urlsplit(url)
    port = parts.port or 6379
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        pong = f"PING {client.ping()}"
    except redis.RedisError as exc:
        pong = f"PING failed: {exc}"
    try:
        bind = f"CONFIG GET bind {client.config_get('bind').get('bind')!r}"
    except redis.RedisError as exc:
        bind = f"CONFIG GET bind refused: {exc}"
    private = [c for _, c in stack.stack_processes(WORK) if "redis-server" in c]
    addresses = listening(port)
    outside = [a for a in addresses if not ipaddress.ip_address(a).is_loopback]
    row(
        "F12",
        f"the stack's Redis ({parts.hostname}:{port}): ping from the probe, its bind, "
        "the addresses listening on its port",
        f"{pong}; {bind}; listening on {addresses}; "
        + (f"the stack's own: {private[0][:80]}" if private else "not started by the stack"),
        pong == "PING True" and bool(addresses) and not outside,
    )


# ---------------------------------------------------------------------------------------------
def main(only: str = "") -> None:
    print("setup: users, tokens, cleared login limits", file=sys.stderr)
    with (HERE / "setup_users.py").open() as script:
        out = subprocess.run(
            [PY, "manage.py", "shell"],
            stdin=script,
            cwd=CLONE,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
        )
    print("  " + out.stdout.strip().replace("\n", " / "), file=sys.stderr)
    if out.returncode:
        raise SystemExit(f"setup_users.py failed: {out.stderr[-2000:]}")
    info = json.loads((WORK / "tokens.json").read_text())
    tokens, ids = info["tokens"], info["ids"]
    admin_pw = (VAR / "admin-password.txt").read_text().strip()
    pw = {n: f"pw-{n}-Probe-2024" for n in [*tokens, "root"]}

    sessions: dict[str, hc.Client] = {}
    for name in ("otto", "olga", "vera", "pat", "dora", "oleg", "admin"):
        c = hc.Client()
        r = c.login(name, admin_pw if name == "admin" else pw[name])
        assert r.status == 302, (name, r.status, r.text[:300])
        sessions[name] = c
        time.sleep(0.2)
    otto, olga, vera, admin = (
        sessions["otto"],
        sessions["olga"],
        sessions["vera"],
        sessions["admin"],
    )
    otto_api = hc.Client(token=tokens["otto"])
    if only == "fleet":  # a quick rerun of the section against a stack already running
        fleet_boundaries(tokens, pw, sessions, SEARCH_GOOD)
        return
    pid = web_pid()
    FIG["web pid"] = str(pid)
    FIG["RSS at start (KiB)"] = str(web_rss_total())

    pwned = Path("/tmp/pwned")
    if pwned.exists():
        NOTES.append("/tmp/pwned existed BEFORE the probe started (removed)")
        pwned.unlink()

    # ---- 1. shell characters in a model name ------------------------------------------------
    bad = "inj$(touch /tmp/pwned)"
    enc = quote(bad, safe="")
    data = tiny_onnx()
    r = create_upload(
        otto,
        model=bad,
        new_model=True,
        backend="onnxruntime",
        filename="model.onnx",
        size=len(data),
    )
    row(
        "1a",
        f"upload API: new model `{bad}` (Operator otto)",
        ans(r),
        r.status == 400 and json_field(r, "field") == "model",
    )
    r = create_upload(
        sessions["admin"],
        model=bad,
        new_model=True,
        backend="python",
        filename="model.py",
        size=len(MODEL_PY),
    )
    row(
        "1a'",
        f"upload API: new python model `{bad}` as **admin**",
        ans(r),
        r.status == 400 and json_field(r, "field") == "model",
    )
    r = otto.request(
        "PUT",
        f"/api/v1/models/{enc}/config",
        json={"text": f'name: "{bad}"\nbackend: "python"\n'},
        headers={"If-Match": '"x"'},
    )
    row("1b", "API config PUT /api/v1/models/inj%24(…)/config", ans(r), r.status in (400, 404))
    r = otto.post(f"/api/v1/models/{enc}/load")
    row("1b'", "API load of that name", ans(r), r.status in (400, 404, 409))
    r = otto.post("/api/v1/sweeps/", json={"model": bad, "concurrency_range": "1"})
    row("1b''", "sweep API with that model name", ans(r), r.status in (400, 404))
    for other in ("inj$(id)", "a;b", "x`id`"):
        e2 = quote(other, safe="")
        r = otto.request(
            "PUT",
            f"/api/v1/models/{e2}/config",
            json={"text": f'name: "{other}"\nbackend: "python"\n'},
            headers={"If-Match": '"x"'},
        )
        r2 = otto.post(f"/api/v1/models/{e2}/load")
        r3 = otto.post("/api/v1/searches/", json={"model": other})
        row(
            "1b*",
            f"`{other}`: API config PUT / API load / search API",
            f"{ans(r)} / {ans(r2)} / {ans(r3)}",
            r.status in (400, 404) and r2.status in (400, 404, 409) and r3.status in (400, 404),
        )
    r = otto.get(f"/models/{enc}/config/")
    row("1b'''", "editor page GET /models/inj%24(…)/config/", f"{r.status}", r.status == 404)

    # an existing data-only model, created by otto
    plain = f"plain_{TS}"
    created, done = full_upload(
        otto, data, model=plain, new_model=True, backend="onnxruntime", filename="model.onnx"
    )
    ok_plain = done is not None and done.status == 201
    NOTES.append(
        f"setup: Operator otto created data-only model {plain}: "
        f"{created.status} / {done.status if done else '-'}"
    )
    cfg = (REPO / plain / "config.pbtxt").read_text() if ok_plain else ""
    switched = re.sub(r'backend: "onnxruntime"', 'backend: "python"', cfg)
    if switched == cfg:
        switched = re.sub(r'platform: "[^"]+"', 'backend: "python"', cfg)
    before = cfg
    r = put_config(otto, plain, switched)
    after = (REPO / plain / "config.pbtxt").read_text() if ok_plain else ""
    row(
        "1c",
        f"Operator: API PUT `{plain}` config backend onnxruntime→python",
        ans(r),
        r.status == 403 and CODE_REFUSAL in r.text and before == after,
    )
    page = otto.get(f"/models/{plain}/config/")
    base_sha = re.search(r'name="base_sha" value="([0-9a-f]+)"', page.text)
    r = otto.post(
        f"/models/{plain}/config/",
        form={
            "mode": "text",
            "action": "save",
            "text": switched,
            "base_sha": base_sha.group(1) if base_sha else "",
            "csrfmiddlewaretoken": otto.csrf_from(page.text),
        },
    )
    m = re.search(r"[^<>]*" + CODE_REFUSAL + r"[^<>]*", r.text)
    row(
        "1c'",
        "Operator: editor page text-mode save of the same change",
        f"{r.status} {m.group(0).strip() if m else r.text[:100]}",
        r.status == 403
        and CODE_REFUSAL in r.text
        and (REPO / plain / "config.pbtxt").read_text() == before,
    )

    planted = REPO / "bad name$(x)"
    if planted.exists():
        shutil.rmtree(planted)
    (planted / "1").mkdir(parents=True)
    (planted / "config.pbtxt").write_text('backend: "python"\n')
    (planted / "1" / "model.py").write_bytes(MODEL_PY)
    time.sleep(1.5)
    r = vera.get("/models/")
    html = r.text
    idx = html.find("bad name$(x)")
    snippet = (
        re.sub(r"<[^>]+>", " ", html[max(0, idx - 50) : idx + 250])
        if idx >= 0
        else "(name not on page)"
    )
    row(
        "1d",
        "folder `bad name$(x)` made on disk: Models page (Viewer)",
        f"{r.status} {snippet.strip()}",
        "unsafe folder name" in html and 'href="/models/bad' not in html,
    )
    code = (
        "import django,os; os.environ.setdefault('DJANGO_SETTINGS_MODULE','dashboard.settings'); "
        "django.setup(); from pathlib import Path; from devstack.run import models_to_load; "
        f"print(models_to_load(Path('{REPO}')))"
    )
    res = subprocess.run([PY, "-c", code], cwd=CLONE, env=ENV, capture_output=True, text=True)
    text = (res.stdout or res.stderr).strip()
    row(
        "1d'",
        "`python -c` devstack.run.models_to_load(repo)",
        text,
        "bad name$(x)" in text.split("[", 1)[-1] and "'bad name$(x)'" not in text.split("[", 1)[0],
    )
    r = otto.post(f"/api/v1/models/{quote('bad name$(x)', safe='')}/load")
    row("1d''", "Operator: API load of `bad name$(x)`", ans(r), r.status in (400, 404, 409))

    # ---- 2. code-loading parameters and code in archives ------------------------------------
    add_sub = (REPO / "add_sub" / "config.pbtxt").read_text()
    env_path = (
        'parameters [\n  { key: "EXECUTION_ENV_PATH" value: { string_value: '
        '"$$TRITON_MODEL_DIRECTORY/../envm/1" } }\n]\n'
    )
    text = add_sub.rstrip() + "\n" + env_path
    r = put_config(otto, "add_sub", text)
    row(
        "2a",
        "Operator: API PUT add_sub config + parameters EXECUTION_ENV_PATH",
        ans(r),
        r.status == 403 and (REPO / "add_sub" / "config.pbtxt").read_text() == add_sub,
    )
    page = otto.get("/models/add_sub/config/")
    base_sha = re.search(r'name="base_sha" value="([0-9a-f]+)"', page.text)
    r = otto.post(
        "/models/add_sub/config/",
        form={
            "mode": "text",
            "action": "save",
            "text": text,
            "base_sha": base_sha.group(1) if base_sha else "",
            "csrfmiddlewaretoken": otto.csrf_from(page.text),
        },
    )
    row(
        "2a'",
        "Operator: same through the editor page (text mode)",
        f"{r.status} "
        + ("names EXECUTION_ENV_PATH" if "EXECUTION_ENV_PATH" in r.text else r.text[:100]),
        r.status == 403 and (REPO / "add_sub" / "config.pbtxt").read_text() == add_sub,
    )

    ov_files = [("model.xml", b"<?xml version='1.0'?><net/>"), ("model.bin", b"\0\1\2\3")]
    for num, label, blob, fname in (
        (
            "2b",
            "zip: model.xml+model.bin+`bin/activate` (no suffix)",
            make_zip([*ov_files, ("bin/activate", b"touch /tmp/pwned\n")]),
            "model.zip",
        ),
        (
            "2b'",
            "tar.gz: model.xml+model.bin+`bin/activate`",
            make_targz([*ov_files, ("bin/activate", b"touch /tmp/pwned\n")]),
            "model.tar.gz",
        ),
        (
            "2c",
            "zip: model files + `sub/libevil.so` (an .so in a subfolder)",
            make_zip([*ov_files, ("sub/libevil.so", b"\x7fELF\2\1\1")]),
            "model.zip",
        ),
        (
            "2c'",
            "tar.gz: model files + `deep/er/x.so.1`",
            make_targz([*ov_files, ("deep/er/x.so.1", b"not really elf")]),
            "model.tar.gz",
        ),
    ):
        name = f"arch{num.replace(chr(39), 'p')}_{TS}"
        created, done = full_upload(
            otto, blob, model=name, new_model=True, backend="openvino", filename=fname
        )
        last = done or created
        row(
            num,
            f"Operator: new model (openvino) archive {label}",
            f"create {created.status}; " + ans(last),
            last.status == 403 and "code" in last.text and not (REPO / name).exists(),
        )

    # ---- 3. sweep and search bounds: time and memory -----------------------------------------
    rss0 = web_rss_total()
    times = []
    for rng in ("1:2:1e-300", "1:inf:1", "1:nan:1"):
        r = otto_api.post("/api/v1/sweeps/", json={"model": "add_sub", "concurrency_range": rng})
        times.append(r.elapsed)
        row(
            "3",
            f"POST /api/v1/sweeps/ concurrency_range `{rng}`",
            ans(r) + f" ({r.elapsed * 1000:.0f} ms)",
            r.status == 400 and json_field(r, "field") == "concurrency_range" and r.elapsed < 2,
        )
    search_good = SEARCH_GOOD
    r = otto_api.post(
        "/api/v1/searches/",
        json={**search_good, "counts": "1:64", "max_batch_sizes": "1:300", "delays": "0:300"},
    )
    times.append(r.elapsed)
    row(
        "3'",
        "POST /api/v1/searches/ counts 1:64 × max_batch_sizes 1:300 × delays 0:300",
        ans(r) + f" ({r.elapsed * 1000:.0f} ms)",
        r.status == 400 and r.elapsed < 2,
    )
    page = otto.get("/models/busy_compute/find-best-config/")
    fields = dict(hc.scrape_form(page.text, "search-form")) if page.status == 200 else {}
    if not fields:
        m = re.search(r'<form[^>]*id="([^"]+)"[^>]*method="post"', page.text) or re.search(
            r'<form[^>]*method="post"[^>]*id="([^"]+)"', page.text
        )
        if m:
            fields = dict(hc.scrape_form(page.text, m.group(1)))
    fields.update(
        {
            "counts": "1:64",
            "max_batch_sizes": "1:300",
            "delays": "0:300",
            "batching_on": "on",
            "mode": "grid",
            "csrfmiddlewaretoken": otto.csrf_from(page.text),
        }
    )
    r = otto.post("/models/busy_compute/find-best-config/", form=fields)
    times.append(r.elapsed)
    m = re.search(r"[^<>]*too many[^<>]*", r.text)
    row(
        "3''",
        "search **page** POST, same 64×300×300 grid",
        f"{r.status} {m.group(0).strip() if m else r.text[:100]} ({r.elapsed * 1000:.0f} ms)",
        r.status in (200, 400, 422) and m is not None and r.elapsed < 2,
    )
    rss1 = web_rss_total()
    FIG["item 3: RSS before/after (KiB)"] = f"{rss0} → {rss1} (Δ {rss1 - rss0:+d})"
    FIG["item 3: request times (ms)"] = ", ".join(f"{t * 1000:.0f}" for t in times)

    # ---- 7. a 512 MiB declared body --------------------------------------------------------
    rss0 = web_rss_total()
    status, sent, secs = raw_big(
        "POST",
        "/accounts/login/",
        536870912,
        8 * 1024 * 1024,
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    time.sleep(1)
    rss1 = web_rss_total()
    row(
        "7",
        "POST /accounts/login/ Content-Length 536870912, stream ≤ 8 MiB",
        f"{status} (sent {sent // 1048576} MiB, {secs * 1000:.0f} ms)",
        " 413 " in status + " ",
    )
    status2, sent2, secs2 = raw_big(
        "POST",
        "/accounts/login/",
        536870912,
        536870912,
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    time.sleep(1)
    rss2 = web_rss_total()
    row(
        "7'",
        "same, trying to stream all 512 MiB",
        f"{status2} (server stopped it after {sent2 // 1048576} MiB sent, {secs2 * 1000:.0f} ms)",
        " 413 " in status2 + " ",
    )
    FIG["item 7: RSS before/after (KiB)"] = f"{rss0} → {rss1} → {rss2} (Δ {rss2 - rss0:+d})"

    # ---- 8. healthz ------------------------------------------------------------------------
    r = hc.Client().get("/healthz")
    leaks = [
        w
        for w in (
            "127.0.0.1",
            "redis://",
            "version",
            str(stack.TRITON_GRPC_PORT),
            "sqlite",
            "/tmp",
            "vm",
        )
        if w in r.text
    ]
    row("8", "GET /healthz anonymous", f"{r.status} {r.text}", not leaks)

    # ---- 9. permissions --------------------------------------------------------------------
    modes = (
        subprocess.run(
            ["stat", "-c", "%a %n", str(VAR), str(VAR / "db.sqlite3")],
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .replace("\n", "; ")
    )
    row(
        "9",
        "stat -c %a VAR_DIR and VAR_DIR/db.sqlite3",
        modes,
        modes.startswith("700 ") and "; 600 " in modes,
    )

    # ---- 10. links out of the repository ----------------------------------------------------
    linked = REPO / "linked"
    if linked.exists() or linked.is_symlink():
        if linked.is_symlink():
            linked.unlink()
        else:
            shutil.rmtree(linked)
    (linked / "1").mkdir(parents=True)
    os.symlink("/etc/passwd", linked / "config.pbtxt")
    for url in (
        "/models/linked/config/",
        "/api/v1/models/linked/config",
        "/models/linked/config/history/",
        "/models/linked/",
    ):
        r = vera.get(url)
        row(
            "10a",
            f"Viewer GET {url} (config.pbtxt → /etc/passwd)",
            ans(r),
            "root:x:" not in r.text
            and r.status in (403, 404, 200 if url == "/models/linked/" else 404),
        )
    outside = WORK / f"outside_{TS}"
    (outside / "1").mkdir(parents=True)
    (outside / "config.pbtxt").write_text(
        'name: "linkdir"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
    )
    linkdir = REPO / "linkdir"
    if linkdir.is_symlink():
        linkdir.unlink()
    os.symlink(outside, linkdir)
    r = create_upload(otto, model="linkdir", filename="model.onnx", size=len(data))
    row(
        "10b",
        "Operator: upload a version into `linkdir` (symlink → PROBE_WORK/outside_*)",
        ans(r),
        r.status == 409
        and sorted(p.name for p in outside.iterdir()) == ["1", "config.pbtxt"]
        and not any((outside / "1").iterdir()),
    )

    # ---- 13 + 15. a real short sweep, another Operator's cancel/resume, downloads ------------
    r = otto_api.post(
        "/api/v1/sweeps/",
        json={
            "model": "add_sub",
            "concurrency_range": "1:1:1",
            "measurement_interval": 500,
            "max_trials": 3,
            "stability_percentage": 50,
        },
    )
    sweep_pk = json_field(r, "id")
    NOTES.append(f"setup: otto's sweep on add_sub 1:1: {r.status} id={sweep_pk}")
    if sweep_pk:
        r = olga.post(f"/api/v1/sweeps/{sweep_pk}/cancel")
        row(
            "15a",
            "Operator olga: API cancel of otto's queued/running sweep",
            ans(r),
            r.status == 403,
        )
        r = olga.post(f"/sweeps/{sweep_pk}/cancel", headers={"Accept": "application/json"})
        row("15a'", "Operator olga: page cancel of otto's sweep", ans(r), r.status == 403)
        body = wait_sweep(otto_api, sweep_pk)
        NOTES.append(f"otto's sweep #{sweep_pk} ended {body.get('state')} {body.get('error', '')}")
        r = olga.post(f"/sweeps/{sweep_pk}/resume", headers={"Accept": "application/json"})
        row(
            "15b",
            f"Operator olga: page resume of otto's sweep (state {body.get('state')})",
            ans(r),
            r.status == 403,
        )
        r = otto.get(f"/sweeps/{sweep_pk}/export.csv")
        row(
            "13a",
            "sweep CSV download (page) Content-Disposition",
            f"{r.status} {r.header('Content-Disposition')}",
            r.status == 200
            and re.fullmatch(
                r'attachment; filename="sweep-\d+-add_sub\.csv"',
                r.header("Content-Disposition") or "",
            )
            is not None,
        )
        r = otto_api.get(f"/api/v1/sweeps/{sweep_pk}/export.csv")
        row(
            "13a'",
            "sweep CSV download (API) Content-Disposition",
            f"{r.status} {r.header('Content-Disposition')}",
            r.status == 200
            and (
                r.header("Content-Disposition") is None
                or "sweep-" in r.header("Content-Disposition")
            ),
        )
    r = otto_api.post("/api/v1/searches/", json=search_good)
    search = (r.json() or {}).get("search", {}) if r.status == 201 else {}
    search_pk = search.get("id")
    NOTES.append(
        f"setup: otto's search on busy_compute: {r.status} id={search_pk} {r.text[:120] if not search_pk else ''}"
    )
    if search_pk:
        r = olga.post(f"/api/v1/searches/{search_pk}/cancel")
        row("15c", "Operator olga: API cancel of otto's search", ans(r), r.status == 403)
        r = olga.post(f"/api/v1/searches/{search_pk}/resume")
        row("15c'", "Operator olga: API resume of otto's search", ans(r), r.status == 403)
        r = otto.get(f"/searches/{search_pk}/report.html")
        row(
            "13b",
            "search report download Content-Disposition",
            f"{r.status} {r.header('Content-Disposition')}",
            r.status == 200
            and re.fullmatch(
                r'attachment; filename="config-search-\d+-busy_compute\.html"',
                r.header("Content-Disposition") or "",
            )
            is not None,
        )
        r = otto_api.post(f"/api/v1/searches/{search_pk}/cancel")
        NOTES.append(f"otto cancels his own search #{search_pk}: {r.status} {r.text[:100]}")

    # ---- 6. demoted during an upload --------------------------------------------------------
    dora = sessions["dora"]
    created = create_upload(dora, model="add_sub", filename="model.py", size=len(MODEL_PY))
    if created.status == 201:
        uid = created.json()["id"]
        first = send_chunk(dora, uid, MODEL_PY[:40], 0)
        d = admin.post(
            f"/team/users/{ids['dora']}/",
            form={"role": "Operator", "csrfmiddlewaretoken": admin.cookies["csrftoken"]},
        )
        r = send_chunk(dora, uid, MODEL_PY[40:], 40)
        row(
            "6a",
            f"Admin dora: model.py upload to add_sub, chunk 1 {first.status}; demoted to Operator "
            f"(users page {d.status}); next chunk PATCH",
            ans(r),
            r.status == 403,
        )
        r = dora.post(f"/api/v1/uploads/{uid}/complete?wait=1")
        row(
            "6a'",
            "… then complete",
            ans(r),
            r.status == 403 and not (REPO / "add_sub" / "2").exists(),
        )
    else:
        row("6a", "Admin dora creates a model.py upload", ans(created), False)
    oleg = sessions["oleg"]
    created = create_upload(oleg, model=plain, filename="model.onnx", size=len(data))
    if created.status == 201:
        uid = created.json()["id"]
        first = send_chunk(oleg, uid, data[:20], 0)
        d = admin.post(
            f"/team/users/{ids['oleg']}/",
            form={"role": "Viewer", "csrfmiddlewaretoken": admin.cookies["csrftoken"]},
        )
        r = send_chunk(oleg, uid, data[20:], 20)
        row(
            "6b",
            f"Operator oleg: onnx version upload, chunk 1 {first.status}; demoted to Viewer "
            f"({d.status}); next chunk PATCH",
            ans(r),
            r.status == 403,
        )
        r = oleg.post(f"/api/v1/uploads/{uid}/complete?wait=1")
        row("6b'", "… then complete", ans(r), r.status == 403 and not (REPO / plain / "2").exists())
    else:
        row("6b", "Operator oleg creates an upload", ans(created), False)

    # ---- 14. tokens --------------------------------------------------------------------------
    pat = sessions["pat"]
    old = hc.Client(token=tokens["pat"])
    before = old.get("/api/v1/audit/?user=pat").status
    page = pat.get("/accounts/password/")
    r = pat.post(
        "/accounts/password/",
        form={
            "old_password": pw["pat"],
            "new_password1": "Brand-new-pass-77x",
            "new_password2": "Brand-new-pass-77x",
            "csrfmiddlewaretoken": pat.csrf_from(page.text),
        },
    )
    after = old.get("/api/v1/audit/?user=pat")
    row(
        "14a",
        f"pat's token works ({before}); pat changes password ({r.status} → {r.header('Location')}); old token",
        ans(after, "detail"),
        before == 200 and r.status == 302 and after.status == 401,
    )
    page = pat.get("/accounts/token/")
    r = pat.post(
        "/accounts/token/",
        form={"action": "create", "csrfmiddlewaretoken": pat.csrf_from(page.text)},
    )
    m = re.search(r"\b[0-9a-f]{40}\b", r.text)
    if m:
        new = hc.Client(token=m.group(0))
        ok = new.get("/api/v1/audit/?user=pat").status
        d = new.request("DELETE", "/api/v1/token")
        again = new.get("/api/v1/audit/?user=pat")
        row(
            "14b",
            f"new token from /accounts/token/ works ({ok}); DELETE /api/v1/token ({d.status}); token again",
            ans(again, "detail"),
            ok == 200 and d.status == 204 and again.status == 401,
        )
    else:
        row("14b", "create token on /accounts/token/", f"{r.status} no key on page", False)

    # ---- 16. leaks and odd requests -------------------------------------------------------
    for url in (
        "/api/v1/models/nothere/config",
        "/api/v1/models/nothere/versions/",
        "/api/v1/models/nothere/",
    ):
        r = otto.get(url)
        row(
            "16a",
            f"GET {url}",
            ans(r, "message", "detail", "field"),
            r.status == 404 and str(VAR) not in r.text and "/tmp" not in r.text,
        )
    r = vera.get("/")
    csp = r.header("Content-Security-Policy") or ""
    cs = re.search(r"connect-src[^;]*;?", csp)
    row(
        "16b",
        "CSP header on / (connect-src)",
        f"{r.status} {cs.group(0) if cs else csp[:150]}",
        cs is not None and cs.group(0).strip(" ;") == "connect-src 'self'",
    )
    created = create_upload(otto, model=plain, filename="model.onnx", size=len(data))
    if created.status == 201:
        uid = created.json()["id"]
        r = send_chunk(otto, uid, data[:10], 0, headers={"Host": "evil.example"})
        row(
            "16c",
            "chunk PATCH with Host: evil.example (otto's own upload)",
            ans(r),
            r.status == 400,
        )
        r2 = send_chunk(otto_api, uid, data[:10], 0, headers={"Host": "evil.example"})
        row("16c'", "same with otto's API token", ans(r2), r2.status == 400)
        otto.request("DELETE", f"/api/v1/uploads/{uid}/")
    vcookie = f"sessionid={vera.cookies['sessionid']}"
    res = ws_handshake("/ws/models/..%2f/", vcookie, ORIGIN)
    row("16d", "websocket /ws/models/..%2f/ (Viewer, own origin)", res, "500" not in res)
    res = ws_handshake("/ws/nothing/", vcookie, ORIGIN)
    row("16d'", "websocket /ws/nothing/ (Viewer, own origin)", res, "500" not in res)

    # ---- 12. websocket origins ------------------------------------------------------------
    res = ws_handshake("/ws/activity/", vcookie, "http://127.0.0.1:9999")
    row(
        "12a",
        "ws /ws/activity/ Viewer cookie, Origin http://127.0.0.1:9999",
        res,
        not res.startswith("HTTP/1.1 101"),
    )
    res = ws_handshake("/ws/activity/", vcookie, ORIGIN)
    row(
        "12b",
        f"ws /ws/activity/ Viewer cookie, Origin {ORIGIN}",
        res,
        res.startswith("HTTP/1.1 101"),
    )
    res = ws_handshake("/ws/activity/", "", ORIGIN)
    row("12c", "ws /ws/activity/ anonymous, own Origin", res, not res.startswith("HTTP/1.1 101"))

    # ---- bad input --------------------------------------------------------------------------
    def unchanged(name: str, text: str) -> bool:
        return (REPO / name / "config.pbtxt").read_text() == text

    add_sub = (REPO / "add_sub" / "config.pbtxt").read_text()
    sha = otto.get("/api/v1/models/add_sub/config").json()["sha256"]
    body = json.dumps({"text": add_sub + "# \ud800\n"})
    r = otto.request(
        "PUT",
        "/api/v1/models/add_sub/config",
        body=body,
        headers={"Content-Type": "application/json", "If-Match": f'"{sha}"'},
    )
    row(
        "B1",
        "config PUT with a lone surrogate \\ud800 in the JSON",
        ans(r),
        r.status == 400 and "surrogate" in r.text and unchanged("add_sub", add_sub),
    )
    deep = "[" * 100_000 + "]" * 100_000
    r = otto.request(
        "PUT",
        "/api/v1/models/add_sub/config",
        body='{"text": ' + deep + "}",
        headers={"Content-Type": "application/json", "If-Match": f'"{sha}"'},
    )
    row(
        "B2",
        "config PUT with 100k nested arrays",
        ans(r) + f" ({r.elapsed * 1000:.0f} ms)",
        r.status == 400 and unchanged("add_sub", add_sub),
    )
    r = otto.post(
        "/api/v1/sweeps/",
        body='{"model": "add_sub", "input_data": ' + deep + "}",
        headers={"Content-Type": "application/json"},
    )
    row(
        "B2'",
        "sweep POST with 100k nested arrays in input_data",
        ans(r) + f" ({r.elapsed * 1000:.0f} ms)",
        r.status == 400,
    )

    ab = (REPO / "add_batched" / "config.pbtxt").read_text()
    for field, value, words in (
        ("cfg-max_batch_size", str(10**20), "2147483647"),
        ("input-0-dims", str(2**63), "9223372036854775807"),
        ("instance_group-0-count", str(2**31), "2147483647"),
    ):
        page = otto.get("/models/add_batched/config/")
        fields = hc.scrape_form(page.text, "editor-form")
        fields = [(k, v) for k, v in fields if k != field] + [(field, value), ("action", "save")]
        if field not in dict(hc.scrape_form(page.text, "editor-form")):
            NOTES.append(f"editor form has no field {field}")
        r = otto.post("/models/add_batched/config/", form=fields)
        m = re.search(r"[^<>]*" + words + r"[^<>]*", r.text)
        row(
            "B3",
            f"editor form POST {field}={value}",
            f"{r.status} {m.group(0).strip() if m else re.sub(r'<[^>]+>', ' ', r.text)[:100]}",
            r.status == 422
            and m is not None
            and "Value out of range" not in r.text
            and unchanged("add_batched", ab),
        )

    good = [0.5] * 16
    for sample, label in (
        ([0.5] * 15 + ["abc"], "non-numeric"),
        ({"b64": "abc"}, "bad base64"),
        ({"b64": "AAAAAAA="}, "5-byte base64"),
        ({"b64": "AAAAAAAAAAA="}, "8-byte base64 for [16] FP32"),
        ({"content": good, "shape": [10**12]}, "shape 10^12"),
    ):
        r = otto_api.post(
            "/api/v1/sweeps/",
            json={
                "model": "add_batched",
                "input_data": {"data": [{"INPUT0": good}, {"INPUT0": sample}]},
            },
        )
        row(
            "B4",
            f"sweep input_data {label}",
            ans(r),
            r.status == 400 and json_field(r, "field") in ("input_data_file", "input_data"),
        )

    # a 50 MB config on the API
    rss0 = web_rss_total()
    status, sent, secs = raw_big(
        "PUT",
        "/api/v1/models/add_sub/config",
        50 * 1024 * 1024,
        50 * 1024 * 1024,
        {
            "Content-Type": "application/json",
            "If-Match": f'"{sha}"',
            "Authorization": f"Token {tokens['otto']}",
        },
    )
    row(
        "B5",
        "50 MB config PUT on the API (token)",
        f"{status} (sent {sent // 1048576} MiB, {secs * 1000:.0f} ms)",
        " 413 " in status + " " and "message" in status and unchanged("add_sub", add_sub),
    )
    # 12 MB: under REQUEST_MAX_BODY_BYTES (16 MiB) but over the 10 MiB JSON limit
    status, sent, secs = raw_big(
        "PUT",
        "/api/v1/models/add_sub/config",
        12 * 1024 * 1024,
        12 * 1024 * 1024,
        {
            "Content-Type": "application/json",
            "If-Match": f'"{sha}"',
            "Authorization": f"Token {tokens['otto']}",
        },
    )
    row(
        "B5'",
        "12 MiB config PUT on the API (under REQUEST_MAX_BODY_BYTES 16 MiB, over the 10 MiB JSON cap)",
        f"{status} (sent {sent // 1048576} MiB, {secs * 1000:.0f} ms)",
        " 413 " in status + " " and "message" in status and unchanged("add_sub", add_sub),
    )
    big = '{"text": "' + "x" * (3 * 1024 * 1024) + '"}'
    r = otto_api.request(
        "PUT",
        "/api/v1/models/add_sub/config",
        body=big,
        headers={"Content-Type": "application/json", "If-Match": f'"{sha}"'},
    )
    row(
        "B5''",
        "3 MiB config PUT on the API (under every transport cap, over the 1 MiB config cap)",
        ans(r) + f" ({r.elapsed * 1000:.0f} ms)",
        r.status == 413 and unchanged("add_sub", add_sub),
    )
    FIG["B5: RSS before/after 50 MB + 12 MB PUTs (KiB)"] = f"{rss0} → {web_rss_total()}"

    page = otto.get("/models/add_batched/config/")
    base_sha = re.search(r'name="base_sha" value="([0-9a-f]+)"', page.text).group(1)
    text = "# " + "x" * 2_700_000 + "\n" + ab
    r = otto.post(
        "/models/add_batched/config/",
        form={
            "mode": "text",
            "action": "save",
            "text": text,
            "base_sha": base_sha,
            "csrfmiddlewaretoken": otto.csrf_from(page.text),
        },
    )
    m = re.search(r"[^<>]*1 MiB[^<>]*", r.text)
    row(
        "B6",
        "2.7 MB text-mode save on the editor page",
        f"{r.status} {m.group(0).strip() if m else r.text[:100]} ({r.elapsed * 1000:.0f} ms)",
        r.status in (413, 422) and m is not None and r.elapsed < 5 and unchanged("add_batched", ab),
    )

    for value in (["list"], None):
        r = create_upload(
            otto, model=value, new_model=True, backend="onnxruntime", filename="model.onnx", size=10
        )
        row(
            "B7",
            f"upload create with model={json.dumps(value)}",
            ans(r),
            r.status == 400
            and json_field(r, "field") == "model"
            and not (REPO / "None").exists()
            and not (REPO / "['list']").exists(),
        )
    for label, fields in (
        ("filename x.onnx", dict(model=plain, filename="x.onnx", size=10)),
        ("size 0", dict(model=plain, filename="model.onnx", size=0)),
        ("unknown model", dict(model="nothere", filename="model.onnx", size=1)),
        ("size true", dict(model=plain, filename="model.onnx", size=True)),
        ("version 1.5", dict(model=plain, filename="model.onnx", size=10, version=1.5)),
        ("sha256 5", dict(model=plain, filename="model.onnx", size=10, sha256=5)),
        ("model.onnx.py double ext", dict(model=plain, filename="model.onnx.py", size=10)),
        ("Viewer creates", None),
    ):
        if fields is None:
            r = create_upload(vera, model=plain, filename="model.onnx", size=10)
        else:
            r = create_upload(otto, **fields)
        if fields is None:
            row("B8", "upload create by a Viewer (a role refusal)", ans(r), r.status == 403)
        else:
            row(
                "B8",
                f"upload error carries a field: {label}",
                ans(r),
                r.status >= 400 and json_field(r, "field") is not None,
            )

    r = otto_api.post("/api/v1/sweeps/", json={"model": "add_sub", "concurrency_range": "1e308"})
    row(
        "B9",
        "sweep concurrency_range 1e308",
        ans(r),
        r.status == 400 and json_field(r, "field") == "concurrency_range",
    )
    r = otto_api.post("/api/v1/sweeps/", json={"model": "add_sub", "measurement_interval": 10**9})
    row(
        "B9'",
        "sweep measurement_interval 10^9",
        ans(r),
        r.status == 400 and json_field(r, "field") == "measurement_interval",
    )
    r = otto_api.post("/api/v1/searches/", json={**search_good, "measurement_interval": 10**9})
    row(
        "B10",
        "search measurement_interval 10^9 ms",
        ans(r),
        r.status == 400 and json_field(r, "field") == "measurement_interval",
    )
    for mbs in ("1:100000000000", "8,100000000000"):
        r = otto_api.post("/api/v1/searches/", json={**search_good, "max_batch_sizes": mbs})
        row(
            "B10'",
            f"search max_batch_sizes {mbs}",
            ans(r) + f" ({r.elapsed * 1000:.0f} ms)",
            r.status == 400 and json_field(r, "field") == "max_batch_sizes",
        )

    # ---- 5. one address, five usernames, then someone else's right password ----------------
    att = hc.Client(src="127.0.0.2")
    statuses = []
    for i in range(1, 6):
        r = att.login(f"nobody{i}", "guess")
        statuses.append(r.status)
    ruth = hc.Client(src="127.0.0.2")
    r1 = ruth.login("ruth", pw["ruth"])
    ruth2 = hc.Client(src="127.0.0.2")
    r2 = ruth2.login("ruth", pw["ruth"])
    m = re.search(r"too many[^<]*", r2.text)
    time.sleep(1.2)
    ruth3 = hc.Client(src="127.0.0.2")
    r3 = ruth3.login("ruth", pw["ruth"])
    row(
        "5",
        "from 127.0.0.2: 5 failures (5 usernames), then ruth's right password at once, "
        "again at once, and after 1.2 s",
        f"failures {statuses}; ruth at once {r1.status}; again at once {r2.status} "
        f"({m.group(0).strip() if m else ''}, Retry-After {r2.header('Retry-After')}); after pace {r3.status} {r3.header('Location')}",
        statuses == [200] * 5 and r3.status == 302,
    )
    FIG["item 5"] = (
        f"failures {statuses}; ruth at once {r1.status} {r1.header('Location')}; again at once {r2.status} "
        f"({m.group(0).strip() if m else r2.text[:80]}; Retry-After {r2.header('Retry-After')}); "
        f"after 1.2 s {r3.status} {r3.header('Location')}"
    )

    # ---- 4. eight wrong passwords on /admin/login/ ---------------------------------------
    def failed_rows():
        got = (
            hc.Client(token=tokens["admin"])
            .get("/api/v1/audit/?user=root&action=login.failed")
            .json()
        )
        return got.get("results", got) if isinstance(got, dict) else got

    seen = {e.get("id") or (e.get("at"), e.get("detail")) for e in failed_rows()}
    adm = hc.Client(src="127.0.0.3")
    statuses, msgs = [], []
    for i in range(8):
        r = adm.login("root", f"wrong-{i}", path="/admin/login/")
        statuses.append(r.status)
        m = re.search(r"Too many[^<]*|too many[^<]*", r.text)
        if m:
            msgs.append(m.group(0).strip())
        time.sleep(1.1)  # past the address pace: only the account lockout answers
    right = adm.login("root", pw["root"], path="/admin/login/")
    rows = [e for e in failed_rows() if (e.get("id") or (e.get("at"), e.get("detail"))) not in seen]
    summary = [
        (e.get("action"), e.get("outcome"), e.get("target"), e.get("detail")) for e in rows[:8]
    ]
    row(
        "4",
        "8 wrong passwords for superuser root on /admin/login/ (from 127.0.0.3), then the right one",
        f"{statuses}; right pw {right.status}; msg {msgs[:1]}; new audit login.failed rows: {len(rows)}",
        statuses[:5] == [200] * 5
        and statuses[5:] == [429] * 3
        and right.status == 429
        and len(rows) == 5,
    )
    FIG["item 4 statuses, messages"] = (
        f"{statuses}, right password {right.status}; {sorted(set(msgs))}"
    )
    FIG["item 4 new audit rows (action, outcome, address, detail)"] = json.dumps(summary)

    # ---- 11. formula in the audit CSV --------------------------------------------------------
    payload = '=HYPERLINK("http://x","y")'
    r = hc.Client(src="127.0.0.4").login(payload, "guess")
    csvr = admin.get("/audit.csv")
    line = next((ln for ln in csvr.text.splitlines() if "HYPERLINK" in ln), "(no row)")
    row(
        "11",
        f"failed login as `{payload}`, then /audit.csv (admin)",
        f"login {r.status}; csv {csvr.status}: {line}",
        csvr.status == 200 and (",'=HYPERLINK" in line or ",\"'=HYPERLINK" in line),
    )

    # ---- Fleet boundaries (#27) -------------------------------------------------------------
    fleet_boundaries(tokens, pw, sessions, search_good)

    # ---- end ------------------------------------------------------------------------------
    FIG["RSS at end (KiB)"] = str(web_rss_total())
    row("end", "/tmp/pwned exists?", str(pwned.exists()), not pwned.exists())
    if RUN_LOG.exists():
        errors = [
            line
            for line in RUN_LOG.read_text(errors="replace").splitlines()
            if re.search(r" (ERROR|CRITICAL) |Traceback|Internal Server Error", line)
        ]
        if errors:
            NOTES.append("run.log errors: " + "\n".join(errors[-5:])[:600])


def report() -> str:
    lines = [
        "| # | what was tried | answer (status, message/field) | expected? |",
        "|---|---|---|---|",
    ]
    lines += [f"| {num} | {tried} | {answer} | {ok} |" for num, tried, answer, ok in ROWS]
    lines.append("")
    lines += [f"- {k}: {v}" for k, v in FIG.items()]
    lines.append("")
    lines += [f"- note: {n}" for n in NOTES]
    return "\n".join(lines) + "\n"


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument(
        "--only",
        choices=["fleet"],
        default="",
        help="only the Fleet boundaries rows (F1...), after the setup",
    )
    args = parser.parse_args()
    try:
        main(args.only)
    finally:  # a probe that stops half-way still shows the rows it has
        text = report()
        sys.stdout.write(text)
        if args.out:
            args.out.write_text(text)
    unexpected = [r for r in ROWS if r[3] != "yes"]
    for num, tried, answer, ok in unexpected:
        print(f"UNEXPECTED [{num}] {tried}: {answer} ({ok})", file=sys.stderr)
    print(f"probe: {len(ROWS)} rows, {len(unexpected)} unexpected", file=sys.stderr)
    return 1 if unexpected or not ROWS else 0


if __name__ == "__main__":
    sys.exit(cli())
