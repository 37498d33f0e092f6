"""The well-known capability type names of KIT-SPEC-V3 §2, defined once for every module."""

from __future__ import annotations

import re
from typing import Final

NS: Final = "com.docker.sandbox/"
NETWORK_V1: Final = f"{NS}network-policy@1"
NETWORK_V2: Final = f"{NS}network-policy@2"
CREDENTIAL: Final = f"{NS}credential@1"
SSH_AGENT: Final = f"{NS}ssh-agent@1"
VOLUME: Final = f"{NS}volume@1"
HOST_MOUNT: Final = f"{NS}host-mount@1"
PORT: Final = f"{NS}port@1"
USB_DEVICE: Final = f"{NS}usb-device@1"
RESOURCES: Final = f"{NS}resources@1"
PRIVILEGED: Final = f"{NS}privileged@1"
LONG_RUNNING: Final = f"{NS}long-running@1"
LIFECYCLE: Final = f"{NS}lifecycle@1"
AGENT_CONTEXT: Final = f"{NS}agent-context@1"
AGENT_SESSIONS: Final = f"{NS}agent-sessions@1"
INTERACTIVE_SESSIONS: Final = f"{NS}agent-interactive-sessions@1"
AGENT_SKILLS: Final = f"{NS}agent-skills@1"
AGENT_SKILL: Final = f"{NS}agent-skill@1"
GIT_IDENTITY: Final = f"{NS}git-identity@1"
KIT_REGISTRY: Final = f"{NS}kit-registry@1"
SBX: Final = f"{NS}sbx@1"
ACP: Final = f"{NS}acp@1"

# Where a published kit stages its sources in its image (KIT-SPEC-V3 §6.2).
STAGE_ROOT: Final = "/usr/share/sandbox/kit"
# Where the host's skills store is mounted (read-only) for a destination that also takes
# agent-skill@1 bundles: a read-only mount at the destination could not take their links.
SKILLS_STAGING: Final = "/.sbx/skills-store"
# ssh-agent@1's relay directory inside the sandbox (mounted read-only) and its socket there.
SSH_AGENT_DIR: Final = "/run/sbx-ssh-agent"
SSH_AGENT_SOCKET: Final = f"{SSH_AGENT_DIR}/agent.sock"
# A skill's name (agent-skill@1's, and the host store's directories): no separator, no leading
# dot or dash, at most 255 bytes.
SKILL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")

KNOWN_TYPES: Final = frozenset({
    NETWORK_V1, NETWORK_V2, CREDENTIAL, SSH_AGENT, VOLUME, HOST_MOUNT, PORT, USB_DEVICE,
    RESOURCES, PRIVILEGED, LONG_RUNNING, LIFECYCLE, AGENT_CONTEXT, AGENT_SESSIONS,
    INTERACTIVE_SESSIONS, AGENT_SKILLS, AGENT_SKILL, GIT_IDENTITY, KIT_REGISTRY, SBX, ACP})

__all__ = ["ACP", "AGENT_CONTEXT", "AGENT_SESSIONS", "AGENT_SKILL", "AGENT_SKILLS",
           "CREDENTIAL", "GIT_IDENTITY", "HOST_MOUNT", "INTERACTIVE_SESSIONS", "KIT_REGISTRY",
           "KNOWN_TYPES", "LIFECYCLE", "LONG_RUNNING", "NETWORK_V1", "NETWORK_V2", "NS", "PORT",
           "PRIVILEGED", "RESOURCES", "SBX", "SKILLS_STAGING", "SSH_AGENT", "SSH_AGENT_DIR",
           "SSH_AGENT_SOCKET", "STAGE_ROOT", "USB_DEVICE", "VOLUME"]
