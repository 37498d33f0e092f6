"""Refusals before anything starts: the engine and platform, config, kits, mounts and
permissions."""

from __future__ import annotations

from typing import Final

from sbx.base.reasons.codes import ExitStatus, Reason, ReasonInfo

_R = Reason
_E = ExitStatus

ENTRIES: Final[dict[Reason, ReasonInfo]] = {
    _R.DOCKER_UNREACHABLE: ReasonInfo(
        "Docker engine unreachable",
        "sbx could not talk to a Docker engine: it is not running, its socket is missing, "
        "this user may not open the socket, or DOCKER_HOST points somewhere else.",
        "Start the engine (`dockerd`, or `systemctl start docker`), check `docker version`, "
        "and make sure this user may use the socket (the `docker` group) or unset DOCKER_HOST.",
        _E.REFUSED,
    ),
    _R.IMAGE_MISSING: ReasonInfo(
        "Image not present locally",
        "The image a kit needs is not in the local image store. sbx never pulls at run time, "
        "so a missing image stops the run before anything starts.",
        "Fetch it explicitly with `sbx pull REF` (or build it), then run again.",
        _E.REFUSED,
    ),
    _R.RESOURCE_LIMITS_UNENFORCED: ReasonInfo(
        "Resource limits not enforced",
        "The engine accepted memory/pids/cpu limits but does not apply them, typically a "
        "rootless engine without cgroup delegation.",
        "Use a rootful engine, or enable cgroup v2 delegation for the rootless one; "
        "`sbx doctor` names each limit that is not applied.",
        _E.REFUSED,
    ),
    _R.ROOT_USER: ReasonInfo(
        "Sandbox user would be root",
        "The sandbox would run as uid 0 or gid 0 (the image's USER is root and the configured "
        "fallback user is root, or the image's user resolves to uid/gid 0).",
        "Give the image a non-root USER with a non-root group, or set `[sandbox] user` to a "
        "non-zero uid (used as uid and gid) in the config file.",
        _E.REFUSED,
    ),
    _R.UNSUPPORTED_PLATFORM: ReasonInfo(
        "Unsupported platform",
        "sbx runs only on unix hosts.",
        "Run sbx on Linux (or another unix) with a Docker engine.",
        _E.REFUSED,
    ),
    _R.INVALID_CONFIG: ReasonInfo(
        "Invalid configuration",
        "A config section has an unknown key or an out-of-range value. An invalid section is "
        "never replaced by defaults: the sandbox is unavailable until it is fixed.",
        "Fix the key named in the message (file:line), or remove it to use the default; "
        "`sbx explain WORKLOAD` shows where every value came from.",
        _E.REFUSED,
    ),
    _R.INVALID_KIT: ReasonInfo(
        "Invalid kit descriptor",
        "A kit descriptor failed strict validation (unknown field, wrong type, bad value).",
        "Fix the field at the dotted path and file:line:col given in the message.",
        _E.REFUSED,
    ),
    _R.KIT_NOT_FOUND: ReasonInfo(
        "No kit by that name",
        "A kit was named by a bare word that is no path here, no kit pinned by `sbx pull` and "
        "none of the bundled agents' short names. A bare word is never sent to a registry.",
        "List the bundled kits with `sbx kit ls`; name a kit directory by its path (`./DIR`), "
        "a registry kit by its full reference (`sbx pull HOST/REPO:TAG`).",
        _E.REFUSED,
    ),
    _R.KIT_SET_DIGEST: ReasonInfo(
        "Kit set pin does not match",
        "A kind: set kit pins a member kit's digest, and the kit sbx has pulled under that "
        "reference is a different one (or was never pulled from a registry), so the set would "
        "not run what it names.",
        "Pull the pinned digest with `sbx pull REF@DIGEST`, or update the set's digest.",
        _E.REFUSED,
    ),
    _R.KIT_INCOHERENT: ReasonInfo(
        "Kit set does not resolve",
        "The kits given together do not form one coherent composition (not exactly one "
        "workload, an unmet requirement, a conflict, two owners of one name...).",
        "Add or drop kits as each listed problem says.",
        _E.REFUSED,
    ),
    _R.UNSUPPORTED_CAPABILITY: ReasonInfo(
        "Required capability not supported",
        "A kit requires a capability type that this sbx does not implement. Optional ones are "
        "skipped and recorded; required ones refuse the run (fail closed).",
        "Mark the capability `optional: true` in the kit if it can do without, or use a "
        "version of sbx that implements the type.",
        _E.REFUSED,
    ),
    _R.PUBLISH_REFUSED: ReasonInfo(
        "Port cannot be published",
        "A `-p/--publish` asked for what sbx never publishes: a host address beyond loopback "
        "(anything beyond this machine could then reach the sandbox), or a udp port (only tcp "
        "is forwarded). Kit ports (port@1) have the same bounds.",
        "Publish over tcp on loopback: `-p 127.0.0.1:HOST_PORT:PORT` (or just `-p PORT` for a "
        "free loopback port).",
        _E.REFUSED,
    ),
    _R.PORT_TAKEN: ReasonInfo(
        "Host port already taken",
        "A host port asked for with `-p HOST_PORT:PORT` is held by another process (or "
        "another sandbox), so it cannot be published; nothing of the run is left.",
        "Pick another host port, or leave it out (`-p PORT`) for a free one; "
        "`ss -ltnp 'sport = :HOST_PORT'` names who holds it.",
        _E.REFUSED,
    ),
    _R.CREDENTIAL_UNBOUND: ReasonInfo(
        "Required credential not bound",
        "A kit requires a credential for a service that has no secret in sbx's store (for "
        "an OAuth credential: no tokens stored on the host), or the egress proxy was asked "
        "to use a credential whose secret or tokens are gone (502).",
        "Store it with `printf %s \"$TOKEN\" | sbx secret set SERVICE`, or for an OAuth "
        "credential log in with `sbx secret login SERVICE`.",
        _E.REFUSED,
    ),
    _R.MOUNT_BLOCKED: ReasonInfo(
        "Mount blocked by the mount policy",
        "A workspace or --mount source is a system path, a credential directory, a Docker "
        "socket, a parent of one of those, outside the allowed roots, or otherwise unsafe; or "
        "it would let the sandbox rewrite a kit the run uses (rule kit_writable: the mount is "
        "the kit's directory or inside it, or the kit is named through a link inside it).",
        "Mount a narrower directory that holds only what the workload needs; the message "
        "names the rule that blocked it.",
        _E.REFUSED,
    ),
    _R.PERMISSION_WIDENED: ReasonInfo(
        "Kit asks for more than was approved",
        "A kit asks for more than what was approved for it, and the widening was not "
        "approved: a new version of a pulled kit (`sbx pull`), or a local kit directory that "
        "changed since its last approved run in this state home (`sbx run`) — a new host, a "
        "removed deny rule, a credential, or a credential sent to another host "
        "(credentials.destinations). A kit inside a sandbox's writable workspace may have "
        "been rewritten by that sandbox.",
        "Review the listed widenings (did you make them?), then run the command again on a "
        "terminal and confirm, or add `--accept` (the refusal prints the command).",
        _E.REFUSED,
    ),
    _R.PERMISSION_UNAPPROVED: ReasonInfo(
        "Kit permissions not approved",
        "The first pull of a kit shows every permission it asks for (hosts it may reach, "
        "credentials, ports, storage, privileged...) and needs approval, which was not given: "
        "no terminal to confirm on, the question was declined, and no --accept.",
        "Review the listed permissions, then pull again on a terminal and confirm, or pass "
        "`--accept`.",
        _E.REFUSED,
    ),
    _R.CONSENT_REQUIRED: ReasonInfo(
        "Explicit consent required",
        "A kit asks for something that removes sandbox protections (privileged@1), which sbx "
        "grants only when the user consents on the command line for that run.",
        "Pass --allow-privileged if you accept running the sandbox privileged, or drop the "
        "kit that asks for it.",
        _E.REFUSED,
    ),
    _R.GIT_IDENTITY_MISSING: ReasonInfo(
        "No git identity to give the sandbox",
        "A kit requires git-identity@1 (the user's git user.name and user.email inside the "
        "sandbox), and the host's global git config names no usable pair. sbx never takes "
        "it from a repository's config.",
        "Set a global identity: git config --global user.name 'Your Name' && "
        "git config --global user.email you@example.com (or mark the capability optional).",
        _E.REFUSED,
    ),
    _R.SSH_AGENT_MISSING: ReasonInfo(
        "No SSH agent to relay into the sandbox",
        "A kit requires ssh-agent@1 (signatures from the user's SSH agent, relayed so the keys "
        "stay on the host), and SSH_AUTH_SOCK names no agent socket sbx can reach.",
        "Start an agent and add a key: eval \"$(ssh-agent -s)\" && ssh-add (or mark the "
        "capability optional).",
        _E.REFUSED,
    ),
    _R.LONG_RUNNING_UNNAMED: ReasonInfo(
        "A long-running workload in a one-shot run",
        "The workload requires long-running@1 (it keeps running apart from any session), and a "
        "one-shot sbx run ends its sandbox with its session.",
        "Run it as a named sandbox: sbx run --name NAME WORKLOAD (detach with ctrl-p ctrl-q, "
        "stop it with sbx stop NAME).",
        _E.REFUSED,
    ),
    _R.SKILL_NO_DESTINATION: ReasonInfo(
        "A bundled skill with nowhere to go",
        "A kit requires agent-skill@1 (a skill bundled in its image), and no selected kit "
        "declares an agent-skills@1 directory where the agent looks for skills.",
        "Add a kit that declares agent-skills@1 (the agent's kit usually does), or mark the "
        "agent-skill@1 entry optional: true.",
        _E.REFUSED,
    ),
    _R.SKILL_NAME_INVALID: ReasonInfo(
        "Not a valid skill name",
        "A skill's name in the host's skills store is a directory name the agent sees: letters, "
        "digits, '.', '_' and '-', starting with a letter or digit (no path separator, no "
        "leading dot or dash), at most 255 bytes.",
        "Name it explicitly: sbx skills add PATH --name my-skill (list the store's names with "
        "sbx skills ls).",
        _E.USAGE,
    ),
    _R.SKILL_EXISTS: ReasonInfo(
        "A skill of that name is already in the store",
        "sbx skills add never replaces a skill in the host's skills store unless asked to.",
        "Replace it with sbx skills add PATH --force, or add it under another name with "
        "sbx skills add PATH --name OTHER.",
        _E.USAGE,
    ),
    _R.SKILL_NOT_FOUND: ReasonInfo(
        "No skill of that name in the store",
        "sbx skills rm names a skill the host's skills store does not hold.",
        "List the store's skills with sbx skills ls and remove one by its NAME column.",
        _E.USAGE,
    ),
    _R.SKILL_SOURCE_INVALID: ReasonInfo(
        "Not a skill directory",
        "sbx skills add copies a directory holding a SKILL.md at its root (a regular file); "
        "the path given is missing, not a directory, or has no SKILL.md.",
        "Point sbx skills add at the skill's own directory, the one with SKILL.md in it.",
        _E.USAGE,
    ),
    _R.SKILL_SOURCE_UNSAFE: ReasonInfo(
        "A skill directory sbx will not copy",
        "sbx skills add never follows a link: a symlink naming something outside the skill "
        "(or an absolute path, or nothing), a device, a FIFO or a socket in the directory "
        "stops the copy, and nothing is written to the store.",
        "Remove or replace the entry named in the message (copy a link's target into the "
        "skill instead), then run sbx skills add again.",
        _E.REFUSED,
    ),
    _R.SKILL_TOO_LARGE: ReasonInfo(
        "A skill too large to copy",
        "sbx skills add copies at most 64 MiB in at most 10000 entries nested at most 32 "
        "directories deep; a skill is instructions and a few scripts, not a data set.",
        "Leave the large files out of the skill directory (the agent can fetch data at run "
        "time), then run sbx skills add again.",
        _E.REFUSED,
    ),
    _R.HOST_SERVICES_EXPOSED: ReasonInfo(
        "Host services reachable from sandbox networks",
        "A sandbox with a network (egress policy or published ports) can reach the host at its "
        "network's gateway, and with it every host service listening on all interfaces. sbx "
        "closes that with two firewall rules per run, which needs root and iptables.",
        "Run sbx as root (with iptables), or bind the named services to 127.0.0.1.",
        _E.DENIED,
    ),
    _R.LIMIT_OVER_BOUND: ReasonInfo(
        "A resource limit beyond its bound",
        "--memory, --cpus or --pids asked for more than the config's [sandbox] memory_bytes, "
        "cpu_millis or pids allow, or --memory for less than the sandbox's tmpfs mounts "
        "(/tmp, HOME, a private workspace), which count against it. sbx refuses instead of "
        "truncating a limit.",
        "Ask within the bound the message names (e.g. `sbx run KIT --memory 2g`), or raise "
        "the [sandbox] key in the config file (`sbx config path`; `sbx config show` shows the "
        "values in effect).",
        _E.REFUSED,
    ),
    _R.SESSIONS_UNSUPPORTED: ReasonInfo(
        "No session verbs in the composition",
        "--prompt, --resume, --continue and `sbx sessions` drive the agent through the session "
        "verbs its workload kit declares (agent-sessions@1 for headless runs, "
        "agent-interactive-sessions@1 in a terminal); the composition has none from its "
        "workload (a mixin's declaration has no agent to drive).",
        "Run the agent's own command instead (`sbx run KIT . -- CMD ...`), or use a workload "
        "kit that declares com.docker.sandbox/agent-sessions@1 (`sbx kit inspect KIT` shows "
        "its capabilities).",
        _E.REFUSED,
    ),
    _R.ACP_UNAVAILABLE: ReasonInfo(
        "No ACP adapter for the run's agent",
        "--acp starts the Agent Client Protocol adapter a kit declares (acp@1) as the "
        "sandbox's process, on stdio with no terminal, for an editor to drive; an adapter "
        "serves only an agent the composed kits provide, and sbx picks the workload's own "
        "agent's, else the only one there is.",
        "Compose an adapter mixin for the agent (`sbx run KIT . --kit ADAPTER_KIT --acp`); "
        "`sbx kit inspect KIT` shows what a kit provides and declares.",
        _E.REFUSED,
    ),
    _R.PLATFORM_UNMET: ReasonInfo(
        "The image does not meet the sbx@1 platform contract",
        "A workload declaring com.docker.sandbox/sbx@1 has its agent launched under /bin/bash "
        "(so BASH_ENV is sourced) as the image's own USER, resolved in the image's "
        "/etc/passwd; an image without a USER cannot say whom to run the agent as, and one "
        "without an executable /bin/bash cannot launch it.",
        "Add `USER agent` (an account of the image) or bash (`RUN apt-get install -y bash`), "
        "whichever the message names, to the workload's dockerfile, or drop sbx@1 from its "
        "descriptor; `sbx kit inspect KIT` shows what it declares.",
        _E.REFUSED,
    ),
    _R.SESSION_VERB_MISSING: ReasonInfo(
        "The agent has no such session verb",
        "The workload's session capability does not declare the verb asked for (prompt, "
        "resume, continue or list); an absent verb means the agent has no such operation, and "
        "sbx never improvises flags for it.",
        "Use a verb the kit declares (the message lists them), run in a terminal (-t) for the "
        "interactive verbs, or pass the agent's own arguments after `--`.",
        _E.REFUSED,
    ),
    _R.SESSION_ID_INVALID: ReasonInfo(
        "A session id sbx will not pass",
        "--resume takes one session id as the agent's list verb prints it: 1 to 256 "
        "printable characters, no whitespace, not starting with `-` (the agent would read it "
        "as an option).",
        "Pick an id from `sbx sessions NAME`, or use --continue for the most recent session.",
        _E.REFUSED,
    ),
    _R.COPY_REFUSED: ReasonInfo(
        "A copy sbx will not make",
        "`sbx cp` refused: the archive from the sandbox holds an entry that could write "
        "outside the destination (an absolute or `..` name, a link leading out, a device, "
        "a setuid/setgid file), it is larger than the copy's bound, or the destination in "
        "the sandbox is not one of its writable mounts (the root and pinned paths are "
        "read-only; the engine cannot reach tmpfs mounts). Nothing unsafe was written.",
        "Copy a plain file or directory to or from the workspace or HOME (`sbx cp NAME:PATH "
        "DEST`, `sbx cp SRC NAME:PATH`); raise the bound with `--max-size 4g` when the copy "
        "is simply large.",
        _E.REFUSED,
    ),
    _R.WORKSPACE_COPY_REFUSED: ReasonInfo(
        "A workspace sbx will not copy in",
        "`--workspace-mode copy` refused the workspace before anything was created: it holds "
        "more file data than `[sandbox] workspace_copy_bytes` (or more entries than a copy "
        "takes), or a device, FIFO or socket, which no copy carries. Nothing is truncated or "
        "left out silently.",
        "Raise `workspace_copy_bytes` under `[sandbox]` in the config file (`sbx config show` "
        "names it), copy a smaller directory, or remove the special files; on the local engine "
        "`--workspace-mode bind` mounts it instead.",
        _E.REFUSED,
    ),
    _R.NOT_A_REPOSITORY: ReasonInfo(
        "The workspace is not a git repository",
        "--clone gives the sandbox its own checkout of the workspace's repository; the "
        "workspace given is not inside one (git rev-parse found no repository).",
        "Give a directory inside a git repository (`git -C DIR rev-parse --show-toplevel` "
        "names it), or run without --clone.",
        _E.REFUSED,
    ),
    _R.HEAD_UNBORN: ReasonInfo(
        "The repository has no commit yet",
        "--clone starts the sandbox's branch from the host repository's HEAD, which names no "
        "commit yet (an unborn branch). A detached HEAD is fine: its commit is used.",
        "Make a first commit (`git commit --allow-empty -m start`), then create it again.",
        _E.REFUSED,
    ),
    _R.NOT_A_CLONE: ReasonInfo(
        "The sandbox has no clone",
        "A clone is a sandbox created with --clone: its own git checkout of the repository, "
        "on a volume of its own, on branch sbx/NAME. `sbx diff` and `sbx fetch` read that "
        "checkout; this sandbox sees a mounted workspace (or none), whose changes are on the "
        "host already, so there is nothing to diff or fetch. A clone made by an older sbx "
        "kept its checkout in the container's memory: once stopped, it is gone.",
        "Create a clone of the repository: `sbx create --clone --name NAME-clone KIT REPO` "
        "(e.g. `sbx create --clone --name a1 claude .`), then `sbx diff NAME-clone`; for a "
        "stopped clone whose checkout is gone, `sbx rm -f NAME` first, then create it again.",
        _E.REFUSED,
    ),
    _R.BRANCH_DIVERGED: ReasonInfo(
        "The branch exists and would not fast-forward",
        "`sbx fetch` writes the sandbox's commits as branch sbx/NAME in the host repository; "
        "that branch exists and is not an ancestor of what the sandbox has, so the fetch "
        "would drop host commits. Nothing was changed.",
        "Rename the host's branch (`git branch -m sbx/NAME sbx/NAME-old`) and fetch again, or "
        "overwrite it with `sbx fetch --force NAME`.",
        _E.REFUSED,
    ),
    _R.GIT_MISSING: ReasonInfo(
        "The sandbox image has no git",
        "--clone, `sbx diff` and `sbx fetch` run git inside the sandbox as its user; the "
        "image's PATH has no git command.",
        "Use a kit whose image installs git (e.g. `apk add git` or `apt-get install git` in "
        "its Dockerfile), or run without --clone.",
        _E.REFUSED,
    ),
    _R.NOT_A_TEMPLATE: ReasonInfo(
        "The image is not an sbx template",
        "`--template TAG` and `sbx template rm` take an image that `sbx save` made: it carries "
        "the label dev.sbx.template=1 and the kit set it was saved from. This image does not "
        "(or it is not on this engine), so sbx cannot know which kits, policy and HOME go "
        "with it. A plain image is a kit's job (a kit's `image` or Dockerfile).",
        "List the templates with `sbx template ls`; make one from a named sandbox with "
        "`sbx save NAME TAG`; for a plain image, write a kit whose image it is.",
        _E.REFUSED,
    ),
    _R.TEMPLATE_MISMATCH: ReasonInfo(
        "The kits do not match the template's",
        "A run from a template runs under the kit set it was saved from (hardening, admission, "
        "egress policy). The WORKLOAD or --kit given name other kits, or those kits changed "
        "since the save (their descriptor or recipe digests differ from the template's "
        "label). Nothing was created.",
        "Leave out WORKLOAD and --kit (the template names its own), restore the kits as they "
        "were, or save a new template from a sandbox of the kits as they are now.",
        _E.REFUSED,
    ),
    _R.TEMPLATE_LEAK: ReasonInfo(
        "The sandbox holds its own proxy token",
        "`sbx save` keeps nothing of a run's boundary in a template. A file in the sandbox's "
        "HOME or image holds the sandbox's egress proxy token (its proxy URL, e.g. written "
        "into a tool's config from HTTP_PROXY), which would let anyone running the template "
        "use this sandbox's proxy and credentials. Nothing was made.",
        "A file in HOME: remove it (`sbx exec NAME -- rm FILE`; let the tool read HTTP_PROXY "
        "from the environment instead). A file of the image (an install hook wrote it): change "
        "the kit's hook not to write the proxy URL, then `sbx run --name NAME --recreate`. "
        "Then save again.",
        _E.REFUSED,
    ),
}

__all__ = ["ENTRIES"]
