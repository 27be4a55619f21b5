"""Where settings' raw texts come from: the environment, the TOML file, the secret key file.

Each raw text keeps a label naming where it came from (``POSTHASTE_HTTP_PORT``, or
``http_port in /etc/posthaste.toml``), so that an invalid value's ``ConfigError`` says where to
look. The environment wins over the file; an empty value counts as unset.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from posthaste.config.parsers import SECRET_KEY_MIN_LENGTH
from posthaste.errors import ConfigError

T = TypeVar("T")

ENV_PREFIX = "POSTHASTE_"
CONFIG_FILE_VARIABLE = "POSTHASTE_CONFIG"
SECRET_KEY_FILENAME = "secret.key"
PREVIOUS_KEYS_FILENAME = "secret.key.previous"  # one key per line, newest first


@dataclass(frozen=True)
class _Raw:
    label: str
    text: str


class Sources:
    """Raw setting texts by key, each with the name errors give it; later ``set`` calls win."""

    def __init__(self) -> None:
        self._raw: dict[str, _Raw] = {}

    def set(self, key: str, label: str, text: str) -> None:
        """Keep ``text`` for ``key`` unless it is blank (an empty value counts as unset)."""
        if text.strip():
            self._raw[key] = _Raw(label, text)

    def get(self, key: str, parse: Callable[[str], T], default: T) -> T:
        """``parse`` applied to the value of ``key``, or ``default`` when it is unset."""
        raw = self._raw.get(key)
        if raw is None:
            return default
        try:
            return parse(raw.text)
        except ValueError as exc:
            raise ConfigError(f"{raw.label}: {exc}") from exc

    def label(self, key: str) -> str:
        """Where the value of ``key`` came from, or its environment variable when unset."""
        raw = self._raw.get(key)
        return raw.label if raw is not None else ENV_PREFIX + key.upper()


@dataclass(frozen=True)
class RegionTable:
    """One ``[regions.<name>]`` (or ``[destinations|pools.<name>]``, ``group``) table of the TOML
    file, as read (validated in ``settings.py``)."""

    name: str
    path: Path
    values: Mapping[str, object]
    group: str = "regions"

    @property
    def label(self) -> str:
        return f"{self.group}.{self.name} in {self.path}"

    def key_label(self, key: str) -> str:
        return f"{self.group}.{self.name}.{key} in {self.path}"

    def sources(self) -> Sources:
        """The table's values as raw texts, each labelled with its key in the file."""
        sources = Sources()
        for key, value in self.values.items():
            label = self.key_label(key)
            sources.set(key, label, toml_text(value, label))
        return sources


DESTINATIONS = "destinations"  # TOML only: ``[destinations.<name>]`` policy tables
POOLS = "pools"  # TOML only: ``[pools.<name>]`` source addresses of mx delivery


def read_sources(
    environ: Mapping[str, str], keys: Sequence[str]
) -> tuple[Sources, list[RegionTable]]:
    """The raw text of every key: the TOML file's (if ``POSTHASTE_CONFIG`` names one), then the
    environment's over it; and the file's region tables."""
    sources = Sources()
    region_tables: list[RegionTable] = []
    config_path = environ.get(CONFIG_FILE_VARIABLE, "").strip()
    if config_path:
        region_tables = _apply_config_file(sources, Path(config_path).expanduser(), keys)
    for key in keys:
        sources.set(key, ENV_PREFIX + key.upper(), environ.get(ENV_PREFIX + key.upper(), ""))
    return sources, region_tables


def _apply_config_file(sources: Sources, path: Path, keys: Sequence[str]) -> list[RegionTable]:
    """Put the TOML file's values into ``sources``; return its ``[regions.<name>]`` tables."""
    document = _read_toml(path)
    unknown = sorted(set(document) - set(keys) - {DESTINATIONS, POOLS})
    if unknown:
        names = ", ".join(unknown)
        raise ConfigError(f"{CONFIG_FILE_VARIABLE} {path}: unknown keys: {names}")
    tables: list[RegionTable] = []
    for key, value in document.items():
        if key == "regions" and isinstance(value, dict):
            tables.extend(_split_regions_table(sources, value, path))
        elif key in (DESTINATIONS, POOLS):
            tables.extend(_named_tables(key, value, path))
        else:
            label = f"{key} in {path}"
            sources.set(key, label, toml_text(value, label))
    return tables


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError as exc:
        raise ConfigError(f"{CONFIG_FILE_VARIABLE}: file not found: {path}") from exc
    except OSError as exc:
        raise ConfigError(f"{CONFIG_FILE_VARIABLE}: cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{CONFIG_FILE_VARIABLE}: {path} is not valid TOML: {exc}") from exc


