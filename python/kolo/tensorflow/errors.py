"""kolo's errors as TensorFlow's error classes, as Horovod raises them.

    a collective kolo refused or lost   kolo.KoloError      -> tf.errors.FailedPreconditionError
      (ranks that disagree, a dead peer, a timeout)
    a bad argument found while running  ValueError          -> tf.errors.InvalidArgumentError
      (splits that do not fit, a name already in flight)

Eagerly the collective raises the TF class itself (a subclass of both, so
``except hvd.KoloError`` and ``except ValueError`` keep working). In a graph
the collective runs in a tf.numpy_function, and TF reports a Python error
from one as InvalidArgument (ValueError, TypeError), OutOfRange,
ResourceExhausted, Unimplemented or else Unknown — never FailedPrecondition.
So there the callback catches kolo's error, hands it to a one-line table
and returns its number beside the (placeholder) results, and a "KoloStatus"
op after it fails with TF's FAILED_PRECONDITION and kolo's text when the
number is not 0; the results are read through that op, so nothing uses them
first. KoloStatus is registered when a graph first needs it (not at import:
importing kolo.tensorflow touches nothing of TF's C library, so Sphinx's
mocked TF imports it too) through TensorFlow's stable C kernel API
(tensorflow/c/kernels.h, tensorflow/c/ops.h; ctypes, nothing compiled):
where that fails (a TF without it), graph errors stay TF's UnknownError
carrying kolo's text, and available() says so.
"""
import ctypes
import itertools
import os
import threading

import tensorflow as tf

from kolo import _C

FAILED_PRECONDITION = 9  # TF_Code (tensorflow/c/tf_status.h), as Horovod's PRECONDITION_ERROR


class InvalidArgumentError(tf.errors.InvalidArgumentError, ValueError):
    """A bad argument found while the collective runs: TF's error class, as
    Horovod raises, and a ValueError."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class FailedPreconditionError(tf.errors.FailedPreconditionError, _C.Error):
    """A collective kolo refused or lost: TF's error class, as Horovod raises,
    and kolo's (kolo.KoloError)."""

    def __init__(self, message):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)


def eager(fn, arrays):
    """fn(*arrays), kolo's errors raised as TF's classes."""
    try:
        return fn(*arrays)
    except _C.Error as e:
        raise FailedPreconditionError(str(e)) from None
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from None


# ---- the KoloStatus op ---------------------------------------------------------------
_held = {}  # number -> (TF_Code, text): errors caught in a callback, until their KoloStatus runs
_lock = threading.Lock()
_numbers = itertools.count(1)


def hold(code, text):
    """The number under which KoloStatus will raise (code, text)."""
    with _lock:
        n = (next(_numbers) - 1) % (2**31 - 1) + 1  # an int32, never 0
        _held[n] = (code, text)
    return n


_P = ctypes.c_void_p
_CREATE = ctypes.CFUNCTYPE(_P, _P)
_COMPUTE = ctypes.CFUNCTYPE(None, _P, _P)
_DELETE = ctypes.CFUNCTYPE(None, _P)


def _load():
    lib = ctypes.CDLL(os.path.join(tf.sysconfig.get_lib(), "libtensorflow_framework.so.2"))
    for name, args, res in (
            ("TF_NewStatus", [], _P), ("TF_DeleteStatus", [_P], None),
            ("TF_SetStatus", [_P, ctypes.c_int, ctypes.c_char_p], None),
            ("TF_GetCode", [_P], ctypes.c_int), ("TF_Message", [_P], ctypes.c_char_p),
            ("TF_NewOpDefinitionBuilder", [ctypes.c_char_p], _P),
            ("TF_OpDefinitionBuilderAddInput", [_P, ctypes.c_char_p], None),
            ("TF_OpDefinitionBuilderSetIsStateful", [_P, ctypes.c_bool], None),
            ("TF_RegisterOpDefinition", [_P, _P], None),
            ("TF_NewKernelBuilder", [ctypes.c_char_p, ctypes.c_char_p, _CREATE, _COMPUTE, _DELETE], _P),
            ("TF_RegisterKernelBuilder", [ctypes.c_char_p, _P, _P], None),
            ("TF_GetInput", [_P, ctypes.c_int, ctypes.POINTER(_P), _P], None),
            ("TF_TensorData", [_P], _P), ("TF_DeleteTensor", [_P], None),
            ("TF_OpKernelContext_Failure", [_P, _P], None)):
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib


def _compute(lib):
    def compute(_kernel, ctx):
        status = lib.TF_NewStatus()
        try:
            t = _P()
            lib.TF_GetInput(ctx, 0, ctypes.byref(t), status)
            if lib.TF_GetCode(status) == 0:
                n = ctypes.cast(lib.TF_TensorData(t), ctypes.POINTER(ctypes.c_int32))[0]
                lib.TF_DeleteTensor(t)
                if n == 0:
                    return
                with _lock:
                    code, text = _held.pop(n, (FAILED_PRECONDITION, f"kolo: error {n} was reported twice"))
                lib.TF_SetStatus(status, code, text.encode("utf-8", "replace"))
            lib.TF_OpKernelContext_Failure(ctx, status)
        finally:
            lib.TF_DeleteStatus(status)
    return compute


def _register():
    """Registers KoloStatus (op and CPU kernel); returns what must stay alive, or None."""
    try:
        lib = _load()
        callbacks = (_CREATE(lambda _construction: None), _COMPUTE(_compute(lib)),
                     _DELETE(lambda _kernel: None))
        status = lib.TF_NewStatus()
        try:
            op = lib.TF_NewOpDefinitionBuilder(b"KoloStatus")
            lib.TF_OpDefinitionBuilderAddInput(op, b"error: int32")
            lib.TF_OpDefinitionBuilderSetIsStateful(op, True)
            lib.TF_RegisterOpDefinition(op, status)
            if lib.TF_GetCode(status) != 0:
                return None
            kernel = lib.TF_NewKernelBuilder(b"KoloStatus", b"CPU", *callbacks)
            lib.TF_RegisterKernelBuilder(b"KoloStatus", kernel, status)
            if lib.TF_GetCode(status) != 0:
                return None
        finally:
            lib.TF_DeleteStatus(status)
        return lib, callbacks
    except (OSError, AttributeError):
        return None


_registered = None  # (lib, callbacks) once registered: they must stay alive
_register_tried = False


def available():
    """Whether KoloStatus is registered (registers it on the first call)."""
    global _registered, _register_tried
    with _lock:
        if not _register_tried:
            _registered, _register_tried = _register(), True
        return _registered is not None


def status_op(error):
    """A KoloStatus op on the int32 scalar `error` (0: fine) in the current graph."""
    return tf.compat.v1.get_default_graph().create_op("KoloStatus", [error], [], name="kolo_status")
