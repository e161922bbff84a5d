"""The probe's users and API tokens, written to $PROBE_WORK/tokens.json.

Run by probe.py as `manage.py shell < setup_users.py`, with the stack's environment.
"""

import json
import os
from pathlib import Path

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from team.roles import ADMIN, OPERATOR, VIEWER, set_role

User = get_user_model()
people = {
    "otto": OPERATOR,
    "olga": OPERATOR,
    "vera": VIEWER,
    "ruth": VIEWER,
    "pat": VIEWER,
    "dora": ADMIN,
    "oleg": OPERATOR,
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
