"""What ranks exchange before a collective whose output size depends on
every rank's input (allgather, alltoall): each rank's dtype, rank and
dimensions as a row of int64, one allgather of them, and the check — on
every rank, since each sees the whole table — that dtypes and the shapes
beyond the first dimension agree. Framework-neutral: the layers pass their
dtype's index and name."""
from kolo import _C
from kolo.basics import error

MAX_DIMS = 8  # dims beyond are folded into the last, so every row has one length


def describe(dtype_index, shape, extra=()):
    """[dtype index, ndim, dims (padded to MAX_DIMS)] + extra."""
    dims = [int(d) for d in shape]
    ndim = len(dims)
    if ndim > MAX_DIMS:
        tail = 1
        for d in dims[MAX_DIMS - 1:]:
            tail *= d
        dims = dims[:MAX_DIMS - 1] + [tail]
    dims += [0] * (MAX_DIMS - len(dims))
    return [dtype_index, ndim] + dims + [int(x) for x in extra]


def shape_of(row):
    return tuple(row[2:2 + min(row[1], MAX_DIMS)])


def extra_of(row):
    return row[2 + MAX_DIMS:]


def check_rows(what, rows, dtype_name):
    """Raises kolo.Error (the same on every rank) when the rows disagree on the
    dtype or the shape beyond dim 0; dtype_name(index) names a dtype."""
    for r, row in enumerate(rows):
        if row[0] != rows[0][0]:
            raise _C.Error(error(what, f"ranks disagree on the dtype: rank 0 has "
                                 f"{dtype_name(rows[0][0])}, rank {r} has {dtype_name(row[0])}"))
        if row[1] != rows[0][1] or row[3:2 + MAX_DIMS] != rows[0][3:2 + MAX_DIMS]:
            raise _C.Error(error(what, "ranks disagree on the shape beyond the first dimension: "
                                 f"rank 0 has {shape_of(rows[0])}, rank {r} has {shape_of(row)}"))
    return rows
