#!/usr/bin/env python3
"""Horovod itself beside kolo, the same programs in one run (issue 20). Driven by
compare.sh; run that.

Systems (every program is started the way its users start it):
  kolo            kolorun -np N /usr/bin/python3 ...           (PYTHONPATH=BUILD/python)
  hvd-gloo        horovodrun -np N -H 127.0.0.1:N --gloo VENV/bin/python ...
  hvd-gloo-tuned  the same with the tuning env (--tuned, default Horovod's documented
                  values HOROVOD_FUSION_THRESHOLD=33554432 HOROVOD_CYCLE_TIME=3.5)
  hvd-mpi         horovodrun ... --mpi (Debian's Open MPI 4.1; OMPI_ALLOW_RUN_AS_ROOT
                  when root; with more ranks than cores --mca mpi_yield_when_idle 1, what
                  Open MPI picks itself when it knows it is oversubscribed)
  hvd-mpi-tuned   the same with the tuning env
Every rank runs through hvd_as.py, which makes `import kolo.torch` and `import
horovod.torch` both resolve to the implementation under test, so the programs are the
same files for all systems. One BLAS/OpenMP thread per rank everywhere.

Parts (--parts, default all):
  step       bench/python/horovod_step.py (Fashion-MNIST step with hvd.DistributedOptimizer),
             MODEL mlp and cnn, at each --np; samples/s; also (unless --no-ceiling) the machine's
             ceiling: N independent 1-rank runs of the same program at once (no communication,
             no waiting for a peer: what no implementation can beat), in the same rotation
  allreduce  hvd.allreduce_ f32 sum in place (hvd_allreduce.py), --sizes, at each --np; time
  startup    launcher start to the first collective done on rank 0, at 2 ranks: kolorun vs
             horovodrun --gloo / --mpi (tuning plays no part there); seconds
  timeline   the mlp step and the 8 B allreduce at 2 ranks with the timeline off and on
             (KOLO_TIMELINE / HOROVOD_TIMELINE), defaults only
  synthetic  Horovod's examples/pytorch/pytorch_synthetic_benchmark.py, taken from a Horovod
             checkout at run time (--synthetic-script, else `git show v0.28.1:...` of
             --horovod-git), --no-cuda, a small torchvision model (--synthetic-model); its
             "Total img/sec"
Each repetition runs every system once on every case, rotating the order of the systems
from repetition to repetition; tables hold the medians over repetitions, and ratios are
taken from those same-run medians.
"""
import argparse
import atexit
import datetime
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "torch"))
from compare import machine, torch_of  # noqa: E402  (bench/torch/compare.py)

ALL_SYSTEMS = ["kolo", "hvd-gloo", "hvd-gloo-tuned", "hvd-mpi", "hvd-mpi-tuned"]
DOC_TUNED = "HOROVOD_FUSION_THRESHOLD=33554432 HOROVOD_CYCLE_TIME=3.5"
NAN = float("nan")
SYNTH_PATH = "examples/pytorch/pytorch_synthetic_benchmark.py"
SYNTH_URL = "https://raw.githubusercontent.com/horovod/horovod/{ref}/" + SYNTH_PATH


