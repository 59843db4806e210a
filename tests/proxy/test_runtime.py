"""The foreground proxy's process tuning."""

from __future__ import annotations

import subprocess
import sys


def test_foreground_proxy_freezes_startup_objects_and_batches_gc():
    # in a child: the tuning is process-wide and must not leak into the test process
    code = (
        "import gc\n"
        "from contagent.proxy.runtime import _GC_THRESHOLDS, _tune_gc\n"
        "before = gc.get_threshold()\n"
        "_tune_gc()\n"
        "assert gc.get_threshold() == _GC_THRESHOLDS != before, gc.get_threshold()\n"
        "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()\n"
        "assert gc.isenabled()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_in_thread_proxy_leaves_the_callers_gc_alone(tmp_path):
    import gc

    from contagent.proxy import start_proxy_in_thread

    before = gc.get_threshold()
    with start_proxy_in_thread("http://127.0.0.1:9", tmp_path):
        assert gc.get_threshold() == before
