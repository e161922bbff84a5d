"""Django settings, all from the environment (see .env.example for every variable).

The defaults make `make run` work untouched: SQLite under var/, Redis on
127.0.0.1:6379, a local Triton on its standard ports.
"""

from __future__ import annotations

import os
from pathlib import Path

import environ

from common.env import (
    env_bool,
    env_database,
    env_hostport,
    env_int,
    env_list,
    env_number,
    env_path,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
if (BASE_DIR / ".env").exists():
    # Values already in the environment win over the file.
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
VAR_DIR = env_path("VAR_DIR", BASE_DIR / "var")
# SQLite (API tokens, session keys), logs and local services' data live here: create it so
# a fresh clone just works, readable by this user alone (chmod also tightens an old one).
VAR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
if VAR_DIR.stat().st_uid == os.getuid():
    VAR_DIR.chmod(0o700)

DEBUG = env_bool("DJANGO_DEBUG", True)
_DEV_KEY = "dev-only-insecure-key-change-me-in-production"
SECRET_KEY = env_str("DJANGO_SECRET_KEY", _DEV_KEY if DEBUG else "")
if not SECRET_KEY:
    from common.env import config_error

    config_error("DJANGO_SECRET_KEY", "must be set when DJANGO_DEBUG is false")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
if "*" in ALLOWED_HOSTS:
    from common.env import config_error

    # The websocket origin check is built from this list: a wildcard would accept any site.
    config_error("DJANGO_ALLOWED_HOSTS", "must list host names; '*' is not accepted")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "team",
    "jobs",
    "registry",
    "repository_app",
    "profiler_app",
    "inference",
    "fleet",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A reading request asks Triton, the registry and the narrowings each question once.
    "common.request_memo.RequestMemoMiddleware",
    "common.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Before any view or CSRF's process_view reads a body: an oversized one is a 413.
    "common.request_limits.RequestSizeMiddleware",
    "team.middleware.AuditActorMiddleware",
    # ?server=NAME -> request.triton_server (an unknown name is a 404); redirects keep it.
    "registry.server_context.ServerMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "common.security.csp_nonce",
                "registry.server_context.server_context",
            ],
        },
    },
]

DATABASES = {"default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}
if "sqlite3" in DATABASES["default"]["ENGINE"]:
    # Several processes (web, worker and its threads) write to the file. BEGIN IMMEDIATE
    # takes the write lock up front, so a writer waits (up to the timeout) instead of
    # failing at once with "database is locked" when it upgrades a read transaction;
    # WAL lets readers go on while one writes.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # A file-backed test database so the worker and web subprocesses of the tests see it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
    # SQLite gives its -wal and -shm files the database file's mode: create it 0600 first.
    _sqlite = Path(DATABASES["default"]["NAME"])
    if _sqlite.parent.is_dir() and (not _sqlite.exists() or _sqlite.stat().st_uid == os.getuid()):
        _sqlite.touch(mode=0o600, exist_ok=True)
        _sqlite.chmod(0o600)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# ModelBackend authenticates; the first answers its permissions in one query instead of two
# (ModelBackend then finds them cached); the last answers permissions on one Triton server
# (`user.has_perm(PERMISSION, server)`), where roles can be narrowed.
AUTHENTICATION_BACKENDS = [
    "team.backends.PermissionsInOneQuery",  # ModelBackend's permissions, in one query
    "django.contrib.auth.backends.ModelBackend",
    "team.backends.ServerPermissionBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # Plotly served by the project (no CDN) as static/vendor/plotly.min.js: its basic bundle,
    # or the plotly wheel's full one while that is not installed (common/staticfinders.py).
    "common.staticfinders.PlotlyFinder",
]
# Plotly's basic bundle (scatter, bar, pie: every trace the pages draw; 1.1 MB against the
# full bundle's 4.85 MB), where scripts/install_plotly_basic.py puts it (make run, make test
# and the image build run it). Point it at a missing file to serve the full bundle.
PLOTLY_BASIC_JS = env_path("PLOTLY_BASIC_JS", BASE_DIR / "var" / "vendor" / "plotly-basic.min.js")
# collectstatic writes content-hashed copies (plotly.min.<hash>.js) with .gz and .br
# (Brotli) beside them; whitenoise serves those with a 10-year immutable Cache-Control,
# so a browser fetches plotly.min.js (basic: 1.1 MB, about 0.3 MB as Brotli) once per release.
# With DEBUG on, {% static %} keeps plain names (served through the finders, no
# collectstatic needed); with DEBUG off it needs the manifest collectstatic writes.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # whitenoise's CompressedManifestStaticFilesStorage, compressing only new hashed files.
    "staticfiles": {"BACKEND": "common.staticfinders.IncrementalCompressedManifestStorage"},
}
# Only the hashed copies are compressed and kept: half the (slow, Brotli) work.
WHITENOISE_KEEP_ONLY_HASHED_FILES = True

