"""Put this folder first on PYTHONPATH: each Python process then writes, at exit, the shared
libraries it mapped and the files of the modules it imported to $BUNDLE_TRACE_DIR/<pid>.txt
(what a bundle must hold; build_bundle.py's VTK list came from such a run)."""

import atexit
import os
import sys


def _write_trace() -> None:
    folder = os.environ.get("BUNDLE_TRACE_DIR")
    if not folder:
        return
    with open("/proc/self/maps") as maps:
        fields = [line.split() for line in maps]
    files = {f[-1] for f in fields if len(f) >= 6 and f[-1].startswith("/")}
    files |= {m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{os.getpid()}.txt"), "w") as out:
        out.write("\n".join(sorted(files)) + "\n")


atexit.register(_write_trace)
