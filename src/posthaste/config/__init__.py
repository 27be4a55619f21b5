"""Settings: the only reader of the environment, validated once at start.

Every setting comes from a ``POSTHASTE_<KEY>`` variable or from the TOML file named by
``POSTHASTE_CONFIG`` (the same keys in lowercase, without the prefix); the environment wins.
An empty value counts as unset. An invalid value stops the process with a one-line
``ConfigError`` naming where the value came from and what is expected.

TOML may also give regions their own delivery, SMTP timeout, MX host and SPF include::

    [regions.eu-west-1]
    delivery = "smtp://user:pass@relay.eu.example.com:587"
    smtp_timeout = "2m"
    mx_host = "mx.eu.example.com"

Because ``regions`` is then a table, a TOML file that also lists the region names writes
``names = ["us-east-1", "eu-west-1"]`` inside ``[regions]``.

The package's rooms: ``settings.py`` (the ``Settings`` type, its defaults and the rules that span
keys), ``sources.py`` (environment, TOML file, secret key file, and the labels errors name) and
``parsers.py`` (one value's text to its value).
"""

from posthaste.config.parsers import (
    ALL_ROLES,
    ROLE_ORDER,
    SECRET_KEY_MIN_LENGTH,
    Role,
    Roles,
    TlsMode,
    roles_label,
)
from posthaste.config.settings import (
    DEFAULT_DATA_DIR,
    SETTING_KEYS,
    DeliveryKind,
    DeliveryTarget,
    Settings,
    default_database_url,
    default_public_url,
)
from posthaste.config.sources import (
    CONFIG_FILE_VARIABLE,
    ENV_PREFIX,
    SECRET_KEY_FILENAME,
    load_or_create_secret_key,
)

__all__ = [
    "ALL_ROLES",
    "CONFIG_FILE_VARIABLE",
    "DEFAULT_DATA_DIR",
    "ENV_PREFIX",
    "ROLE_ORDER",
    "SECRET_KEY_FILENAME",
    "SECRET_KEY_MIN_LENGTH",
    "SETTING_KEYS",
    "DeliveryKind",
    "DeliveryTarget",
    "Role",
    "Roles",
    "Settings",
    "TlsMode",
    "default_database_url",
    "default_public_url",
    "load_or_create_secret_key",
    "roles_label",
]
