"""An OS-keyring stand-in for tests: a ``keyring`` backend that keeps entries in a JSON file.

Select it as a real user would select a keyring plug-in, through ``keyring``'s own
``PYTHON_KEYRING_BACKEND=fakekeyring.FileKeyring`` (with ``tests/support`` on ``PYTHONPATH``);
``SBX_TEST_KEYRING_FILE`` names the file. sbx treats it like any OS keyring: it is neither
keyring's ``fail``/``null`` backend nor a ``keyrings.alt`` file store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError


class FileKeyring(KeyringBackend):
    priority = 1  # keyring declares it as a classproperty; a plain value reads the same

    @property
    def path(self) -> Path:
        return Path(os.environ["SBX_TEST_KEYRING_FILE"])

    def _load(self) -> dict[str, str]:
        try:
            loaded: dict[str, str] = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return loaded

    def _save(self, data: dict[str, str]) -> None:
        self.path.write_text(json.dumps(data), encoding="utf-8")

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}\0{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._load()
        data[f"{service}\0{username}"] = password
        self._save(data)

    def delete_password(self, service: str, username: str) -> None:
        data = self._load()
        if data.pop(f"{service}\0{username}", None) is None:
            raise PasswordDeleteError("not found")
        self._save(data)


__all__ = ["FileKeyring"]
