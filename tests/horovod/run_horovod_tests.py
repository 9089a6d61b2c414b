#!/usr/bin/env python3
"""Runs Horovod's own test/parallel/test_torch.py (or, with --suite
tensorflow / tensorflow2_keras, test_tensorflow.py / test_tensorflow2_keras.py)
against kolo on 2 ranks.

Horovod's code is never part of kolo: give this script a Horovod checkout
(or a bare git directory of one, e.g. the snapshot the `fetch` tool makes);
it fetches nothing. A temporary directory gets test_torch.py and its helper
test/utils/common.py, plus a `horovod.torch` shim that is kolo.torch:

    horovod/torch/__init__.py:   from kolo.torch import *
                                 from kolo.torch import collectives as mpi_ops
    horovod/tensorflow/__init__.py:   from kolo.tensorflow import *  (--suite tensorflow,
                                      under a Python with TF: scripts/install-tensorflow.sh)

Modes (both by default):
  file      one job runs the whole file, as `horovodrun` runs it: one
            process per rank for every test, so an error that leaves the
            communicator unusable shows up in the tests after it (the tests
            kolo fails by design, BY_DESIGN below, run in jobs of their own;
            --apart none runs every test in the one job);
  per-test  one job per test.
Jobs start under kolorun, or with --launcher mpirun under Open MPI's mpirun.
A test that fails in the one job only on TIMING (below: Horovod's assertion
that poll() saw an operation unfinished), or one of TIMING_TESTS (assertions
about elapsed time), is rerun alone and reported so.
--check: exit 1 when a test fails that is neither by design nor failing for
a reason outside kolo (OUTSIDE_KOLO below), or when fewer than --min-passed pass.
Each rank writes a JUnit XML file; a test passes when it passed on every
rank, is skipped when skipped on every rank, and fails otherwise (a job
that died without its XML counts every test it ran as failed).

The ranks see PMI_RANK/PMI_SIZE, as under mpirun (Horovod's test helpers
read them); --gloo gives them HOROVOD_RANK/HOROVOD_SIZE instead, as
horovodrun's Gloo mode does, and then every test ends with barrier() and
shutdown() (Horovod's tearDown), the next one calling init() again.

    python3 tests/horovod/run_horovod_tests.py /path/to/horovod
    /root/.cache/kolo/venvs/torch-2.15.0/bin/python tests/horovod/run_horovod_tests.py \
        /work/.mirror/horovod+horovod/repo --mode per-test -k allgather
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = ("test/parallel/test_torch.py", "test/utils/common.py")

SHIM = {
    "horovod/__init__.py": "",
    "horovod/torch/__init__.py": "from kolo.torch import *  # noqa: F401,F403\n"
                                 "from kolo.torch import collectives as mpi_ops  # noqa: F401\n",
    # common.py imports these at the top for helpers test_torch.py never calls.
    "horovod/runner/__init__.py": "",
    "horovod/runner/util/__init__.py": "",
    "horovod/runner/util/threads.py": "import threading\n\n"
                                      "def in_thread(target, args=(), name=None, daemon=True, silent=False):\n"
                                      "    t = threading.Thread(target=target, args=args, name=name, daemon=daemon)\n"
                                      "    t.start()\n"
                                      "    return t\n",
}
# Tests kolo fails by design (README "Where kolo differs from Horovod"); in
# one-file mode each would run in a job of its own (unless --apart none).
# None today: the four *_duplicate_name_error tests and join_allreduce pass
# since named operations are negotiated (comm/named_channel.h).
BY_DESIGN = {}
# The *_duplicate_name_error tests issue a name twice, one call right after the
# other, and assert that the second raises. kolo, as Horovod, catches that only
# while the first is still queued: here for KOLO_NAMED_CYCLE_US after its issue
# (1 ms by default) plus one negotiation round, when the peer has issued the
# name already. On a loaded CI machine the test's Python was once held off the
# CPU longer than that between the two calls (CI of 2026-11-29: rank 1's first
# broadcast had completed, its second did not raise, rank 1 left the test
# without the barrier and the 22 tests after it failed on mismatched calls).
# The suite runs with a 100 ms hold: the named operations the tests wait on
# are announced at the wait, so it costs little else (the torch file on the dev
# VM: 18 s with 1 ms or 50 ms, 23 s with 200 ms, 40 s with 1 s); a caller's
# own KOLO_NAMED_CYCLE_US wins.
NAMED_CYCLE_US = "100000"
# A failure whose message holds this text depends on timing, not on kolo's
# answer: Horovod's *_async_fused tests assert that hvd.poll(), called right
# after an operation is issued, is False at least once. kolo's engine starts
# an unnamed operation at once, so on a rank that runs behind its peer (the
# peer has already posted its part) every operation can be finished by the
# time poll() looks, and the assertion fails though every sum is right.
# Horovod's own ops wait for its next cycle, which hides this. Such a test is
# rerun in a job of its own (up to RERUNS times) and reported as rerun.
TIMING = "hvd.poll() always returns True"
RERUNS = 3
# Tests whose assertion is about time itself, rerun alike when they fail:
TIMING_TESTS = {
    # Rank 0 sleeps 5 s before barrier(); every rank asserts its barrier took
    # >= 5 s measured from its own start, which follows a named allreduce. A
    # rank that leaves that allreduce later than rank 0 measures 5 s minus the
    # lag, plus the barrier's wake-up; Horovod's barrier waits for its next
    # cycle, which hides a lag of a few ms. Until 2026-11-30 a rank waiting on
    # shared memory yielded its core before it slept, and on a core loaded by
    # other programs (ctest's other tests) a yield gave the core away for the
    # rest of a scheduler slice: rank 1 then left the allreduce 4-12 ms after
    # rank 0 (14 of 60 under mpirun, bench/results/shm-yield-load-np2-vm-2026-11-30.md),
    # and the test failed 4 of 4 in CI's run of 2026-11-29. Ranks now yield
    # only where they outnumber the machine's cores (0 of 60); a thread
    # wake-up on a loaded machine can still lag, so a failure is rerun alone.
    "test_global_barrier_op": "its barrier is timed from each rank's own clock",
}
# Tests that fail for a reason outside kolo, with the torch releases where they do.
def outside_kolo(python):
    """{test: why} for the torch that `python` imports."""
    v = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True).stdout.strip()
    major_minor = tuple(int(x) for x in v.split("+")[0].split(".")[:2]) if v else (0, 0)
    if major_minor < (2, 9):
        return {}
    why = ("Horovod's test builds every torch.optim.Optimizer subclass; torch >= 2.9's Muon refuses "
           "its 1-D parameters (ValueError: Muon only supports 2D parameters)")
    return {t: why for t in ("test_broadcast_state", "test_broadcast_state_options", "test_force_allreduce")}


def outside_kolo_tf(python, suite):
    """{test: why} for --suite tensorflow under the Keras that `python` imports:
    Horovod's tests written for Keras 2 that stop on Keras 3 before they reach
    Horovod's API."""
    v = subprocess.run([python, "-c", "import keras; print(keras.__version__)"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True).stdout.strip()
    if not v or int(v.split(".")[0]) < 3:
        return {}
    if suite == "tensorflow2_keras":
        ref = "the test calls var.ref(), and a Keras 3 Variable has no ref() (AttributeError)"
        lr = "the test passes lr=, which Keras 3 optimizers no longer take (ValueError)"
        compute = ("the test calls the optimizer's _compute_gradients, a private method of Keras 2's "
                   "optimizers that Keras 3's lack (AttributeError)")
        no_rate = ("the test's Optimizer subclass calls super().__init__ without learning_rate, which "
                   "Keras 3 requires (TypeError)")
        return {"test_broadcast_global_variables_callback_with_local_vars": ref,
                "test_grad_aggregation_with_inf_grad": compute,
                "test_gradient_aggregation": no_rate,
                "test_gradient_aggregation_with_local_vars": no_rate,
                "test_legacy_optimizer": "the test uses keras.optimizers.legacy, which Keras 3 removed "
                                         "(ImportError)",
                "test_partial_distributed_optimizer": compute,
                "test_sparse_as_dense": lr,
                "test_sparse_as_dense_with_grad_aggregation": lr,
                "test_train_model_lr_schedule": "the test uses keras.losses.mean_squared_error, which "
                                                "Keras 3 removed (AttributeError)"}
    if suite != "tensorflow":
        return {}
    return {"test_horovod_syncbn_cpu": "the test builds its reference with "
                                       "keras.layers.BatchNormalization(fused=False), an argument Keras 3 "
                                       "removed (ValueError: Unrecognized keyword arguments)",
            "test_partial_distributed_gradient_tape": "the test keys its dictionaries by var.ref(), and a "
                                                      "Keras 3 Variable has no ref() (AttributeError)"}


# --suite tensorflow: Horovod's TF tests under kolo.tensorflow (run with the
# TensorFlow environment's python: scripts/install-tensorflow.sh).
TF_FILES = ("test/parallel/test_tensorflow.py", "test/parallel/base_test_tensorflow.py",
            "test/utils/common.py")
TF_SHIM = {
    "horovod/__init__.py": "",
    "horovod/tensorflow/__init__.py": "from kolo.tensorflow import *  # noqa: F401,F403\n"
                                      "from horovod.tensorflow import util  # noqa: F401\n"
                                      "from horovod.tensorflow.util import _executing_eagerly  # noqa: F401\n",
    "horovod/tensorflow/util.py": "import tensorflow as tf\n\n"
                                  "def _executing_eagerly():\n"
                                  "    return tf.executing_eagerly()\n",
    **{k: v for k, v in SHIM.items() if k.startswith("horovod/runner")},
}
# --suite tensorflow2_keras: Horovod's Keras tests under kolo.tensorflow.keras.
KERAS = "from kolo.tensorflow.keras import *  # noqa: F401,F403\n" \
        "from kolo.tensorflow.keras import callbacks  # noqa: F401\n"
KERAS_SHIM = {
    **TF_SHIM,
    "horovod/tensorflow/keras/__init__.py": KERAS,
    "horovod/tensorflow/keras/callbacks.py": "from kolo.tensorflow.keras.callbacks import *  # noqa: F401,F403\n",
    "horovod/keras/__init__.py": KERAS,
    "horovod/keras/callbacks.py": "from kolo.tensorflow.keras.callbacks import *  # noqa: F401,F403\n",
    "horovod/common/__init__.py": "",
    "horovod/common/util.py": "from packaging import version\n\n"
                              "def is_version_greater_equal_than(ver, target):\n"
                              "    return version.parse(ver) >= version.parse(target)\n",
}
SUITES = {"torch": (FILES, SHIM, BY_DESIGN, "test_torch.py"),
          "tensorflow": (TF_FILES, TF_SHIM, BY_DESIGN, "test_tensorflow.py"),
          "tensorflow2_keras": (("test/parallel/test_tensorflow2_keras.py", "test/utils/common.py"),
                                KERAS_SHIM, BY_DESIGN, "test_tensorflow2_keras.py")}
# Only where the real package is missing (as in Debian's Python here).
STUBS = {
    "mock": "from unittest.mock import *  # noqa: F401,F403\n",
    # parameterized.expand, as one test that runs every parameter set in turn
    "parameterized": "import functools\n\n"
                     "class parameterized:\n"
                     "    @staticmethod\n"
                     "    def expand(params):\n"
                     "        def wrap(f):\n"
                     "            @functools.wraps(f)\n"
                     "            def run(self):\n"
                     "                for p in params:\n"
                     "                    f(self, *(p if isinstance(p, (list, tuple)) else (p,)))\n"
                     "            return run\n"
                     "        return wrap\n",
    "cloudpickle": "from pickle import dumps, loads  # noqa: F401\n",
}


def copy_tests(horovod, dest, files):
    """The suite's files from a checkout or a (bare) git directory."""
    for rel in files:
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        src = os.path.join(horovod, rel)
        if os.path.exists(src):
            shutil.copy(src, out)
            continue
        show = subprocess.run(["git", "--git-dir", horovod, "show", f"HEAD:{rel}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if show.returncode != 0:
            sys.exit(f"run_horovod_tests: {rel} is neither under {horovod} nor in it as a git "
                     f"directory: {show.stderr.decode().strip()}")
        with open(out, "wb") as f:
            f.write(show.stdout)


def make_shim(python, dest, shim):
    for rel, text in shim.items():
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    for name, text in STUBS.items():
        if subprocess.run([python, "-c", f"import {name}"], stderr=subprocess.DEVNULL).returncode:
            with open(os.path.join(dest, name + ".py"), "w") as f:
                f.write(text)


def outcomes(xml_files, timing=None):
    """{test name: 'passed'|'failed'|'skipped'} of one rank's JUnit XML; the
    names of tests that failed on timing (TIMING's text, or one of TIMING_TESTS) are added to `timing`."""
    out = {}
    for path in xml_files:
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("name")
            failures = [c for c in case if c.tag in ("failure", "error")]
            out[name] = ("failed" if failures else
                         "skipped" if any(c.tag == "skipped" for c in case) else "passed")
            text = " ".join((c.get("message") or "") + (c.text or "") for c in failures)
            if timing is not None and failures and (TIMING in text or name in TIMING_TESTS):
                timing.add(name)
    return out


def run_job(args, env, workdir, tests, tag, timing=None):
    """One kolorun job running `tests` (pytest node ids); per-test outcomes over all ranks
    (the tests that failed on timing on some rank are added to `timing`, as outcomes() says)."""
    xml_dir = os.path.join(workdir, "xml", tag)
    os.makedirs(xml_dir, exist_ok=True)
    pytest = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
              "--junitxml", os.path.join(xml_dir, "rank$KOLO_RANK.xml"), *tests]
    if args.launcher == "mpirun":  # Open MPI's variables (kolo and Horovod's helpers read them)
        script = 'KOLO_RANK=$OMPI_COMM_WORLD_RANK; '
        if args.gloo:
            script += 'export HOROVOD_RANK=$OMPI_COMM_WORLD_RANK HOROVOD_SIZE=$OMPI_COMM_WORLD_SIZE; '
    else:
        script = 'export PMI_RANK=$KOLO_RANK PMI_SIZE=$KOLO_SIZE; '
        if args.gloo:
            script = 'export HOROVOD_RANK=$KOLO_RANK HOROVOD_SIZE=$KOLO_SIZE; '
    # Exit 0 whatever pytest says: kolorun stops every rank when one fails,
    # and the other ranks' reports are wanted too.
    script += ' '.join(p if "$KOLO_RANK" in p else f"'{p}'" for p in pytest) + '; exit 0'
    if args.launcher == "mpirun":
        cmd = ["timeout", str(args.timeout), "mpirun", "--allow-run-as-root", "--oversubscribe",
               "-np", str(args.np), "/bin/sh", "-c", script]
    else:
        cmd = [args.kolorun, "-np", str(args.np), "--timeout", str(args.timeout), "/bin/sh", "-c", script]
    proc = subprocess.run(cmd, env=env, cwd=os.path.join(workdir, "test", "parallel"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(os.path.join(workdir, f"{tag}.log"), "w") as f:
        f.write(proc.stdout)
    per_rank = [outcomes([p], timing) for p in sorted(glob.glob(os.path.join(xml_dir, "rank*.xml")))]
    names = [t.split("::")[-1] for t in tests]
    if len(per_rank) < args.np:  # a rank died before writing its report
        per_rank.append({})
    result = {}
    for name in names or sorted(set().union(*per_rank)):
        seen = [r.get(name, "failed") for r in per_rank]
        result[name] = ("passed" if all(s == "passed" for s in seen) else
                        "skipped" if all(s == "skipped" for s in seen) else "failed")
    return result, proc


def rerun_timing(args, env, workdir, tests, result, timing):
    """Reruns each test that failed on timing (outcomes()) in a job of its own, up to
    RERUNS times; says so either way, and counts the last run's outcome."""
    for name in sorted(n for n in timing if result.get(n) == "failed"):
        node = next(t for t in tests if t.split("::")[-1] == name)
        for attempt in range(1, RERUNS + 1):
            outcome = run_job(args, env, workdir, [node], f"rerun-{name}-{attempt}")[0][name]
            if outcome != "failed":
                break
        why = TIMING_TESTS.get(name, f"'{TIMING}': kolo's poll() found every operation finished already")
        print(f"  {name}: failed on timing in the one job ({why}); rerun alone: {outcome} "
              f"(attempt {attempt})", flush=True)
        result[name] = outcome


def print_first_failures(workdir, unexplained, count=2, lines=30):
    """Prints, for the first `count` of `unexplained` in the order they ran, what each rank's
    report says (the traceback's last lines): CI keeps only this output, not the work directory."""
    shown = []
    for path in sorted(glob.glob(os.path.join(workdir, "xml", "*", "rank*.xml"))):
        rank = os.path.basename(path)[:-len(".xml")]
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("name")
            if name not in unexplained or (name not in shown and len(shown) == count):
                continue
            if name not in shown:
                shown.append(name)
            for c in case:
                if c.tag in ("failure", "error"):
                    text = ((c.get("message") or "") + "\n" + (c.text or "")).strip().splitlines()
                    print(f"--- {name}, {rank} ({c.tag}):", *text[-lines:], sep="\n  ", flush=True)


def summary(label, result, started, by_design, outside):
    """Prints the counts and each failure's cause; returns the failures with no known cause."""
    counts = {k: sum(v == k for v in result.values()) for k in ("passed", "failed", "skipped")}
    print(f"{label}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped ({time.time() - started:.0f} s)", flush=True)
    unexplained = []
    for name in sorted(n for n, v in result.items() if v == "failed"):
        why = (f"  (by design: {by_design[name]})" if name in by_design else
               f"  (outside kolo: {outside[name]})" if name in outside else "")
        if not why:
            unexplained.append(name)
        print(f"  FAILED {name}{why}")
    return unexplained, counts["passed"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("horovod", help="a Horovod checkout, or a (bare) git directory of one")
    ap.add_argument("--mode", choices=("file", "per-test", "both"), default="both")
    ap.add_argument("--suite", choices=sorted(SUITES), default="torch")
    ap.add_argument("-k", default=None, help="pytest -k expression selecting tests")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--gloo", action="store_true", help="HOROVOD_RANK/SIZE instead of PMI_RANK/SIZE")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--kolorun", default=os.path.join(REPO, "build", "tools", "kolorun", "kolorun"))
    ap.add_argument("--pythonpath", default=os.path.join(REPO, "build", "python"),
                    help="where the built kolo package is")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per kolorun job")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, XML)")
    ap.add_argument("--launcher", choices=("kolorun", "mpirun"), default="kolorun")
    ap.add_argument("--apart", choices=("by-design", "none"), default="by-design",
                    help="file mode: run the by-design tests in jobs of their own, or none apart")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on a failure that is neither by design nor outside kolo")
    ap.add_argument("--min-passed", type=int, default=0, help="with --check: at least this many pass")
    args = ap.parse_args()

    files, shim_files, by_design, test_file = SUITES[args.suite]
    workdir = tempfile.mkdtemp(prefix="kolo-horovod-tests-")
    try:
        copy_tests(args.horovod, workdir, files)
        shim = os.path.join(workdir, "shim")
        make_shim(args.python, shim, shim_files)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([shim, args.pythonpath] +
                                            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.setdefault("KOLO_NAMED_CYCLE_US", NAMED_CYCLE_US)
        selector = ["-k", args.k] if args.k else []
        listing = subprocess.run([args.python, "-m", "pytest", "--collect-only", "-q",
                                  "-p", "no:cacheprovider", *selector, test_file],
                                 env=env, cwd=os.path.join(workdir, "test", "parallel"),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tests = [line.strip() for line in listing.stdout.splitlines() if "::" in line]
        if not tests:
            sys.exit(f"run_horovod_tests: no tests collected:\n{listing.stdout[-4000:]}")
        print(f"{len(tests)} tests, {args.np} ranks, {args.python}; work directory {workdir}", flush=True)
        outside = outside_kolo(args.python) if args.suite == "torch" else \
            outside_kolo_tf(args.python, args.suite)
        unexplained, fewest = [], len(tests)
        if args.mode in ("file", "both"):
            started = time.time()
            apart = [t for t in tests if t.split("::")[-1] in by_design and args.apart == "by-design"]
            timing = set()
            result, proc = run_job(args, env, workdir, [t for t in tests if t not in apart], "file", timing)
            for i, t in enumerate(apart):
                result.update(run_job(args, env, workdir, [t], f"apart{i}")[0])
            rerun_timing(args, env, workdir, tests, result, timing)
            how = "the by-design tests in jobs of their own" if apart else "every test in the one job"
            bad, passed = summary(f"one file ({args.launcher} exit {proc.returncode}; {how})",
                                  result, started, by_design, outside)
            unexplained += bad
            fewest = min(fewest, passed)
        if args.mode in ("per-test", "both"):
            started = time.time()
            result = {}
            for i, t in enumerate(tests):
                r, _ = run_job(args, env, workdir, [t], f"test{i:03d}")
                result.update(r)
            bad, passed = summary("one test per job", result, started, by_design, outside)
            unexplained += bad
            fewest = min(fewest, passed)
        if args.keep:
            print(f"logs and XML kept in {workdir}")
        if args.check and (unexplained or fewest < args.min_passed):
            print_first_failures(workdir, set(unexplained))
            sys.exit(f"run_horovod_tests: {len(unexplained)} failure(s) with no known cause "
                     f"({', '.join(sorted(set(unexplained)))}); fewest passed {fewest}, "
                     f"at least {args.min_passed} wanted")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
