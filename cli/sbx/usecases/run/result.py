"""What a run reports: its exit status and output, and what its plan decided."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbx.usecases.run.plan import RunPlan


@dataclass
class RunResult:
    run_id: str
    exit_code: int
    duration_s: float
    plan: RunPlan | None  # None: an existing named sandbox was started or attached
    stdout: bytes = b""
    stderr: bytes = b""
    ports: list[dict[str, object]] = field(default_factory=list)
    truncated: bool = False
    cleanup_errors: list[str] = field(default_factory=list)
    host_config_changed: list[str] = field(default_factory=list)
    workspace_findings: list[dict[str, Any]] = field(default_factory=list)
    name: str | None = None

    def as_dict(self) -> dict[str, Any]:
        plan = self.plan
        if plan is None:
            return {"run_id": self.run_id, "exit_code": self.exit_code, "name": self.name,
                    "duration_s": round(self.duration_s, 3)}
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "workload": plan.facts.workload,
            "kits": plan.references,
            "image": plan.image_tag,
            "image_built": plan.image_built,
            "user": f"{plan.user.uid}:{plan.user.gid}",
            "workspace": {"target": plan.workspace_target, "host": plan.workspace_host,
                          "access": plan.access},
            "timeout_s": plan.timeout_s,
            "selection": selection(plan),
            # Bound credentials and the half each is bound in ("apikey" | "oauth"); no value.
            "credentials": dict(plan.egress.modes) if plan.egress is not None else {},
            "limits": dict(plan.facts.limits),
            "privileged": plan.facts.privileged,
            "warnings": list(plan.warnings),
            "ports": self.ports,
            "home": plan.home,
            "session": plan.mode.as_dict(),
            "host_config_changed": self.host_config_changed,
            "workspace_findings": self.workspace_findings,
            "name": plan.name,
        }
        if self.stdout or self.stderr or self.truncated:
            data["stdout"] = self.stdout.decode("utf-8", "replace")
            data["stderr"] = self.stderr.decode("utf-8", "replace")
            data["output_truncated"] = self.truncated
        return data


def selection(plan: RunPlan) -> dict[str, list[dict[str, Any]]]:
    """Selection records; a capability selected by type but then not satisfiable (an optional
    resources@1 over its bound, an optional udp port) counts as skipped only."""
    return {key: [dict(record) for record in records]
            for key, records in plan.facts.selection.items()}




__all__ = ["RunResult", "selection"]
