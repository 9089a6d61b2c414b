"""The engine's names of named operations, the same for every front.

An operation's name is its kind and the caller's name, as Horovod's are
(allreduce 'x' and allgather 'x' are two names); "" leaves it unnamed
(matched by call order; kolo.h)."""


def operation_key(kind, name):
    return f"{kind}.{name}" if name is not None and name != "" else ""