# --- Redis, Channels, Celery -------------------------------------------------
REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", ("redis", "rediss", "unix"))
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000, "expiry": 30},
    }
}
CELERY_BROKER_URL = env_url("CELERY_BROKER_URL", REDIS_URL, ("redis", "rediss", "unix"))
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Sweeps run for minutes: acknowledge a task only when it finished, hand it back when
# the worker dies, and keep Redis from re-delivering it while it still runs.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 6 * 3600, minimum=60)
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A sweep with load hosts waits this long at most for its load agents (other workers of its
# queue) to join before it fails saying how many came (profiler_app.load_agents).
LOAD_AGENT_JOIN_TIMEOUT_S = env_number("LOAD_AGENT_JOIN_TIMEOUT_S", 60.0, minimum=1)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Triton ------------------------------------------------------------------
TRITON_URL = env_hostport("TRITON_URL", "127.0.0.1:8001")  # gRPC
TRITON_HTTP_URL = env_hostport("TRITON_HTTP_URL", "127.0.0.1:8000")
TRITON_METRICS_URL = env_url(
    "TRITON_METRICS_URL", "http://127.0.0.1:8002/metrics", ("http", "https")
)
TRITON_TIMEOUT_S = env_number("TRITON_TIMEOUT_S", 5.0, minimum=0.1)
TRITON_LOAD_TIMEOUT_S = env_number("TRITON_LOAD_TIMEOUT_S", 120.0, minimum=1)
# Triton's management API protected with --grpc-restricted-protocol=model-repository:KEY=VALUE
# (the compose file does it): the dashboard sends KEY=VALUE with every call.
TRITON_API_KEY_HEADER = env_str("TRITON_API_KEY_HEADER", "dashboard-key")
TRITON_API_KEY = env_str("TRITON_API_KEY", "")
# The default server's jobs run only on a worker consuming its queue, triton.default (on the
# GPU host), never from another host (profiler_app.queues).
TRITON_REQUIRE_LOCAL_WORKER = env_bool("TRITON_REQUIRE_LOCAL_WORKER", False)
TRITON_POLL_INTERVAL_S = env_number("TRITON_POLL_INTERVAL_S", 1.0, minimum=0.1)
MODEL_REPOSITORY = env_path("MODEL_REPOSITORY", VAR_DIR / "model_repository")
# The folders a registered server's model repository must lie in (or be): absolute paths
# separated by commas or os.pathsep. Empty: MODEL_REPOSITORY's parent folder, read when used
# (registry.server_rules.repository_roots). MODEL_REPOSITORY itself is always allowed.
_roots = [
    item.strip()
    for part in env_str("MODEL_REPOSITORY_ROOTS", "").split(os.pathsep)
    for item in part.split(",")
    if item.strip()
]
if any(not Path(root).expanduser().is_absolute() for root in _roots):
    from common.env import config_error

    config_error("MODEL_REPOSITORY_ROOTS", f"must list absolute paths, got {_roots!r}")
MODEL_REPOSITORY_ROOTS: list[Path] = [Path(root).expanduser().resolve() for root in _roots]
# Where the dashboard may read a server's trace files (Triton's --trace-config file=, which
# Triton reports and the trace page reads: same host, or a shared volume in compose).
TRITON_TRACE_ROOTS: list[Path] = [
    Path(item.strip()).expanduser().resolve()
    for item in env_str("TRITON_TRACE_ROOTS", str(VAR_DIR / "traces")).split(os.pathsep)
    if item.strip()
]
TRACE_MAX_MINUTES = env_int("TRACE_MAX_MINUTES", 30, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # A 403 is one line (method, path, user, reason), not a traceback; a 500 keeps its own.
    "filters": {"one_line_403": {"()": "common.log_filters.OneLineForbidden"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        "django.request": {"filters": ["one_line_403"]},
        # Not Django's own console handler too: the root's prints every django.* line once.
        "django": {"handlers": []},
    },
}

# Whitenoise serves static files from the finders too, so Daphne alone serves plotly.min.js
# in development; production images run collectstatic.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
# Files without a hash in their name (found through the finders) may change under the same
# URL: browsers revalidate them after a minute. Hashed names get whitenoise's 10 years and
# "immutable" through its default immutable_file_test (the manifest's names).
WHITENOISE_MAX_AGE = 0 if DEBUG else 60

# --- Metrics history (repository_app/history.py) -------------------------------------------
# The poller keeps 10 s rows for HISTORY_FINE_RETENTION_H hours and 1-, 5- and 30-minute
# rows for HISTORY_RETENTION_DAYS days; older rows are deleted once a minute by the poller.
HISTORY_ENABLED = env_bool("HISTORY_ENABLED", True)
# The workers' watchdog records config.pbtxt edits made outside the dashboard as `disk`
# revisions (pages only read); off, they are recorded by the next save only.
RECORD_OUTSIDE_EDITS = env_bool("RECORD_OUTSIDE_EDITS", True)
HISTORY_FINE_RETENTION_H = env_int("HISTORY_FINE_RETENTION_H", 24, minimum=1)
HISTORY_RETENTION_DAYS = env_int("HISTORY_RETENTION_DAYS", 14, minimum=1)
if HISTORY_RETENTION_DAYS * 24 < HISTORY_FINE_RETENTION_H:
    from common.env import config_error

    config_error(
        "HISTORY_RETENTION_DAYS",
        "must cover HISTORY_FINE_RETENTION_H (1-minute rows outlive 10 s rows)",
    )

# --- REST API (/api/v1/) -----------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        # ?server=NAME naming no server: 404, checked once the caller is authenticated.
        "registry.server_context.KnownServer",
    ],
    # Deep nesting and lone surrogates are a 400 (common/api_parsers.py), not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "common.api_parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "common.api_errors.json_error_handler",
    "DEFAULT_PAGINATION_CLASS": "common.api_pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Triton dashboard API",
    "VERSION": "1",
    "DESCRIPTION": "Models, configs, versions, load/unload, perf sweeps and the audit trail.",
    # Swagger UI's assets come from the drf-spectacular-sidecar package: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_INCLUDE_SCHEMA": False,
    # Fields named "kind" and "engine" hold different choice sets (a job's kind vs an
    # instance group's kind): each set gets its own name, stable across schema changes.
    "ENUM_NAME_OVERRIDES": {
        "JobKindEnum": "profiler_app.models.Sweep.Kind",
        "EngineEnum": "profiler_app.models.Sweep.Engine",
        "InstanceKindEnum": ["KIND_CPU", "KIND_GPU"],
        "StateEnum": "profiler_app.models.Sweep.State",  # its name before rollouts had states
        "RolloutStateEnum": "fleet.models.Rollout.State",
        "RolloutTargetStateEnum": "fleet.rollouts.runner.TARGET_STATES",
    },
}

