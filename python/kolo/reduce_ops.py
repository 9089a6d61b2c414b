"""Horovod's reduction ops (hvd.Average, hvd.Sum, ...) as kolo's op codes,
shared by every framework layer (kolo.torch, kolo.tensorflow)."""
from kolo import _C
from kolo.basics import error


class ReduceOp(int):
    """Horovod's reduction ops (hvd.Average, hvd.Sum, ...), kolo's op codes."""
    _names = {}

    def __new__(cls, code, name):
        o = super().__new__(cls, code)
        cls._names[code] = name
        return o

    def __repr__(self):
        return self._names[int(self)]

    __str__ = __repr__


Sum = ReduceOp(_C.SUM, "Sum")
Average = ReduceOp(_C.AVERAGE, "Average")
Min = ReduceOp(_C.MIN, "Min")
Max = ReduceOp(_C.MAX, "Max")
Product = ReduceOp(_C.PRODUCT, "Product")
Adasum = ReduceOp(-1, "Adasum")  # no kolo counterpart: passing it is an error


def op_code(what, op):
    if op is Adasum:  # by design (README): NotImplementedError, a RuntimeError as Horovod's
        raise NotImplementedError(error(what, "op Adasum is not supported by kolo; "
                                        "use Average, Sum, Min, Max or Product"))
    try:
        code = int(op)
    except (TypeError, ValueError):
        code = -1
    if code < 0 or code not in ReduceOp._names:
        raise ValueError(error(what, f"op {op!r} is not supported (Average, Sum, Min, Max, Product)"))
    return code


def resolve_op(what, average, op, default=Average):
    """Horovod's deprecated ``average`` flag and ``op`` (None means the default)."""
    if average is not None:
        if op is not None:
            raise ValueError(error(what, "pass either average= (deprecated) or op=, not both"))
        return Average if average else Sum
    return default if op is None else op
