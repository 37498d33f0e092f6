"""The mount policy's rule names (scripts and ``sbx explain`` read them; never rename one), the
host paths each rule blocks, and the hint each refusal carries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

UNSAFE_CHARACTERS: Final = "unsafe_characters"
SOURCE_MISSING: Final = "source_missing"
DOCKER_SOCKET: Final = "docker_socket"
SYSTEM_PATH: Final = "system_path"
SBX_STATE: Final = "sbx_state"
CREDENTIAL_DIR: Final = "credential_dir"
CONFIGURED_BLOCK: Final = "configured_block"
PARENT_OF_BLOCKED: Final = "parent_of_blocked"
OUTSIDE_ALLOWED_ROOTS: Final = "outside_allowed_roots"
RELATIVE_TARGET: Final = "relative_target"
RESERVED_TARGET: Final = "reserved_target"
SOCKET: Final = "socket"
SPECIAL_FILE: Final = "special_file"
SOURCE_UNREADABLE: Final = "source_unreadable"
SOURCE_CHANGED: Final = "source_changed"
KIT_WRITABLE: Final = "kit_writable"  # a kit the run uses would be writable in it (kitpins)

RULES: Final[tuple[str, ...]] = (
    UNSAFE_CHARACTERS,
    DOCKER_SOCKET,
    SYSTEM_PATH,
    SBX_STATE,
    CREDENTIAL_DIR,
    CONFIGURED_BLOCK,
    PARENT_OF_BLOCKED,
    OUTSIDE_ALLOWED_ROOTS,
    SOURCE_MISSING,
    RELATIVE_TARGET,
    RESERVED_TARGET,
    SOCKET,
    SPECIAL_FILE,
    SOURCE_UNREADABLE,
    SOURCE_CHANGED,
    KIT_WRITABLE,
)

# --- what is blocked ------------------------------------------------------------------------------

# Docker parses --mount as one CSV record: a comma starts a new field; CR/LF end the record; NUL
# cannot cross the exec boundary at all. (PEERS A.1, `attempt_container.rs::safe_mount`.)
UNSAFE_PATH_CHARACTERS: Final[Mapping[str, str]] = {
    ",": "a comma",
    "\n": "a line feed",
    "\r": "a carriage return",
    "\0": "a NUL byte",
}

# Credential roots joined onto every home (OpenClaw's list, PEERS B.2). `.docker` is in the list
# for completeness but is matched first by the Docker family below.
CREDENTIAL_NAMES: Final[tuple[str, ...]] = (
    ".ssh", ".aws", ".docker", ".config", ".gnupg", ".netrc", ".npm", ".cargo",
    # Cluster, cloud and registry logins, token files, and the git settings a sandbox could
    # use to run code on the host (core.fsmonitor, credential helpers in ~/.gitconfig).
    ".kube", ".minikube", ".azure", ".oci", ".terraform.d", ".vault-token", ".git-credentials",
    ".gitconfig", ".pypirc", ".npmrc", ".yarnrc", ".yarnrc.yml", ".m2", ".gradle",
    ".composer", ".pgpass", ".my.cnf", ".s3cfg", ".boto", ".password-store",
    ".local/share/keyrings", ".mozilla", ".thunderbird", ".pki",
    ".bash_history", ".zsh_history",
)

# Whoever can reach a container engine's socket or state owns the host.
DOCKER_PATHS: Final[tuple[str, ...]] = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run/docker",
    "/run/docker",
    "/run/containerd",
    "/var/run/containerd",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/podman",
    "/var/run/podman",
    "/run/buildkit",
    "/var/run/buildkit",
    # The rest of the container and VM engine family: CRI-O, Kubernetes' k3s, libvirt, LXD,
    # incus, nerdctl/containerd's rootful state.
    "/run/crio",
    "/var/run/crio",
    "/var/lib/containers",
    "/run/k3s",
    "/var/lib/rancher",
    "/run/libvirt",
    "/var/run/libvirt",
    "/var/lib/libvirt",
    "/var/lib/lxd",
    "/var/snap/lxd",
    "/var/lib/incus",
    "/run/incus",
    "/var/run/incus",
    "/run/dockershim.sock",
    "/var/run/dockershim.sock",
)
# Rootless engines put their socket in each user's XDG_RUNTIME_DIR; the uid is not known here.
DOCKER_SOCKET_GLOBS: Final[tuple[str, ...]] = (
    "/run/user/*/docker.sock",
    "/var/run/user/*/docker.sock",
)
# A file with one of these names is an engine socket wherever it lives (e.g. a copy or a
# bind-mounted socket inside a project).
DOCKER_SOCKET_NAMES: Final[frozenset[str]] = frozenset({
    "docker.sock", "podman.sock", "containerd.sock", "crio.sock", "buildkitd.sock",
    "libvirt-sock", "incus.socket", "dockershim.sock",
})
# An sbx state home (secrets, run records) wherever a user's environment may have put one.
DEFAULT_STATE_HOME: Final = ".local/state/sbx"

# Exactly "/" (everything is inside it, so it cannot be a tree rule) plus trees blocked entirely.
SYSTEM_ROOT: Final = "/"
SYSTEM_TREES: Final[tuple[str, ...]] = ("/etc", "/proc", "/sys", "/dev", "/boot")

# Container paths no mount may take. Equal-only, except for the trees below where anything
# inside is refused too (kernel interfaces, and sbx's own runtime files).
RESERVED_TARGETS: Final[frozenset[str]] = frozenset({
    "/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/tmp",  # noqa: S108 - a container path sbx mounts its own tmpfs on, not a host temp file
    "/sbx", "/var/run", "/run", "/proc", "/sys", "/dev",
})
RESERVED_TARGET_TREES: Final[tuple[str, ...]] = ("/proc", "/sys", "/dev", "/sbx")

HINTS: Final[Mapping[str, str]] = {
    UNSAFE_CHARACTERS: "Rename the path, or mount a directory whose path has no comma, line "
                       "break or NUL.",
    SOURCE_MISSING: "Create the directory first or correct the path; sbx does not let Docker "
                    "create it (Docker would create it on the host, owned by root).",
    DOCKER_SOCKET: "A sandbox never gets access to a container engine; run workloads that need "
                   "Docker outside sbx.",
    SYSTEM_PATH: "Mount a project directory instead; host system directories are never "
                 "mounted.",
    SBX_STATE: "sbx's state holds secrets and run records; mount a project directory instead.",
    CREDENTIAL_DIR: "Mount only the project directory the workload needs; credentials reach "
                    "the sandbox through `sbx secret set`, never through a mount.",
    CONFIGURED_BLOCK: "The path is blocked by `[mounts]` in the config file; mount another "
                      "directory or remove the entry there.",
    PARENT_OF_BLOCKED: "Mount a narrower directory that holds only what the workload needs.",
    OUTSIDE_ALLOWED_ROOTS: "Mount a directory inside one of the allowed roots, or add a root "
                           "to `[mounts]` in the config file.",
    RELATIVE_TARGET: "Give the container path as an absolute path without '..', e.g. /data.",
    RESERVED_TARGET: "Pick another container path, e.g. /mnt/NAME.",
    SOCKET: "A socket is a door to whatever listens on it; mount a directory without sockets "
            "(move the socket out, or mount a narrower directory).",
    SPECIAL_FILE: "Mount a directory or a regular file; devices and FIFOs are never mounted.",
    SOURCE_UNREADABLE: "sbx could not resolve the path to check it; mount a plain directory "
                       "that this user can read.",
    SOURCE_CHANGED: "The path changed between the check and the mount (a component became a "
                    "symbolic link); run again, and find out what is modifying it.",
    KIT_WRITABLE: "Keep the kit outside the writable mount, mount a directory that does not "
                  "hold it, or mount it read-only (--access ro, --mount SRC:DST:ro).",
}

