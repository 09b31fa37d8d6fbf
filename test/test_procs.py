"""memnav.procs.stop_processes on real child processes: SIGINT first, SIGKILL only for one that ignores it."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from memnav.procs import stop_processes

_POLITE = ("import time\ntry:\n    print('up', flush=True)\n    time.sleep(60)\n"
           "except KeyboardInterrupt:\n    print('clean')")
_DEAF = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)"


def _start(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"    # its handlers are in place
    return proc


def test_sigint_first_sigkill_only_after_the_timeout_and_outputs_in_order():
    polite, deaf = _start(_POLITE), _start(_DEAF)
    done = subprocess.Popen([sys.executable, "-c", "print('done')"], stdout=subprocess.PIPE, text=True)
    done.wait(timeout=30)
    t0 = time.monotonic()
    outs = stop_processes([polite, deaf, done], timeout_s=1.0)
    assert time.monotonic() - t0 < 20.0
    assert outs == ["clean\n", "", "done\n"]
    assert polite.returncode == 0                      # ended by its own KeyboardInterrupt handler
    assert deaf.returncode == -signal.SIGKILL          # ignored SIGINT: killed after 1 s
    assert done.returncode == 0


def test_output_to_a_file_reads_as_empty(tmp_path):
    log = tmp_path / "child.log"
    with log.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-c", "import time; print('to the file', flush=True); time.sleep(60)"],
                                stdout=f)
    end = time.monotonic() + 20.0
    while "to the file" not in log.read_text() and time.monotonic() < end:
        time.sleep(0.05)
    assert stop_processes([proc]) == [""]
    assert proc.returncode != 0 and "to the file" in log.read_text()
