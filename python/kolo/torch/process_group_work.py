"""The Work objects of the "kolo" process group and the thread that completes them.

Why a Python ``Work`` subclass and not ``_create_work_from_future(fut)``: the
Work that ``_create_work_from_future`` makes waits on its future but never
raises the future's error (torch 1.13 and 2.x), so ``dist.all_reduce(t)`` would
return normally after a dead peer. ``KoloWork.wait()`` raises kolo's error;
``get_future()`` hands DDP's Reducer (which reads results only through the
future) a future that carries the same error, so backward raises too.

Why the works are pinned: a Python subclass of ``Work`` returned to C++ (DDP's
parameter check and buffer broadcast call ``work->wait()`` from C++) keeps its
Python half only while Python holds a reference; without it the C++ side falls
back to the base ``Work::wait()``, which never returns. C++ callers in torch
wait right after issuing (at most two in flight), so every pending work plus
the last ``_PINNED_DONE`` completed ones are kept referenced here.

Why a pinned work lets go of its tensors: a completed work holds its result
(the output tensors, in its value and its futures). Pinned, the last 64 of
them kept every output alive: FSDP2 all-gathers each layer's full parameters
into a fresh tensor and drops it after the copy-out, so on the 20 M-parameter
MLP each rank held ~1 GB of dead all-gather outputs (peak RSS 2.1 GB, gloo's
1.1 GB; 1.1 GB with this release; bench/python/fsdp_step.py). So a pinned completed work that no Python code refers to
any more (its reference count shows only the pin) drops its value and
futures, except the newest ``_KEEP_RESULTS``: a C++ caller reads result() or
get_future() right after issuing. wait() needs neither, and a future handed
out before (DDP's Reducer holds its own) keeps its value.

Why a callback that issues a collective hands the thread over: a future's
then-callbacks run on the thread that completes it, the completion thread.
A comm hook such as PowerSGD issues its next allreduce inside such a callback
and waits for that allreduce's future there; the completion thread cannot
complete it while it runs the callback. So a collective issued on the
completion thread starts a new completion thread for the queue, and the old
one ends when its callback returns. kolo still runs the collectives in issue
order; only a later work's future may complete while an earlier work's
callback is still running, as with backends that complete on several threads.

Why one thread, and why wait() does not wait for it: kolo runs collectives in
issue order, so waiting for them in that order on one thread completes each
future as soon as it can be completed, and the issuing thread (DDP's
backward) never blocks. A thread that calls wait() itself (every blocking
torch.distributed call) waits on kolo's Work directly and completes the work
on the spot, whichever thread gets there first: no hand-over through the
completion thread and the GIL on the latency path.

Why stop() joins, and an atexit hook stops every completer: the threads are
daemons (a program that never destroys its group still exits), and Python
ends a daemon thread that reaches for the GIL during interpreter shutdown by
unwinding its stack; a thread releasing a torch future there crosses C++
destructors and ends the process with "terminate called without an active
exception" (SIGABRT after the program's last line, seen under torch 2.15). So
``destroy_process_group()`` waits for the works already issued, and at exit
the hook does the same before the interpreter starts finalizing.
"""
import atexit
import collections
import contextlib
import itertools
import queue
import sys
import threading
import weakref

import torch
import torch.distributed as dist

_PINNED_DONE = 64
_KEEP_RESULTS = 4  # the newest completed works keep their results regardless (module text)


@contextlib.contextmanager
def _on(stream):
    """The context that makes stream current on its device (nothing for None).
    Its device is made current first: leaving torch.cuda.stream alone puts
    back the stream it found on the thread's device — device 0 on kolo's
    completion thread — and setting device 0 makes a CUDA context there (CUDA
    12+) in every rank of a host with several GPUs. torch.cuda.device's exit
    puts the thread's device back without making one (torch >= 2.1)."""
    if stream is None:
        yield
        return
    with torch.cuda.device(stream.device), torch.cuda.stream(stream):
        yield


def _unwrap(fut):
    """then()-callback: turns (value, error) into a value or a raised error.

    torch's Python Future can only record an error as a C++ error through a
    callback that raises; set_exception() stores it as a plain value that C++
    readers (DDP) would take for a result."""
    value, error = fut.value()
    if error is not None:
        raise error
    return value


