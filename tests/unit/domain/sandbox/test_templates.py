"""The pure decisions about templates (sbx.domain.sandbox.templates): which tags, which labels,
which kits a run loads, what of HOME and of the image is left out."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import pytest

from sbx.base.errors import SbxError
from sbx.base.reasons import Reason
from sbx.base.render import Renderer
from sbx.domain.egress.plan import trust_bundle
from sbx.domain.kits.compose import Hook
from sbx.domain.sandbox import templates as tpl
from sbx.domain.sandbox.capabilities import CapabilityPlan
from sbx.domain.sandbox.hardening import Limits
from sbx.domain.sandbox.lifecycle import Accounts, KitFile, LifecyclePlan, startup_script
from sbx.domain.sandbox.mountedfiles import with_mounted_files
from sbx.views import template as view

KITS: dict[str, Any] = {"workload": "/kits/agent", "mixins": ["/kits/git"],
        "kits": {"/kits/agent": {"descriptor": "a" * 64, "recipe": "b" * 64},
                 "/kits/git": {"descriptor": "c" * 64, "recipe": None}}}


def _template() -> tpl.Template:
    labels = tpl.template_labels(kits=KITS, version="1.2.3", source="dev", home="/home/sbx",
                                 created=1700000000)
    return tpl.read_template("mine:1", "sha256:" + "0" * 64, labels)


@pytest.mark.parametrize(("given", "tag"), [
    ("my-agent", "my-agent:latest"), ("my-agent:v1", "my-agent:v1"),
    ("localhost/team/agent:2.0", "localhost/team/agent:2.0"),
])
def test_a_plain_tag_is_taken_with_latest_when_it_has_none(given: str, tag: str) -> None:
    assert tpl.check_tag(given) == tag


@pytest.mark.parametrize("tag", ["sbx-run/abc:1", "sbx-kit/x:1", "sbx-use/h:1", "Upper:1",
                                 "a b", "", "x:" + "t" * 200])
def test_sbx_own_repositories_and_malformed_tags_are_refused(tag: str) -> None:
    with pytest.raises(SbxError) as caught:
        tpl.check_tag(tag)
    assert caught.value.reason is Reason.INVALID_ARGUMENT and caught.value.hint


def test_the_labels_round_trip_and_clear_nothing_of_the_kits() -> None:
    template = _template()
    assert (template.workload, template.mixins) == ("/kits/agent", ("/kits/git",))
    assert template.version == "1.2.3" and template.source == "dev"
    assert template.as_json()["kits"] == ["/kits/git"]


@pytest.mark.parametrize("labels", [
    {}, {"dev.sbx.template": ""}, {"dev.sbx.template": "1"},
    {"dev.sbx.template": "1", "dev.sbx.template.kits": "{not json"},
    {"dev.sbx.template": "1", "dev.sbx.template.kits": json.dumps({"workload": "x"})},
])
def test_an_image_without_a_readable_template_label_is_not_a_template(
        labels: dict[str, str]) -> None:
    with pytest.raises(SbxError) as caught:
        tpl.read_template("busybox:1", "sha256:" + "1" * 64, labels)
    assert caught.value.reason is Reason.NOT_A_TEMPLATE
    assert "sbx save NAME TAG" in (caught.value.hint or "")


def test_kits_left_out_are_the_templates_and_given_ones_are_loaded_as_given() -> None:
    template = _template()
    assert tpl.kits_for(template, None, ()) == ("/kits/agent", ("/kits/git",))
    assert tpl.kits_for(template, "./agent", ()) == ("./agent", ())
    with pytest.raises(SbxError) as caught:
        tpl.kits_for(template, None, ("/kits/git",))
    assert caught.value.reason is Reason.TEMPLATE_MISMATCH


def test_the_same_kits_with_the_same_digests_pass() -> None:
    tpl.check_kits(_template(), json.loads(json.dumps(KITS)))


@pytest.mark.parametrize(("change", "said"), [
    ({"workload": "/kits/other"}, "workload /kits/other"),
    ({"mixins": []}, "mixins none"),
    ({"kits": {**KITS["kits"], "/kits/agent": {"descriptor": "d" * 64, "recipe": "b" * 64}}},
     "changed since the save: /kits/agent"),
])
def test_other_kits_or_changed_kits_are_refused(change: dict[str, object], said: str) -> None:
    with pytest.raises(SbxError) as caught:
        tpl.check_kits(_template(), {**KITS, **change})
    assert caught.value.reason is Reason.TEMPLATE_MISMATCH
    assert said in caught.value.message
    assert "Leave out WORKLOAD and --kit" in (caught.value.hint or "")


def test_the_staged_files_targets_are_read_from_the_real_startup_script() -> None:
    files = (KitFile(kit="k", where="w", path="/home/sbx/.claude/.credentials.json",
                     content="sentinel", mode=0o600),
             KitFile(kit="k", where="w", path="/home/sbx/it's here", content="x"),
             KitFile(kit="k", where="w", path="/etc/kept", content="y"))
    limits = Limits(memory_bytes=1 << 30, pids=256, cpu_millis=1000, tmp_bytes=1 << 20,
                    workspace_bytes=1 << 20, home_bytes=1 << 20)
    plan = with_mounted_files(CapabilityPlan(limits=limits,
                                             lifecycle=LifecyclePlan(files=files)),
                              ["/home/sbx", "/tmp"])
    hooks: tuple[Hook, ...] = plan.lifecycle.startup
    script = startup_script(hooks, container_env={}, accounts=Accounts(), sandbox_user="1000",
                            workdir="/workspace",
                            boundary_env={"HTTPS_PROXY": "http://sbx:TOKEN@10.0.0.1:3128"},
                            home="/home/sbx")
    assert "TOKEN" in script  # what /.sbx (and so the script) is left out of a template for
    assert tpl.staged_targets(script) == ["/home/sbx/.claude/.credentials.json",
                                          "/home/sbx/it's here"]
    assert tpl.staged_targets("#!/bin/sh\nexec \"$@\"\n") == []


def test_the_system_bundle_gets_back_what_it_held_before_sbx_appended_its_ca() -> None:
    system = b"-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n"
    ca = b"-----BEGIN CERTIFICATE-----\nSBX\n-----END CERTIFICATE-----\n"
    assert tpl.restored_bundle(trust_bundle(ca, system), ca) == system
    assert tpl.restored_bundle(trust_bundle(ca, None), ca) == b""
    assert tpl.restored_bundle(system, ca) is None  # sbx appended nothing
    assert tpl.restored_bundle(system, b"") is None


def _archive(entries: list[tuple[str, bytes | None]]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in entries:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 1000
            if content is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
        link = tarfile.TarInfo("sbx/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
        fifo = tarfile.TarInfo("sbx/fifo")
        fifo.type = tarfile.FIFOTYPE
        archive.addfile(fifo)
    buffer.seek(0)
    return buffer


def _image() -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in ((".dockerenv", b""), ("etc/hostname", b""),
                              ("etc/ssl/certs/ca-certificates.crt", b"SYSTEM\nSBXCA\n"),
                              ("etc/sbx/ca.pem", b"SBXCA\n"),
                              (".sbx/startup.sh", b"HTTPS_PROXY=http://sbx:TOKEN123@gw"),
                              ("opt/installed", b"from the install hook"),
                              ("opt/leaky", b"proxy=http://sbx:TOKEN123@gw"),
                              (".sbx-template/home/old", b"an older template's HOME")):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        link = tarfile.TarInfo("opt/to-startup")
        link.type, link.linkname = tarfile.LNKTYPE, ".sbx/startup.sh"
        archive.addfile(link)
    buffer.seek(0)
    return buffer


def _built(home: io.BytesIO, leave_out: tuple[str, ...] = (),
           needles: tuple[bytes, ...] = (b"TOKEN123",)) -> tuple[int, list[str], dict[str, Any]]:
    target = io.BytesIO()
    total, leaks = tpl.template_archive(
        _image(), home, target, home_name="sbx", leave_out=leave_out,
        replace={"/etc/ssl/certs/ca-certificates.crt": b"SYSTEM\n"}, needles=needles,
        max_home_bytes=1 << 20)
    target.seek(0)
    with tarfile.open(fileobj=target) as archive:
        members: dict[str, Any] = {}
        for member in archive.getmembers():
            data = archive.extractfile(member) if member.isfile() else None
            members[member.name] = (member, data.read() if data is not None else None)
    return total, leaks, members


def test_the_template_tree_leaves_out_sbx_files_the_engines_and_an_older_home() -> None:
    total, leaks, members = _built(_archive([("sbx", None), ("sbx/note.txt", b"hello")]))
    assert members["opt/installed"][1] == b"from the install hook"
    assert members["etc/ssl/certs/ca-certificates.crt"][1] == b"SYSTEM\n"
    for gone in (".dockerenv", "etc/hostname", "etc/sbx/ca.pem", ".sbx/startup.sh",
                 ".sbx-template/home/old", "opt/to-startup"):
        assert gone not in members, gone
    assert members[".sbx-template/home/note.txt"][1] == b"hello" and total == 5
    assert leaks == ["/opt/leaky"]  # what the install hook wrote: the save is refused
    assert _built(_archive([("sbx", None)]), needles=())[1] == []


def test_home_is_rewritten_under_the_template_directory_without_what_was_left_out() -> None:
    source = _archive([("sbx", None), ("sbx/note.txt", b"hello"), ("sbx/.claude", None),
                       ("sbx/.claude/.credentials.json", b"sentinel"),
                       ("sbx/.npmrc", b"proxy=http://sbx:TOKEN123@gw")])
    total, leaks, members = _built(source, leave_out=(".claude/.credentials.json",))
    assert total == 5 + len(b"proxy=http://sbx:TOKEN123@gw")
    assert ".sbx-template/home/.claude/.credentials.json" not in members
    assert members[".sbx-template/home/link"][0].linkname == "/etc/passwd"  # a link stays one
    assert ".sbx-template/home/fifo" not in members
    assert members[".sbx-template/home"][0].isdir() and members[".sbx-template"][0].isdir()
    assert members[".sbx-template/home/note.txt"][0].uid == 1000
    assert leaks == ["/opt/leaky", "/.sbx-template/home/.npmrc"]


def test_home_over_the_bound_is_refused() -> None:
    source = _archive([("sbx", None), ("sbx/big", b"x" * 100)])
    with pytest.raises(SbxError) as caught:
        tpl.template_archive(_image(), source, io.BytesIO(), home_name="sbx", leave_out=(),
                             replace={}, needles=(), max_home_bytes=99)
    assert "more than 99 bytes" in caught.value.message


def test_a_needle_split_across_reads_is_found() -> None:
    class Trickle(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            return super().read(3)

    scanning = tpl._Scanning(Trickle(b"xxTOKEN123yy"), [b"TOKEN123"])
    while scanning.read(1024):
        pass
    assert scanning.found


def test_template_ls_prints_one_row_a_tag_and_the_envelope_with_json() -> None:
    out = io.StringIO()
    view.listing(Renderer(out, io.StringIO(), as_json=False, env={"NO_COLOR": "1"}, width=120),
                 [_template()])
    header, row = out.getvalue().splitlines()
    assert header.split() == ["TAG", "WORKLOAD", "KITS", "SAVED", "FROM", "CREATED"]
    assert row.split()[:4] == ["mine:1", "/kits/agent", "/kits/git", "dev"]
    out = io.StringIO()
    view.listing(Renderer(out, io.StringIO(), as_json=True, env={}, width=120), [_template()])
    assert json.loads(out.getvalue())["data"]["templates"][0]["tag"] == "mine:1"