def _split_regions_table(
    sources: Sources, table: dict[str, object], path: Path
) -> list[RegionTable]:
    """Read ``[regions]``: an optional ``names`` list and one sub-table per region."""
    tables: list[RegionTable] = []
    for name, value in table.items():
        label = f"regions.{name} in {path}"
        if isinstance(value, dict):
            tables.append(RegionTable(name, path, value))
        elif name == "names":
            sources.set("regions", label, toml_text(value, label))
        else:
            raise ConfigError(
                f"{label}: expected a table such as [regions.{name}] or names = [...]"
            )
    return tables


def _named_tables(group: str, table: object, path: Path) -> list[RegionTable]:
    """Read ``[destinations]`` or ``[pools]``: one sub-table per name (``default`` among them)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{group} in {path}: expected tables such as [{group}.default]")
    tables: list[RegionTable] = []
    for name, value in table.items():
        if not isinstance(value, dict):
            label = f"{group}.{name} in {path}"
            raise ConfigError(f"{label}: expected a table such as [{group}.{name}]")
        tables.append(RegionTable(name, path, value, group))
    return tables


def toml_text(value: object, label: str) -> str:
    """A TOML value as the text an environment variable would hold (lists joined by commas)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return ",".join(toml_text(item, label) for item in value)
    raise ConfigError(f"{label}: expected a string, number, boolean or list of strings")


# --- the secret key file ---------------------------------------------------------------------


def load_or_create_secret_key(data_dir: Path) -> str:
    """The key kept in ``<data_dir>/secret.key``, created (mode 0600) on first start on SQLite.

    A new key is written to a temporary file and hard-linked into place: the link fails when the
    name exists, so processes starting at once all read the same, complete key.
    """
    path = data_dir / SECRET_KEY_FILENAME
    try:
        if not path.exists():
            _create_secret_key_file(path)
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"POSTHASTE_DATA_DIR: cannot keep the secret key in {path}: {reason}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: expected a secret key in text, got binary data") from exc
    if len(key) < SECRET_KEY_MIN_LENGTH:
        message = f"expected a secret key of at least {SECRET_KEY_MIN_LENGTH} characters"
        raise ConfigError(f"{path}: {message}, got {len(key)}")
    return key


def read_previous_secret_keys(data_dir: Path) -> tuple[str, ...]:
    """The keys a rotation moved out of ``secret.key``, newest first; none without the file."""
    path = data_dir / PREVIOUS_KEYS_FILENAME
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the previous secret keys: {exc}") from exc
    keys = tuple(line.strip() for line in lines if line.strip())
    if any(len(key) < SECRET_KEY_MIN_LENGTH for key in keys):
        raise ConfigError(
            f"{path}: every line must be a key of {SECRET_KEY_MIN_LENGTH}+ characters"
        )
    return keys


def rotate_secret_key_file(data_dir: Path) -> str:
    """A new key in ``secret.key``; the old one goes first in ``secret.key.previous``. Both files
    are replaced atomically (written aside, then renamed), the previous keys first, so that a
    crash between the two leaves the old key readable from one of them. The new key."""
    current = load_or_create_secret_key(data_dir)
    previous = (current, *read_previous_secret_keys(data_dir))
    _replace_file(data_dir / PREVIOUS_KEYS_FILENAME, "".join(f"{key}\n" for key in previous))
    key = secrets.token_urlsafe(48)
    _replace_file(data_dir / SECRET_KEY_FILENAME, key + "\n")
    return key


def _replace_file(path: Path, content: str) -> None:
    descriptor, temp_name = tempfile.mkstemp(dir=path.parent, prefix=".secret-key-")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as temp:
            temp.write(content)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise


def _create_secret_key_file(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temp_name = tempfile.mkstemp(dir=path.parent, prefix=".secret-key-")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as temp:
            temp.write(secrets.token_urlsafe(48) + "\n")
            temp.flush()
            os.fsync(temp.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temp_name, path)
    finally:
        os.unlink(temp_name)