class KoloWork(dist.Work):
    """One issued collective: wait() blocks until it is done and raises its error.

    It holds kolo's Work, the result value, finish() (copies out of staging
    buffers, run once the collective succeeded) and every buffer kolo reads
    or writes (kolo has only their addresses) until it completes."""

    def __init__(self, what, kolo_work, value, finish, keep, stream=None):
        super().__init__()
        self._what = what
        self._kolo, self._value, self._finish, self._keep = kolo_work, value, finish, keep
        self._stream = stream  # the CUDA stream the op was issued on (None: CPU)
        # finish() runs on another thread (or a later wait()): in the caller's
        # inference mode, or its in-place copies into inference tensors fail
        # (Lightning validates and tests under torch.inference_mode).
        self._inference = torch.is_inference_mode_enabled()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._error = None
        self._released = False
        # A CUDA op's future is a CUDA future: set_result records an event on the
        # op's stream, and whoever reads the value (DDP's Reducer, a then()
        # callback) waits for it on the GPU, as with NCCL's works.
        self._source = torch.futures.Future(devices=[stream.device]) if stream is not None else torch.futures.Future()
        self._future = self._source.then(_unwrap)

    def _settle(self):
        """Waits for kolo's Work and completes this one; the first caller wins."""
        kolo_work, error = self._kolo, None
        if kolo_work is not None:
            try:
                kolo_work.wait()  # releases the GIL
            except BaseException as e:  # kolo's error, reported through this work
                error = e
        with self._lock, _on(self._stream):
            if self._done.is_set():
                return
            if error is None and self._finish is not None:
                try:
                    with torch.inference_mode(self._inference):
                        self._finish()  # on a CUDA op's stream: queued after the collective
                except BaseException as e:
                    error = e
            self._error = error
            value = self._value if error is None else None
            self._kolo = self._finish = self._keep = None
            self._source.set_result((value, error))
            self._done.set()

    def _order_current_stream(self):
        """A CUDA op: the caller's current stream waits for the op's stream
        (the copies out of staging), as NCCL's work.wait() orders it."""
        if self._stream is not None:
            current = torch.cuda.current_stream(self._stream.device)
            if current != self._stream:
                current.wait_stream(self._stream)

    def wait(self, timeout=None):
        seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        # torch passes timedelta(0) (kNoTimeout) for "no limit"; kolo's own
        # deadlines (KOLO_TIMEOUT_MS) bound every collective anyway.
        if not seconds:
            self._settle()
        elif not self._done.wait(seconds):
            raise RuntimeError(f"kolo: {self._what} did not complete within {seconds} s")
        if self._error is not None:
            raise self._error
        self._order_current_stream()
        return True

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def _release(self):
        """Drops the result of a completed work that only the completer holds."""
        self._value = self._source = self._future = None
        self._released = True

    def _check_held(self, what):
        if self._released:
            raise RuntimeError(f"kolo: {what} of a completed {self._what} whose result was released: "
                               "no Python code held the work (hold it, or take the future at once)")

    def result(self):
        self.wait()
        self._check_held("result()")
        return self._value

    def synchronize(self):
        # The copies out of staging are queued on the op's stream only once it
        # has completed (_settle): ordering the current stream before that
        # would read stale outputs.
        self.wait()

    def source_rank(self):
        raise RuntimeError("kolo: source_rank() belongs to recv from any source, which kolo does not offer")

    def get_future(self):
        self._check_held("get_future()")
        return self._future


class Completer:
    """Completes the KoloWorks in issue order on one thread."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._pending = set()
        self._done = collections.deque(maxlen=_PINNED_DONE)
        self._pin_lock = threading.Lock()
        self._thread = None
        self._threads = []  # started and not yet joined: the current one and any handed over
        self._lock = threading.Lock()
        _COMPLETERS.add(self)

    def submit(self, what, kolo_work, value, finish=None, keep=(), stream=None):
        """A KoloWork for an issued kolo Work (None: nothing was issued).

        value becomes the work's result; finish() runs after the kolo Work
        succeeded (on stream, the CUDA stream the op was issued on, if any);
        keep holds the buffers kolo uses until then."""
        work = KoloWork(what, kolo_work, value, finish, keep, stream)
        self._pending.add(work)
        if self._thread is threading.current_thread():
            with self._lock:
                self._thread = None  # issued from a callback: hand the queue over (module text)
        self._start()
        self._queue.put(work)
        return work

    def _start(self):
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="kolo-pg-completion", daemon=True)
                    self._threads = [t for t in self._threads if t.is_alive()]
                    self._threads.append(self._thread)
                    self._thread.start()

    def _run(self):
        me = threading.current_thread()
        while True:
            work = self._queue.get()
            if work is None:
                return
            work._settle()
            self._pin_done(work)
            self._pending.discard(work)
            del work
            if self._thread is not me:
                return  # a callback handed the queue to a newer thread

    def _pin_done(self, work):
        """Pins a completed work and releases the results of older pinned ones
        that only the pin refers to (module text)."""
        with self._pin_lock:  # a handed-over thread may pin at the same time
            self._done.append(work)
            for old in itertools.islice(self._done, 0, max(0, len(self._done) - _KEEP_RESULTS)):
                if not old._released and sys.getrefcount(old) <= _ONLY_PINNED:
                    old._release()

    def stop(self):
        """Ends the threads after the works already queued, and waits for them."""
        with self._lock:
            current, threads = self._thread, list(self._threads)
            if current is not None:
                self._queue.put(None)
        me = threading.current_thread()
        for t in threads:
            if t is not me:  # destroy_process_group() inside a callback: the thread ends on return
                t.join()
        with self._lock:
            if self._thread is current:
                self._thread = None  # a later submit starts a new thread


def _pinned_refcount():
    """sys.getrefcount of an object held by a deque only, seen from
    _pin_done's loop (measured, as it differs between Python versions)."""
    pins = collections.deque([object()])
    for old in itertools.islice(pins, 0, 1):
        return sys.getrefcount(old)


_ONLY_PINNED = _pinned_refcount()
_COMPLETERS = weakref.WeakSet()


@atexit.register
def _stop_all():
    for c in list(_COMPLETERS):
        c.stop()
