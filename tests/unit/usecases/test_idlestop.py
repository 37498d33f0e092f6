"""What a named sandbox's run directory holds for its idle stop: the period, the stop's mark,
and the client locks its keeper counts (real files and flocks, real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sbx.base.reasons import Reason
from sbx.usecases import idlestop


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True, mode=0o700)
    tmp_path.chmod(0o700)
    (tmp_path / "runs").chmod(0o700)
    return run_dir


def test_the_period_is_the_flag_s_else_the_config_s(tmp_path: Path) -> None:
    assert idlestop.effective(90.0, 1800) == 90.0
    assert idlestop.effective(None, 1800) == 1800.0
    assert idlestop.effective(None, None) is None
    assert idlestop.effective(True, None) is None  # a damaged record is not a period
    run_dir = _run_dir(tmp_path)
    idlestop.write_settings(run_dir, 30.0)
    assert idlestop.read_settings(run_dir) == 30.0
    idlestop.write_settings(run_dir, None)
    assert idlestop.read_settings(run_dir) is None
    (run_dir / idlestop.SETTINGS_FILE).write_text('{"idle_stop_s": "soon"}')
    assert idlestop.read_settings(run_dir) is None  # never a stop on a guess


def test_the_stop_s_mark_is_read_back_and_a_start_clears_it(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    assert idlestop.stopped_mark(run_dir) is None
    idlestop.mark_stopped(run_dir, 30.0, 1234.5)
    mark = idlestop.stopped_mark(run_dir)
    assert mark is not None and mark.reason is Reason.STOPPED_IDLE
    assert mark.as_dict() == {"reason": "stopped_idle", "at": 1234.5, "idle_s": 30.0}
    idlestop.write_settings(run_dir, 30.0)  # what every start writes first
    assert idlestop.stopped_mark(run_dir) is None


def test_a_client_counts_while_its_session_lasts(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    assert idlestop.attached_count(run_dir) == 0
    with idlestop.attached(run_dir):
        assert idlestop.attached_count(run_dir) == 1
        with idlestop.attached(run_dir):
            assert idlestop.attached_count(run_dir) == 2
        assert idlestop.attached_count(run_dir) == 1
    assert idlestop.attached_count(run_dir) == 0
    assert os.listdir(run_dir / idlestop.CLIENTS_DIR) == []
    with idlestop.attached(None):  # a one-shot run: nothing to count
        assert idlestop.attached_count(run_dir) == 0


def test_a_killed_client_stops_counting_and_its_lock_goes(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    code = ("import sys, time\nfrom pathlib import Path\nfrom sbx.usecases import idlestop\n"
            "with idlestop.attached(Path(sys.argv[1])):\n"
            "    print('in', flush=True)\n    time.sleep(60)\n")
    with subprocess.Popen([sys.executable, "-c", code, str(run_dir)],
                          stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == b"in"
            assert idlestop.attached_count(run_dir) == 1
        finally:
            child.kill()
            child.wait(timeout=10)
    assert idlestop.attached_count(run_dir) == 0  # no one holds it: the client went away
    assert os.listdir(run_dir / idlestop.CLIENTS_DIR) == []


def test_the_last_request_is_the_request_log_s_last_write(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    assert idlestop.last_request(run_dir) is None  # no proxy
    log = tmp_path / "requests.jsonl"
    (run_dir / "proxy.json").write_text(json.dumps({"request_log": str(log)}))
    assert idlestop.last_request(run_dir) is None  # no request yet
    log.write_text("{}\n")
    os.utime(log, (time.time() - 100, time.time() - 100))
    seen = idlestop.last_request(run_dir)
    assert seen is not None and abs(seen - (time.time() - 100)) < 5