# --- Production hardening (DJANGO_DEBUG=false) -------------------------------------------
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto, trust it for "is secure".
# Behind it, the client's address is the last entry of X-Forwarded-For (the one the proxy
# appended); team.client_address reads it there (login rate limits, audit).
BEHIND_PROXY = env_bool("DJANGO_BEHIND_PROXY", False)
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = True
SECURE_SSL_REDIRECT = env_bool("DJANGO_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_HSTS_SECONDS = 0 if DEBUG else env_int("DJANGO_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# /healthz answers over plain HTTP for load balancers and container checks.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

# Login attempts allowed per username and per client address in LOGIN_LOCKOUT_S. Past
# that an account is locked out; an address (shared by everyone behind the TLS proxy) is
# only slowed down: one password check per LOGIN_ADDRESS_PACE_S.
LOGIN_MAX_FAILURES = env_int("LOGIN_MAX_FAILURES", 5, minimum=1)
LOGIN_LOCKOUT_S = env_int("LOGIN_LOCKOUT_S", 900, minimum=1)
LOGIN_ADDRESS_PACE_S = env_number("LOGIN_ADDRESS_PACE_S", 1.0, minimum=0.01)

# --- Request bodies (common/request_limits.py) ----------------------------------------
# Any request but an upload chunk: refused with 413 before it is buffered. Forms and JSON
# (not multipart) are also held to DATA_UPLOAD_MAX_MEMORY_SIZE: a form-mode editor save
# carries the config twice (the text and the form it came from), each up to 1 MiB and up
# to 3 times that once URL-encoded; the editor itself then says what is too large.
REQUEST_MAX_BODY_BYTES = env_int("REQUEST_MAX_BODY_BYTES", 16 * 1024**2, minimum=1024**2)
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2

# --- Uploads (repository_app/uploads/, docs/uploads.md) ----------------------------------
# Limits are checked on the declared size when an upload starts and again on every chunk.
UPLOAD_MAX_FILE_BYTES = env_int("UPLOAD_MAX_FILE_BYTES", 64 * 1024**3, minimum=1)
# One upload: the bytes sent, and for an archive the sum of its members once extracted.
UPLOAD_MAX_TOTAL_BYTES = env_int("UPLOAD_MAX_TOTAL_BYTES", 128 * 1024**3, minimum=1)
UPLOAD_MAX_ARCHIVE_MEMBERS = env_int("UPLOAD_MAX_ARCHIVE_MEMBERS", 10_000, minimum=1)

# Try a model (inference/): one request's inputs and its answer are bounded (gRPC refuses a
# larger answer as it arrives); its outputs are kept whole for the downloads this long.
TRY_MAX_REQUEST_BYTES = env_int("TRY_MAX_REQUEST_BYTES", 64 * 1024**2, minimum=1024)
TRY_MAX_RESPONSE_BYTES = env_int("TRY_MAX_RESPONSE_BYTES", 64 * 1024**2, minimum=1024)
TRY_TIMEOUT_S = env_number("TRY_TIMEOUT_S", 60.0, minimum=0.1)
TRY_RESULTS_DIR = env_path("TRY_RESULTS_DIR", VAR_DIR / "try")
TRY_RESULTS_TTL_S = env_int("TRY_RESULTS_TTL_S", 3600, minimum=60)
# Past UPLOAD_ARCHIVE_RATIO_FREE_BYTES unpacked, an archive may unpack to at most this many
# times its own size (a 204 KB zip of 200 MiB, or 130 MB of 128 GiB, is a bomb, not a model).
UPLOAD_MAX_ARCHIVE_RATIO = env_int("UPLOAD_MAX_ARCHIVE_RATIO", 200, minimum=1)
UPLOAD_ARCHIVE_RATIO_FREE_BYTES = env_int("UPLOAD_ARCHIVE_RATIO_FREE_BYTES", 100 * 2**20, minimum=0)
# The browser sends chunks of UPLOAD_CHUNK_BYTES; a chunk request above UPLOAD_MAX_CHUNK_BYTES
# is refused (Daphne queues a whole request body before the application reads it). 16 MiB
# chunks gave 1.5 times the throughput of 4 MiB ones: each chunk costs a request and its checks.
UPLOAD_CHUNK_BYTES = env_int("UPLOAD_CHUNK_BYTES", 16 * 1024**2, minimum=64 * 1024)
UPLOAD_MAX_CHUNK_BYTES = env_int("UPLOAD_MAX_CHUNK_BYTES", 32 * 1024**2, minimum=64 * 1024)
# Unfinished uploads idle for longer are removed by the reconciler.
UPLOAD_STALE_AFTER_S = env_int("UPLOAD_STALE_AFTER_S", 24 * 3600, minimum=60)
# Outside the served repository, on the same file system (publishing is a rename).
# Empty: MODEL_REPOSITORY's parent folder / ".staging", resolved when used.
_staging = env_str("UPLOAD_STAGING_DIR", "")
UPLOAD_STAGING_DIR: Path | None = Path(_staging).expanduser().resolve() if _staging else None
