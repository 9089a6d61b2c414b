"""Runs a Horovod-API program on the Horovod implementation named, whichever of
`import horovod.torch as hvd` / `import kolo.torch as hvd` the program has.

  python hvd_as.py MODULE SCRIPT [ARGS...]      MODULE: horovod.torch or kolo.torch

Both names are made to resolve to MODULE (the other name becomes an alias of it in
sys.modules) before SCRIPT runs as __main__, so the same unmodified program runs on
Horovod (bench/python/horovod_step.py imports kolo.torch) and on kolo (Horovod's
examples/pytorch/pytorch_synthetic_benchmark.py imports horovod.torch). Nothing of
Horovod's code is in this repository; the synthetic benchmark is taken from a Horovod
checkout at run time (compare.sh).
"""
import os
import time

os.environ["HVD_AS_T0"] = repr(time.time())  # the process's start, for hvd_allreduce.py STARTUP=1

import importlib  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402


def alias(module_name):
    impl = importlib.import_module(module_name)
    for name in ("horovod.torch", "kolo.torch"):
        if name == module_name:
            continue
        pkg_name = name.split(".")[0]
        if pkg_name in sys.modules and name in sys.modules:
            continue
        pkg = types.ModuleType(pkg_name)
        pkg.__path__ = []  # a package, so "import pkg.torch" looks in sys.modules
        pkg.torch = impl
        sys.modules[pkg_name] = pkg
        sys.modules[name] = impl
    return impl


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("horovod.torch", "kolo.torch"):
        sys.exit("usage: hvd_as.py horovod.torch|kolo.torch SCRIPT [ARGS...]")
    alias(sys.argv[1])
    script = sys.argv[2]
    sys.argv = sys.argv[2:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` would have it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
