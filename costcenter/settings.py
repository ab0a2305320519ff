"""CostCenter settings: one module, every deployment choice read from the environment.

Unset variables give the embedded single-machine defaults (Postgres from ``pgserver``, a Celery
broker on the filesystem, e-mail written to files) under ``COSTCENTER_HOME``. See the README's
"Configuration" table for each variable.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from costcenter.env import database_from_url, env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
COSTCENTER_HOME = Path(env_str("COSTCENTER_HOME", str(BASE_DIR / ".costcenter"))).resolve()


def _home_dir(path: Path) -> Path:
    """A folder under COSTCENTER_HOME, created now: a read-only or full disk is reported here,
    in one sentence, rather than as a traceback from deep inside the broker or the database."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A probe file of its own: web workers, the Celery worker and beat start at the same time
        # with the same home, and a shared name let one process delete another's probe.
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-") as probe:
            probe.write(b"x")  # a byte, so a full disk fails here too
            probe.flush()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"COSTCENTER_HOME={COSTCENTER_HOME}: cannot write {path} ({exc.strerror or exc}); "
            "point COSTCENTER_HOME at a writable folder with free space"
        ) from None
    return path


# --- Core ------------------------------------------------------------------------------------
DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is required when DEBUG is off (set DEBUG=true for local use)")
    # Local use only: a random key kept beside the embedded data, so sessions survive restarts.
    path = COSTCENTER_HOME / "dev-secret-key"
    if not path.exists():
        _home_dir(COSTCENTER_HOME)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "whitenoise.runserver_nostatic",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI files served by us: /api/docs/ works offline, no CDN
    "costcenter",
    "ingest",
    "costcenter.reports",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "costcenter.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "costcenter.urls"
WSGI_APPLICATION = "costcenter.wsgi.application"

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
                "costcenter.context_processors.navigation",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------------------------
_database_url = env_str("DATABASE_URL")
if _database_url:
    _default_db = database_from_url(_database_url)
else:
    _default_db = {
        "ENGINE": "costcenter.embedded_pg",
        "NAME": "costcenter",
        # Read by costcenter.embedded_pg: where the data lives and which database to create.
        "OPTIONS_PGDATA": str(COSTCENTER_HOME / "pgdata"),
        "EMBEDDED_MAIN_DB": "costcenter",
    }
_default_db["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
_default_db["CONN_HEALTH_CHECKS"] = True
DATABASES = {"default": _default_db}
EMBEDDED_DATABASE = not _database_url
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth ------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "cc-overview"
LOGOUT_REDIRECT_URL = "login"

# --- Time: stored in UTC, shown in TIME_ZONE --------------------------------------------------
USE_TZ = True
TIME_ZONE = env_str("TIME_ZONE", "UTC")
LANGUAGE_CODE = "en-us"
USE_I18N = False

# --- Static files ----------------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
_static_root = env_str("STATIC_ROOT")
STATIC_ROOT = Path(_static_root) if _static_root else COSTCENTER_HOME / "staticfiles"
if not _static_root:
    # WhiteNoise warns about a missing STATIC_ROOT even when it serves from the finders.
    _home_dir(STATIC_ROOT)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        # Hashed, compressed names need `collectstatic` first (production); local runs and
        # tests serve the files as they are.
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if env_bool("STATIC_MANIFEST", not DEBUG)
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
# Without a collectstatic run (local use, tests), serve straight from static/.
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", DEBUG)

# --- HTTPS (turn on behind TLS in production) --------------------------------------------------
HTTPS = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
# The header only allows submission to the browser preload list; submitting stays a manual step.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", HTTPS)
if env_bool("BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True

# --- E-mail: SMTP when EMAIL_HOST is set, else files under COSTCENTER_HOME/mail ---------------
EMAIL_HOST = env_str("EMAIL_HOST")
if EMAIL_HOST:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_PORT = env_int("EMAIL_PORT", 587, minimum=1)
    EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", EMAIL_PORT == 587)
    EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", EMAIL_PORT == 465)
    EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 30, minimum=1)
else:
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = COSTCENTER_HOME / "mail"
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "CostCenter <costcenter@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

# --- Celery: a filesystem broker unless CELERY_BROKER_URL names Redis or RabbitMQ -------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL")
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
if not CELERY_BROKER_URL:
    _broker_dir = COSTCENTER_HOME / "broker"
    CELERY_BROKER_URL = "filesystem://"
    for _folder in ("queue", "processed", "control"):
        _home_dir(_broker_dir / _folder)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        # Broadcast (remote control) state, which kombu would otherwise write to ./control.
        "control_folder": str(_broker_dir / "control"),
    }
