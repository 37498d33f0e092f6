"""What `sbx run`, `sbx explain WORKLOAD` and `sbx doctor WORKLOAD` ask the pipeline
(sbx.usecases.pipeline) for: plain words, so a caller names one without loading the pipeline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadRequest:
    """What the three commands share: the kits, their args, and what changes the config."""

    workload: str
    kits: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    allow_privileged: bool = False
    timeout_s: float | None = None  # --timeout (run only), over [sandbox] timeout_ms
    detach_keys: str | None = None  # --detach-keys (run only), over [sandbox] detach_keys
    runtime: str | None = None  # --runtime (run only), over [sandbox] runtime
    named: bool | None = None  # --name (run, explain); None: not a run (kit inspect, doctor)
    template: str | None = None  # --template TAG (run): the image the sandbox starts from


__all__ = ["WorkloadRequest"]
