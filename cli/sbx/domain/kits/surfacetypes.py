"""The permission surface's values (KIT-SPEC-V3 §5.1): a normalized :class:`Surface` as the
lock stores it, and a :class:`Widening` the gate reports. Apart from the projection and the
gate (:mod:`sbx.domain.kits.surface`) so the capability handlers, which the projection drives,
can name them without importing it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

# attribute name -> JSON field name (the lock's spelling, §5.1).
JSON_FIELDS: Final = {
    "network_install_allow": "networkInstallAllow",
    "network_install_deny": "networkInstallDeny",
    "network_runtime_allow": "networkRuntimeAllow",
    "network_runtime_deny": "networkRuntimeDeny",
    "network_install_http_allow": "networkInstallHTTPAllow",
    "network_install_http_deny": "networkInstallHTTPDeny",
    "network_runtime_http_allow": "networkRuntimeHTTPAllow",
    "network_runtime_http_deny": "networkRuntimeHTTPDeny",
    "credentials_install": "credentialsInstall",
    "credentials_runtime": "credentialsRuntime",
    "credential_destinations": "credentialDestinations",
    "ssh_agent": "sshAgent",
    "storage_paths": "storagePaths",
    "host_mount_paths": "hostMountPaths",
    "skills_paths": "skillsPaths",
    "skills_write_paths": "skillsWritePaths",
    "ports": "ports",
    "usb": "usb",
    "privileged": "privileged",
    "services": "services",
}

CATEGORIES: Final = (
    "network.install.allow",
    "network.runtime.allow",
    "network.install.deny-removed",
    "network.runtime.deny-removed",
    "network.install.http.allow",
    "network.runtime.http.allow",
    "network.install.http.deny-removed",
    "network.runtime.http.deny-removed",
    "credentials.install",
    "credentials.runtime",
    "credentials.destinations",
    "ssh-agent",
    "storage",
    "host-mount",
    "skills",
    "skills.write",
    "ports",
    "usb",
    "privileged",
    "services",
)


@dataclass(frozen=True)
class Surface:
    """A normalized permission surface. Lists are sorted and deduplicated on construction."""

    network_install_allow: tuple[str, ...] = ()
    network_install_deny: tuple[str, ...] = ()
    network_runtime_allow: tuple[str, ...] = ()
    network_runtime_deny: tuple[str, ...] = ()
    network_install_http_allow: tuple[str, ...] = ()
    network_install_http_deny: tuple[str, ...] = ()
    network_runtime_http_allow: tuple[str, ...] = ()
    network_runtime_http_deny: tuple[str, ...] = ()
    credentials_install: tuple[str, ...] = ()
    credentials_runtime: tuple[str, ...] = ()
    credential_destinations: tuple[str, ...] = ()
    ssh_agent: tuple[str, ...] = ()
    storage_paths: tuple[str, ...] = ()
    host_mount_paths: tuple[str, ...] = ()
    skills_paths: tuple[str, ...] = ()
    skills_write_paths: tuple[str, ...] = ()
    ports: tuple[str, ...] = ()
    usb: tuple[str, ...] = ()
    privileged: bool = False
    services: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "privileged":
                object.__setattr__(self, f.name, tuple(sorted(set(getattr(self, f.name)))))
        object.__setattr__(self, "privileged", bool(self.privileged))

    def to_json(self) -> dict[str, Any]:
        """The lock's JSON form: camelCase fields, empty ones omitted (Go ``omitempty``)."""
        out: dict[str, Any] = {}
        for attr, key in JSON_FIELDS.items():
            value = getattr(self, attr)
            if value:
                out[key] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Surface:
        """Read a surface back from a lock; raise ``ValueError`` if a field has the wrong type.

        Missing fields are empty, so a lock written before the HTTP fields existed still reads
        (:func:`diff_widenings` reconstructs its implied HTTP grants). Unknown fields are
        ignored, which can only make the granted surface smaller: the gate then over-prompts
        rather than granting silently.
        """
        if not isinstance(data, Mapping):
            raise ValueError("a permission surface is a JSON object")
        values: dict[str, Any] = {}
        for attr, key in JSON_FIELDS.items():
            if key not in data or data[key] is None:
                continue
            value = data[key]
            if attr == "privileged":
                if not isinstance(value, bool):
                    raise ValueError(f"surface field {key} must be a boolean")
                values[attr] = value
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                values[attr] = tuple(value)
            else:
                raise ValueError(f"surface field {key} must be a list of strings")
        return cls(**values)

    def is_empty(self) -> bool:
        return not self.to_json()


@dataclass(frozen=True)
class Widening:
    """One way a candidate surface asks for more than the granted one."""

    category: str
    detail: str

    def __str__(self) -> str:
        return f"{self.category}: {self.detail}"

    def as_dict(self) -> dict[str, str]:
        return {"category": self.category, "detail": self.detail}


def format_widenings(widenings: Iterable[Widening]) -> str:
    """Render widenings for an approval prompt: one ``  + <category>: <detail>`` line each."""
    return "\n".join(f"  + {w}" for w in widenings)


__all__ = ["CATEGORIES", "JSON_FIELDS", "Surface", "Widening", "format_widenings"]