CELERY_BEAT_SCHEDULE_FILENAME = str(COSTCENTER_HOME / "celerybeat-schedule")

# --- Ingestion -------------------------------------------------------------------------------
# Distinct values one source may write per dimension (team, workload, model, endpoint).
INGEST_DIMENSION_LIMIT = env_int("INGEST_DIMENSION_LIMIT", 1000, minimum=1)
# Rows per COPY batch (and per committed checkpoint).
INGEST_BATCH_SIZE = env_int("INGEST_BATCH_SIZE", 20000, minimum=1)
# Raw attempts are kept this many months (whole monthly partitions are dropped); rollups stay.
RAW_RETENTION_MONTHS = env_int("RAW_RETENTION_MONTHS", 13, minimum=1)
# Largest body POST /api/v1/usage/ and /v1/traces accept, before and after decompression.
INGEST_MAX_BODY_BYTES = env_int("INGEST_MAX_BODY_BYTES", 32 * 1024 * 1024, minimum=1)

# --- Exports ---------------------------------------------------------------------------------
EXPORT_MAX_ROWS = env_int("EXPORT_MAX_ROWS", 25_000_000, minimum=1)
FOCUS_BILLING_ACCOUNT_ID = env_str("FOCUS_BILLING_ACCOUNT_ID", "costcenter")
FOCUS_BILLING_ACCOUNT_NAME = env_str("FOCUS_BILLING_ACCOUNT_NAME", "CostCenter")

# --- Alerts: links in e-mails and webhooks, webhook delivery ---------------------------------
SITE_URL = (env_str("SITE_URL", "http://localhost:8000") or "").rstrip("/")
WEBHOOK_TIMEOUT = env_int("WEBHOOK_TIMEOUT", 10, minimum=1)


# --- E-mailed reports: charts are rendered by a headless Chromium --------------------------------
def _browser_path() -> str | None:
    import shutil

    found = env_str("BROWSER_PATH")
    if found:
        return found
    # Without one the reports still go out, with a line saying the charts are unavailable.
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        if path := shutil.which(name):
            return path
    return None


BROWSER_PATH = _browser_path()

# --- Prometheus ------------------------------------------------------------------------------
PROMETHEUS_URL = env_str("PROMETHEUS_URL")

# --- Pricing ---------------------------------------------------------------------------------
# One currency per installation; the catalog file must name the same one.
CURRENCY = (env_str("CURRENCY", "USD") or "USD").upper()

# --- REST API --------------------------------------------------------------------------------
# Throttle counters in this Redis (redis://…), shared by every web process; unset: per process.
API_THROTTLE_CACHE_URL = env_str("API_THROTTLE_CACHE_URL")
REST_FRAMEWORK = {
    # Bearer first: its WWW-Authenticate challenge turns unauthenticated API calls into 401s.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "costcenter.api_auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["costcenter.api_auth.TokenRateThrottle"],
    # Per token (per user for sessions); "off" disables. Validated when the throttle first runs.
    "DEFAULT_THROTTLE_RATES": {"api_token": env_str("API_THROTTLE_RATE", "600/min")},
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "COERCE_DECIMAL_TO_STRING": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "CostCenter API",
    "DESCRIPTION": "Cost per successful task for LLM workloads on GPU pools and hosted APIs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a "kind" field; give each choice set its own schema name.
    "ENUM_NAME_OVERRIDES": {"EndpointKindEnum": "costcenter.models.EndpointKind"},
}

# --- Logging: to stderr, where process managers collect it ------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"pgserver": {"level": "WARNING"}},
}
