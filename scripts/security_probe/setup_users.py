"""The probe's users and API tokens, written to $PROBE_WORK/tokens.json, and the fleet the
"Fleet boundaries" rows need: a second registered server, hidden-probe (it need not answer),
narrowed to none for nina and nadia.

Run by probe.py as `manage.py shell < setup_users.py`, with the stack's environment.
"""

import json
import os
from pathlib import Path

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from registry.models import TritonServer
from team.roles import ADMIN, OPERATOR, VIEWER, set_role

HIDDEN, HIDDEN_LABEL = "hidden-probe", "probehide=zz27"  # probe.py names them too

User = get_user_model()
people = {
    "otto": OPERATOR,
    "olga": OPERATOR,
    "vera": VIEWER,
    "ruth": VIEWER,
    "pat": VIEWER,
    "dora": ADMIN,
    "oleg": OPERATOR,
    # Fleet boundaries (#27): lockme is locked out by the look-alike row (nobody else is);
    # nina (Operator) and nadia (Admin) are narrowed to none on the hidden server below.
    "lockme": VIEWER,
    "nina": OPERATOR,
    "nadia": ADMIN,
}
out = {}
for name, role in people.items():
    u, _ = User.objects.get_or_create(username=name)
    u.set_password(f"pw-{name}-Probe-2024")
    u.is_active = True
    u.save()
    set_role(u, role)
    Token.objects.filter(user=u).delete()
    out[name] = Token.objects.create(user=u).key
root, _ = User.objects.get_or_create(username="root")
root.set_password("pw-root-Probe-2024")
root.is_staff = True
root.is_superuser = True
root.save()
admin = User.objects.get(username="admin")
Token.objects.filter(user=admin).delete()
out["admin"] = Token.objects.create(user=admin).key
# A second registered server (it need not answer), hidden from nina and nadia: added and
# narrowed through the commands an operator would use (manage.py servers add / team narrow).
if not TritonServer.objects.filter(name=HIDDEN).exists():
    hidden_repo = Path(settings.VAR_DIR) / "hidden_repo"
    hidden_repo.mkdir(exist_ok=True)
    call_command(
        "servers", "add", HIDDEN, "--grpc", "127.0.0.1:1", "--http", "127.0.0.1:2",
        "--metrics", "http://127.0.0.1:3/metrics", "--repository", str(hidden_repo),
        "--label", HIDDEN_LABEL, "--as-user", "admin",
    )  # fmt: skip
for name in ("nina", "nadia"):
    call_command("team", "narrow", name, "--server", HIDDEN, "--role", "none")
ids = {u.username: u.pk for u in User.objects.all()}
tokens_file = Path(os.environ["PROBE_WORK"]) / "tokens.json"
tokens_file.touch(mode=0o600)
tokens_file.write_text(json.dumps({"tokens": out, "ids": ids}))
print("users ok", sorted(out))
# Reruns: forget earlier runs' login failures/lockouts/paces (Redis db 12 only).
r = redis.Redis.from_url(settings.REDIS_URL)
n = 0
for k in r.scan_iter("dashboard:login-*"):
    r.delete(k)
    n += 1
print("cleared login keys:", n)
