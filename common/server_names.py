"""How a Triton server and a label are written: the registry checks servers against these
rules (registry.server_rules), and a narrowing's selector is checked against the same
ones (team.narrowing_admin)."""

from __future__ import annotations

import re

DEFAULT = "default"  # the server the TRITON_* settings define
NAME_RULE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
LABEL_RULE = re.compile(r"[A-Za-z0-9_.-]{1,63}")
