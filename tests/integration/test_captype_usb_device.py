"""usb-device@1 on a real engine: refused by its type name with the reason (no device
passthrough on these engines) when required, skipped and recorded with that reason when
optional; no host device reaches the sandbox either way."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.docker

USB = "com.docker.sandbox/usb-device@1"
DOCKERFILE = "FROM sbx-base/bookworm:1\nUSER agent\nWORKDIR /workspace\n"
Runner = Callable[..., Any]
KitMaker = Callable[..., Path]


def _kit(kit_factory: KitMaker, name: str, optional: bool) -> Path:
    flag = "\n    optional: true" if optional else ""
    return kit_factory(name, DOCKERFILE, f"""capabilities:
  - type: {USB}{flag}
    config: {{vendorId: "0x1234", productId: "0x5678"}}
""")


@pytest.fixture
def env(state_home: Path) -> dict[str, str]:
    return {**os.environ, "SBX_HOME": str(state_home), "SBX_CONFIG": os.devnull}


def test_required_is_refused_by_name_with_the_reason(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    result = sbx_cli(["run", str(_kit(kit_factory, "usbreq", False)), "--", "echo", "ran"],
                     env=env)
    assert result.exit_code == 125, result.stderr
    assert "(unsupported_capability)" in result.stderr and USB in result.stderr
    assert "no device passthrough" in result.stderr and "ran" not in result.stdout


def test_optional_is_skipped_with_the_reason_and_no_device_is_added(
        kit_factory: KitMaker, sbx_cli: Runner, env: dict[str, str]) -> None:
    result = sbx_cli(["run", "--json", str(_kit(kit_factory, "usbopt", True)), "--", "sh", "-c",
                      "ls /dev/bus/usb 2>/dev/null | wc -l"], env=env)
    envelope = result.envelope()
    assert envelope["status"] == "ok", result.stderr
    assert envelope["data"]["stdout"].strip() == "0"
    records = [s for s in envelope["data"]["selection"]["skipped"] if s["type"] == USB]
    assert records and "no device passthrough" in records[0]["reason"]