def log(msg):
    print(f"compare: {msg}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, a):
        self.a = a
        self.kolorun = os.path.join(a.build, "tools", "kolorun", "kolorun")
        self.horovodrun = os.path.join(a.venv, "bin", "horovodrun")
        self.hvd_python = os.path.join(a.venv, "bin", "python")
        self.base_env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                             THREADS="1")
        for k in list(self.base_env):
            if k.startswith(("HOROVOD_", "KOLO_")) and k not in ("KOLO_ANCHORS",):
                del self.base_env[k]  # nothing left over from the caller's shell
        self.tuned = dict(kv.split("=", 1) for kv in a.tuned.split())
        self.hvd_env = dict(kv.split("=", 1) for kv in a.hvd_env.split())
        self.prefix = shlex.split(a.exec_prefix)
        self.failures = []
        if a.rsh:
            # horovodrun (and the mpirun it starts) call plain `ssh`: one first in PATH adds
            # the options of --rsh (the emulated hosts' ssh config).
            rsh = shlex.split(a.rsh)
            d = tempfile.mkdtemp(prefix="kolo-hvd-ssh.")
            atexit.register(shutil.rmtree, d, True)
            real = shutil.which(rsh[0]) or rsh[0]
            with open(os.path.join(d, "ssh"), "w") as f:
                f.write("#!/bin/sh\nexec " + " ".join(shlex.quote(x) for x in [real, *rsh[1:]]) + ' "$@"\n')
            os.chmod(os.path.join(d, "ssh"), 0o755)
            self.base_env["PATH"] = d + os.pathsep + self.base_env.get("PATH", "")

    def command(self, system, n, prog, extra_env=None):
        """(argv, env) to run `prog` (argv of a Python program) on N ranks of `system`."""
        env = dict(self.base_env, **(extra_env or {}))
        # 127.0.0.1, not "localhost": horovodrun ssh-es to every host whose name does not resolve to
        # one of this machine's addresses, and a bare root (debootstrap) has no /etc/hosts at all.
        hosts = self.a.hosts or f"127.0.0.1:{n}"
        if system == "kolo":
            env["PYTHONPATH"] = os.path.abspath(os.path.join(self.a.build, "python")) + (
                os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            where = ["-np", str(n)]
            if self.a.hosts:  # ranks started over ssh see only what -x passes
                passed = ["PYTHONPATH", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "THREADS",
                          *(extra_env or {})]
                where = ["-H", hosts, "--rsh", self.a.rsh] + [x for k in passed for x in ("-x", k)]
            return (self.prefix + [self.kolorun, *where, "--no-tag-output", self.a.python,
                                   os.path.join(HERE, "hvd_as.py"), "kolo.torch", *prog], env)
        ctrl = "--gloo" if system.startswith("hvd-gloo") else "--mpi"
        env.update(self.hvd_env)
        if system.endswith("-tuned"):
            env.update(self.tuned)
        argv = [self.horovodrun, "-np", str(n), "-H", hosts, ctrl, "--start-timeout", "600"]
        if self.a.iface:
            argv += ["--network-interface", self.a.iface]
        if ctrl == "--mpi":
            if os.geteuid() == 0:
                env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            mpi_args = []
            if n > (os.cpu_count() or 1):
                mpi_args += ["--mca", "mpi_yield_when_idle", "1"]
            if self.a.iface:
                mpi_args += ["--mca", "oob_tcp_if_include", self.a.iface]
            if mpi_args:
                argv += ["--mpi-args=" + " ".join(mpi_args)]
        return self.prefix + argv + [self.hvd_python, os.path.join(HERE, "hvd_as.py"), "horovod.torch", *prog], env

    def run(self, system, n, prog, extra_env=None, what=""):
        """Runs it; (stdout+stderr, seconds from start to exit, launch epoch) or None on failure."""
        argv, env = self.command(system, n, prog, extra_env)
        t_launch = time.time()
        p = self.start(argv, env)
        out = self.finish(p)
        wall = time.time() - t_launch
        if p.returncode != 0:
            tail = "\n".join(out.splitlines()[-25:])
            msg = f"{system} n={n} {what}: exit {p.returncode}\n  $ {' '.join(argv)}\n{tail}"
            log("FAILED " + msg)
            self.failures.append(msg)
            return None
        return out, wall, t_launch

    @staticmethod
    def start(argv, env):
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, cwd=REPO)

    def finish(self, p):
        """Its stdout+stderr once it exits; after --timeout seconds its process group is killed (exit 124)."""
        try:
            out, _ = p.communicate(timeout=self.a.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            out += f"\n[timed out after {self.a.timeout}s]"
            p.returncode = 124
        return out

    def run_apart(self, n, prog, extra_env, what):
        """N independent 1-rank kolo runs of `prog` at once; their outputs, or None on a failure."""
        procs = [self.start(*self.command("kolo", 1, prog, extra_env)) for _ in range(n)]
        outs, failed = [], False
        for p in procs:
            out = self.finish(p)
            outs.append(out)
            if p.returncode != 0:
                failed = True
                msg = f"ceiling n={n} {what}: a 1-rank run exited {p.returncode}\n" + "\n".join(out.splitlines()[-25:])
                log("FAILED " + msg)
                self.failures.append(msg)
        return None if failed else outs


def synthetic_script(a):
    """Horovod's synthetic benchmark, never committed here (nor in Horovod's sdist): --synthetic-script,
    else REF of the --horovod-git snapshot, else downloaded from GitHub at REF.
    (path, where it came from, None), or (None, None, why not)."""
    if a.synthetic_script:
        return a.synthetic_script, a.synthetic_script, None
    tmp = tempfile.mkdtemp(prefix="kolo-hvd-synth.")
    atexit.register(shutil.rmtree, tmp, True)
    src = subprocess.run(["git", f"--git-dir={a.horovod_git}", "show", f"{a.horovod_ref}:{SYNTH_PATH}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if src.returncode == 0:
        text, where = src.stdout, f"{a.horovod_git} at {a.horovod_ref}"
    else:
        url = SYNTH_URL.format(ref=a.horovod_ref)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                text, where = r.read().decode(), url
        except Exception as e:  # no snapshot and no GitHub: the part is left out, the rest runs
            return None, None, (f"`git show {a.horovod_ref}:{SYNTH_PATH}` of {a.horovod_git}: "
                                f"{src.stderr.strip() or 'failed'}; {url}: {e}")
    path = os.path.join(tmp, os.path.basename(SYNTH_PATH))
    with open(path, "w") as f:
        f.write(text)
    return path, where, None


def samples_per_s(out):
    """horovod_step.py's samples/s from a run's output, or NAN when the line is missing."""
    m = out and re.search(r"samples_per_s=(\d+)", out)
    return float(m.group(1)) if m else NAN


def rotated(systems, rep):
    k = rep % len(systems)
    return systems[k:] + systems[:k]


def med(v):
    v = [x for x in v if x == x]
    return statistics.median(v) if v else NAN


def fmt(x, spec):
    return "failed" if x != x else format(x, spec)


def xr(r, spec=".2f"):
    return "—" if r != r else format(r, spec) + "×"


def size_name(b):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f and b % f == 0:
            return f"{b // f} {unit}"
    return f"{b} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--venv", required=True, help="Horovod's venv (build.sh prints it)")
    ap.add_argument("--python", default="/usr/bin/python3", help="kolo ranks' Python (Debian's torch)")
    ap.add_argument("--horovod-git", default="/work/.mirror/horovod+horovod/repo")
    ap.add_argument("--horovod-ref", default="v0.28.1", help="ref of --horovod-git to take the synthetic benchmark from")
    ap.add_argument("--synthetic-script", help="pytorch_synthetic_benchmark.py to run (else from --horovod-git)")
    ap.add_argument("--synthetic-model", default="mobilenet_v3_small")
    ap.add_argument("--synthetic-args", default="--batch-size 8 --num-warmup-batches 2 --num-batches-per-iter 5 --num-iters 3")
    ap.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    ap.add_argument("--parts", default="step,allreduce,startup,timeline,synthetic")
    ap.add_argument("--np", default="2,4", help="rank counts for step, allreduce, synthetic")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                    help="step: leave out the ceiling (N independent 1-rank runs at once)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sizes", default="8 1048576 67108864 268435456")
    ap.add_argument("--iters", default="200,20,5", help="allreduce iterations below 1 MiB, 1 MiB to <64 MiB, from 64 MiB")
    ap.add_argument("--tuned", default=DOC_TUNED, help="env of the -tuned systems")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per program run")
    ap.add_argument("--command", default="", help="the command line, for the report")
    ap.add_argument("--hosts", help="across hosts: kolorun/horovodrun -H (e.g. h0:2,h1:2); --np is its slot count")
    ap.add_argument("--rsh", default="", help="with --hosts: the ssh command reaching them (kolorun --rsh; "
                                              "horovodrun and mpirun get it as `ssh` first in PATH)")
    ap.add_argument("--iface", default="", help="with --hosts: horovodrun --network-interface (and Open MPI's oob)")
    ap.add_argument("--exec-prefix", default="", help="argv prefix of every launcher (e.g. nsenter into host h0)")
    ap.add_argument("--hvd-env", default="", help="env of every Horovod system (e.g. HOROVOD_HIERARCHICAL_ALLREDUCE=1)")
    ap.add_argument("--title", default="", help="the report's title (default: single-host wording)")
    ap.add_argument("--note", action="append", default=[], help="a bullet of the report's header (repeatable)")
    ap.add_argument("--no-preflight", action="store_true", help="skip the first 8-byte allreduce per launcher")
    ap.add_argument("--out")
    a = ap.parse_args()
    systems = a.systems.split(",")
    hvds = [s for s in systems if s != "kolo"]
    parts = a.parts.split(",")
    nps = [int(x) for x in a.np.split(",")]
    if a.hosts:
        nps = [sum(int(h.rsplit(":", 1)[1]) if ":" in h else 1 for h in a.hosts.split(","))]
    R = Runner(a)

    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    raw = []  # "part case system rep value" lines for the appendix

    # ---------------------------------------------------------------- header
    hvd_ver = []
    if hvds:
        hvd_ver = subprocess.run([R.hvd_python, "-c", "import horovod; print(horovod.__version__)"], cwd="/tmp",
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout.strip().splitlines()
    marker = os.path.join(a.venv, ".kolo-horovod-built")
    built = open(marker).read().strip().replace("\n", "; ") if os.path.exists(marker) else "?"
    mpi_ver = subprocess.run(["mpirun", "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True).stdout.splitlines()[:1]
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                         text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src", "include", "python", "tools",
                            "CMakeLists.txt"], stdout=subprocess.PIPE, text=True).stdout.strip()
    now = datetime.datetime.utcnow()
    say(f"# {a.title or 'Horovod beside kolo, same programs, one run'} ({platform.node()}, {now:%Y-%m-%d %H:%M} UTC)")
    say()
    say("Every rank runs the same file on either implementation (`bench/horovod/hvd_as.py` makes "
        "`import kolo.torch` and `import horovod.torch` resolve to the one under test), started by its own "
        "launcher: `kolorun` for kolo, `horovodrun` for Horovod. "
        f"{a.reps} repetition{'s' if a.reps != 1 else ''}; each runs every system once per case, the order of the systems rotating "
        "from repetition to repetition; medians over repetitions, ratios of same-run medians.")
    say()
    say(f"- machine: {machine()}")
    build = os.environ.get("KOLO_BUILD_LABEL") or os.path.relpath(a.build, REPO)
    say(f"- kolo {rev}{' + uncommitted changes' if dirty else ''} (build {build}); "
        f"{torch_of(a.python)}")
    say(f"- Horovod {hvd_ver[-1] if hvd_ver else '?'} ({built}); venv {a.venv}")
    say(f"- {mpi_ver[0] if mpi_ver else 'mpirun ?'}; Horovod MPI runs add `--mca mpi_yield_when_idle 1` when ranks "
        f"outnumber the {os.cpu_count()} cores; horovodrun's own `-bind-to none -map-by slot` otherwise")
    if any(x.endswith("-tuned") for x in systems):
        say(f"- defaults: Horovod 0.28.1's own (HOROVOD_FUSION_THRESHOLD 128 MiB, HOROVOD_CYCLE_TIME 1 ms, response "
            f"cache on); tuned: `{a.tuned}`"
            + (" (the values Horovod's docs give, docs/mpi.rst \"Horovod Parameter Knobs\" and "
               "docs/tensor-fusion.rst: 32 MiB, 3.5 ms)" if a.tuned == DOC_TUNED else ""))
    say("- 1 BLAS/OpenMP thread per rank (OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1, torch.set_num_threads(1))")
    say(f"- load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
    if a.hvd_env:
        say(f"- every Horovod run also has `{a.hvd_env}`")
    if a.hosts:
        say(f"- hosts: `-H {a.hosts}`, reached by `{a.rsh}`" + (f", interface {a.iface}" if a.iface else ""))
    for note in a.note:
        say(f"- {note}")
    if a.command:
        say(f"- command: `{a.command}`")
    say()

    results = {}  # (part, case) -> {system: [values]}

    def record(part, case, system, rep, value):
        results.setdefault((part, case), {}).setdefault(system, []).append(value)
        raw.append(f"{part} {case} {system} rep={rep} {value:.6g}")

    # ---------------------------------------------------------------- parts
    synth_script = synth_from = synth_missing = None
    if "synthetic" in parts:
        synth_script, synth_from, synth_missing = synthetic_script(a)
        if synth_missing:
            log(f"Horovod's synthetic benchmark left out (give --synthetic-script FILE): {synth_missing}")
            parts.remove("synthetic")

    ar_sizes = [int(s) for s in a.sizes.split()]
    it_small, it_mid, it_big = a.iters.split(",")

    if not a.hosts and any(x.startswith("hvd-gloo") for x in systems):
        # Horovod 0.28.1's Gloo ranks die of SIGSEGV, saying nothing, on a machine whose own name does not
        # resolve (seen in a bare debootstrap root: an empty /etc/hosts); say so instead.
        name = socket.gethostname()
        try:
            socket.gethostbyname(name)
        except OSError as e:
            sys.exit(f"compare: this machine's name '{name}' does not resolve ({e}), and Horovod 0.28.1's Gloo "
                     f"controller crashes (SIGSEGV) on such a machine; add '127.0.1.1 {name}' to /etc/hosts "
                     "(as Debian's installer does), or leave Gloo out: -- --systems kolo,hvd-mpi,hvd-mpi-tuned")

    if not a.no_preflight:
        # One 8-byte allreduce per launcher first: a broken build (a stale kolo._C, a Horovod without a
        # controller) stops the run here instead of failing every case of a long run.
        for s in dict.fromkeys(x.replace("-tuned", "") for x in systems):
            r = R.run(s, nps[0], [os.path.join(HERE, "hvd_allreduce.py")], dict(SYSTEM=s, SIZES="8", ITERS="2"),
                      "preflight")
            if not r or not re.search(r"time_us=", r[0]):
                sys.exit(f"compare: preflight of {s} failed; nothing measured:\n" + "\n".join(R.failures))
        log("preflight: every launcher ran an 8-byte allreduce")

    for rep in range(a.reps):
        log(f"repetition {rep + 1}/{a.reps}, load {os.getloadavg()[0]:.2f}")
        if "step" in parts:
            for model in a.models.split(","):
                step_prog = [os.path.join(REPO, "bench", "python", "horovod_step.py")]
                step_env = dict(MODEL=model, STEPS=str(a.steps), BATCH=str(a.batch))
                for n in nps:
                    for s in rotated(systems + (["ceiling"] if a.ceiling else []), rep):
                        if s == "ceiling":
                            t_c = time.time()
                            outs = R.run_apart(n, step_prog, step_env, f"step {model}")
                            v = sum(samples_per_s(o) for o in outs) if outs else NAN  # NAN if any line is missing
                            record("step", (model, n), s, rep, v)
                            log(f"  step {model} n={n} ceiling ({n} x 1 rank at once): {v:.0f} samples/s "
                                f"(runs {time.time() - t_c:.0f} s)")
                            continue
                        r = R.run(s, n, step_prog, step_env, f"step {model}")
                        v = samples_per_s(r and r[0])
                        if r and v != v:
                            R.failures.append(f"{s} n={n} step {model}: no samples_per_s in\n{r[0][-2000:]}")
                        record("step", (model, n), s, rep, v)
                        log(f"  step {model} n={n} {s}: {v:.0f} samples/s" + (f" (run {r[1]:.0f} s)" if r else ""))
        if "allreduce" in parts:
            for n in nps:
                for s in rotated(systems, rep):
                    t_sys = time.time()
                    for nbytes in ar_sizes:  # one program run per size: 256 MiB x 4 ranks stays alone in memory
                        iters = it_small if nbytes < (1 << 20) else it_mid if nbytes < (64 << 20) else it_big
                        r = R.run(s, n, [os.path.join(HERE, "hvd_allreduce.py")],
                                  dict(SYSTEM=s, SIZES=str(nbytes), ITERS=iters), f"allreduce {nbytes}")
                        m = r and re.search(rf"n={n} bytes=\d+ time_us=([\d.]+)", r[0])
                        v = float(m.group(1)) if m else NAN
                        if r and not m:
                            R.failures.append(f"{s} n={n} allreduce {nbytes}: no time_us in\n{r[0][-2000:]}")
                        record("allreduce", (nbytes, n), s, rep, v)
                    log(f"  allreduce n={n} {s}: " + ", ".join(
                        f"{size_name(b)} {results[('allreduce', (b, n))][s][-1]:.1f} us" for b in ar_sizes)
                        + f" (runs {time.time() - t_sys:.0f} s)")
        if "startup" in parts:
            for s in rotated([x for x in systems if not x.endswith("-tuned")], rep):
                r = R.run(s, 2, [os.path.join(HERE, "hvd_allreduce.py")], dict(SYSTEM=s, STARTUP="1"), "startup")
                m = r and re.search(r"first_collective_epoch=([\d.]+) import_s=([\d.]+) "
                                    r"init_s=([\d.]+) first_s=([\d.]+)", r[0])
                if m:
                    first = float(m.group(1)) - r[2]
                    record("startup", "first", s, rep, first)
                    record("startup", "exit", s, rep, r[1])
                    record("startup", "imports", s, rep, float(m.group(2)))
                    record("startup", "init", s, rep, float(m.group(3)))
                    record("startup", "first_in", s, rep, float(m.group(4)))
                    log(f"  startup {s}: first collective {first:.2f} s, exit {r[1]:.2f} s")
                else:
                    if r:
                        R.failures.append(f"{s} startup: no first_collective_epoch in\n{r[0][-2000:]}")
                    for k in ("first", "exit", "imports", "init", "first_in"):
                        record("startup", k, s, rep, NAN)
        if "timeline" in parts:
            tl_systems = [x for x in systems if not x.endswith("-tuned")]
            for s in rotated(tl_systems, rep):
                for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                    tl_dir = tempfile.mkdtemp(prefix="kolo-hvd-timeline.")
                    tl_env = {} if mode == "off" else {
                        ("KOLO_TIMELINE" if s == "kolo" else "HOROVOD_TIMELINE"): os.path.join(tl_dir, "timeline.json")}
                    r = R.run(s, 2, [os.path.join(REPO, "bench", "python", "horovod_step.py")],
                              dict(tl_env, MODEL="mlp", STEPS=str(a.steps), BATCH=str(a.batch)), f"timeline {mode} step")
                    record("timeline", ("step", mode), s, rep, samples_per_s(r and r[0]))
                    r2 = R.run(s, 2, [os.path.join(HERE, "hvd_allreduce.py")],
                               dict(tl_env, SYSTEM=s, SIZES="8", ITERS=it_small), f"timeline {mode} allreduce")
                    m2 = r2 and re.search(r"n=2 bytes=\d+ time_us=([\d.]+)", r2[0])
                    record("timeline", ("ar8", mode), s, rep, float(m2.group(1)) if m2 else NAN)
                    written = sum(os.path.getsize(os.path.join(tl_dir, f)) for f in os.listdir(tl_dir))
                    if mode == "on":
                        record("timeline", ("bytes", mode), s, rep, written)
                    shutil.rmtree(tl_dir, ignore_errors=True)
                    log(f"  timeline {mode} {s}: mlp step {results[('timeline', ('step', mode))][s][-1]:.0f} samples/s, "
                        f"8 B allreduce {results[('timeline', ('ar8', mode))][s][-1]:.1f} us"
                        + (f", timeline files {written} bytes" if mode == "on" else ""))
        if "synthetic" in parts:
            for n in nps:
                for s in rotated(systems, rep):
                    r = R.run(s, n, [synth_script, "--no-cuda", "--model", a.synthetic_model,
                                     *a.synthetic_args.split()], None, "synthetic")
                    m = r and re.search(r"Total img/sec on \d+ CPU\(s\): ([\d.]+)", r[0])
                    v = float(m.group(1)) if m else NAN
                    if r and not m:
                        R.failures.append(f"{s} n={n} synthetic: no Total img/sec in\n{r[0][-2000:]}")
                    record("synthetic", n, s, rep, v)
                    log(f"  synthetic n={n} {s}: {v:.1f} img/s" + (f" (run {r[1]:.0f} s)" if r else ""))

    # ---------------------------------------------------------------- tables
    goals = []
    def systems_table(lead, ratio_name, row_values):
        """A table with one column per system, then the best Horovod and kolo's ratio to it;
        row_values: (first cells, {system: value}, format, best Horovod's name, ratio)."""
        say(f"| {lead} | ranks | {' | '.join(systems)} | best Horovod | {ratio_name} |")
        say("|---|---|" + "---|" * len(systems) + "---|---|")
        for first, row, f, bs, ratio in row_values:
            say(f"| {first} | " + " | ".join(fmt(row[s], f) for s in systems) + f" | {bs} | {xr(ratio)} |")

    def best_hvd(row, higher_better):
        vals = [(row.get(s, NAN), s) for s in hvds]
        vals = [(v, s) for v, s in vals if v == v]
        if not vals:
            return NAN, "-"
        return (max if higher_better else min)(vals)

    if "step" in parts:
        say("## Training step (`bench/python/horovod_step.py`), samples/s, higher is better")
        say()
        say(f"Fashion-MNIST, batch {a.batch}/rank, {a.steps} timed steps after 5 warm-up steps; "
            "mlp 784-4096-4096-10 (20.3 M parameters), cnn conv32-conv64-fc128 (1.2 M).")
        say()
        rows, ceilings = [], []
        for model in a.models.split(","):
            for n in nps:
                row = {s: med(results.get(("step", (model, n)), {}).get(s, [])) for s in systems}
                b, bs = best_hvd(row, True)
                ratio = row.get("kolo", NAN) / b if b == b else NAN
                rows.append((f"{model} | {n}", row, ".0f", bs, ratio))
                goal = {"mlp": 1.3, "cnn": 1.1}.get(model)
                c = med(results.get(("step", (model, n)), {}).get("ceiling", [])) if a.ceiling else NAN
                if a.ceiling:
                    ceilings.append(f"| {model} | {n} | {fmt(c, '.0f')} | {fmt(row.get('kolo', NAN) / c * 100, '.0f')} % | "
                                    f"{fmt(b / c * 100, '.0f')} % ({bs}) | {xr(c / b)} |")
                if n == 2 and goal and "kolo" in systems:
                    goals.append(f"- {model} step at 2 ranks, kolo / best Horovod (goal ≥ {goal}×): "
                                 f"{xr(ratio)} ({bs}): "
                                 + ("met" if ratio == ratio and ratio >= goal else "NOT met")
                                 + (f"; the ceiling is {xr(c / b)} best Horovod" if c == c and b == b else ""))
        systems_table("model", "kolo / best Horovod", rows)
        say()
        if ceilings:
            say(f"Ceiling: N independent 1-rank runs of the same program at once, samples/s summed (no "
                "communication and no waiting for a peer; what no implementation can beat on this machine):")
            say()
            say("| model | ranks | ceiling | kolo, % of ceiling | best Horovod, % of ceiling | ceiling / best Horovod |")
            say("|---|---|---|---|---|---|")
            for line in ceilings:
                say(line)
            say()

    if "allreduce" in parts:
        say("## `hvd.allreduce_` f32 sum in place (`bench/horovod/hvd_allreduce.py`), µs per call, lower is better")
        say()
        say(f"Iterations: {it_small} below 1 MiB, {it_mid} from 1 MiB, {it_big} from 64 MiB, after 3 warm-up calls; "
            "one program run per size.")
        say()
        rows = []
        for n in nps:
            for nbytes in ar_sizes:
                row = {s: med(results.get(("allreduce", (nbytes, n)), {}).get(s, [])) for s in systems}
                b, bs = best_hvd(row, False)
                ratio = b / row.get("kolo", NAN) if "kolo" in row else NAN
                rows.append((f"{size_name(nbytes)} | {n}", row, ".1f", bs, ratio))
                if a.hosts and nbytes >= (16 << 20) and "kolo" in systems:
                    goals.append(f"- {size_name(nbytes)} allreduce across hosts, best Horovod / kolo (goal ≥ 1.5×): "
                                 f"{xr(ratio)} ({bs}): " + ("met" if ratio == ratio and ratio >= 1.5 else "NOT met"))
                if nbytes <= 64 and n == 2 and "kolo" in systems:
                    goals.append(f"- {size_name(nbytes)} allreduce latency at 2 ranks, best Horovod / kolo "
                                 f"(goal ≥ 20×): {xr(ratio, '.1f')} ({bs}): "
                                 + ("met" if ratio == ratio and ratio >= 20 else "NOT met"))
        systems_table("size", "kolo speed-up over best Horovod", rows)
        say()

    if "startup" in parts:
        ss = [x for x in systems if not x.endswith("-tuned")]
        launcher = {"kolo": "kolorun -np 2", "hvd-gloo": "horovodrun -np 2 --gloo", "hvd-mpi": "horovodrun -np 2 --mpi"}
        say("## Start-up: launcher start to the first collective done (rank 0), 2 ranks, seconds, lower is better")
        say()
        say("The program: import torch, import the Horovod API, `hvd.init()`, one 4-byte `hvd.allreduce_`. "
            "The in-process columns are rank 0's own clock: interpreter start to torch and the API imported, "
            "`hvd.init()`, the first allreduce.")
        say()
        say("| launcher | to first collective | to exit | in-process: imports | hvd.init() | first allreduce |")
        say("|---|---|---|---|---|---|")
        for s in ss:
            g = {k: med(results.get(("startup", k), {}).get(s, [])) for k in ("first", "exit", "imports", "init", "first_in")}
            say(f"| {launcher.get(s, s)} | {fmt(g['first'], '.2f')} | {fmt(g['exit'], '.2f')} | "
                f"{fmt(g['imports'], '.2f')} | {fmt(g['init'], '.2f')} | {fmt(g['first_in'], '.3f')} |")
        say()

    if "timeline" in parts:
        ss = [x for x in systems if not x.endswith("-tuned")]
        say("## Timeline cost: off vs on (`KOLO_TIMELINE` / `HOROVOD_TIMELINE`), 2 ranks, defaults")
        say()
        say(f"The mlp step as above (samples/s, higher is better) and the 8 B `hvd.allreduce_` ({it_small} calls, µs, "
            "lower is better); each repetition runs both modes, their order alternating.")
        say()
        say("| system | mlp step off | on | step cost | 8 B allreduce off | on | latency cost | timeline file |")
        say("|---|---|---|---|---|---|---|---|")
        for s in ss:
            g = {k: med(results.get(("timeline", k), {}).get(s, []))
                 for k in (("step", "off"), ("step", "on"), ("ar8", "off"), ("ar8", "on"), ("bytes", "on"))}
            sc = 1 - g[("step", "on")] / g[("step", "off")] if g[("step", "off")] == g[("step", "off")] else NAN
            lc = g[("ar8", "on")] / g[("ar8", "off")] - 1 if g[("ar8", "off")] == g[("ar8", "off")] else NAN
            say(f"| {s} | {fmt(g[('step', 'off')], '.0f')} | {fmt(g[('step', 'on')], '.0f')} | {fmt(sc * 100, '+.1f')} % | "
                f"{fmt(g[('ar8', 'off')], '.1f')} | {fmt(g[('ar8', 'on')], '.1f')} | {fmt(lc * 100, '+.1f')} % | "
                f"{fmt(g[('bytes', 'on')] / 1024, '.0f')} KiB |")
        say()

    if "synthetic" in parts:
        say(f"## Horovod's `examples/pytorch/pytorch_synthetic_benchmark.py` ({a.horovod_ref}), total img/sec, "
            "higher is better")
        say()
        say(f"`--no-cuda --model {a.synthetic_model} {a.synthetic_args}` (resnet50, its default, is too slow on "
            f"this machine); the script is taken at run time from {synth_from} and runs unmodified on both.")
        say()
        rows = []
        for n in nps:
            row = {s: med(results.get(("synthetic", n), {}).get(s, [])) for s in systems}
            b, bs = best_hvd(row, True)
            ratio = row.get("kolo", NAN) / b if b == b else NAN
            rows.append((f"{a.synthetic_model} | {n}", row, ".1f", bs, ratio))
        systems_table("model", "kolo / best Horovod", rows)
        say()

    if synth_missing:
        say("## Horovod's `examples/pytorch/pytorch_synthetic_benchmark.py`: left out")
        say()
        say(f"Neither a Horovod snapshot nor GitHub could be read ({synth_missing}); "
            "`compare.sh -- --synthetic-script FILE` runs it from a copy.")
        say()

    if goals:
        say("## Goals (issue 20)")
        say()
        for g in goals:
            say(g)
        if not a.hosts:
            say("- across 2 hosts vs HOROVOD_HIERARCHICAL_ALLREDUCE=1: bench/horovod/hosts.sh")
        say()
    say(f"Load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at end.")
    if R.failures:
        say()
        say(f"## Failed runs ({len(R.failures)})")
        say()
        for f in R.failures:
            say("```")
            say(f)
            say("```")
    say()
    say("<details><summary>every run</summary>")
    say()
    say("```")
    for r in raw:
        say(r)
    say("```")
    say("</details>")

    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        log(f"wrote {a.out}")
    return 1 if R.failures else 0


if __name__ == "__main__":
    sys.exit(main())
