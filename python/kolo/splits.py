"""The split sizes of an uneven alltoall, checked in this one place for every
Python front: kolo.torch's and kolo.tensorflow's alltoall(splits=) (Horovod's
API) and the "kolo" torch.distributed backend's split sizes. kolo's
alltoallv then moves the rows (kolo.h); the ranks' counts are checked
against each other there, inside the collective."""
import numbers

from kolo.basics import error


def split_rows(what, rows, splits, n, name="splits"):
    """The rows each of n ranks gets from a tensor of `rows` rows: `splits` as
    a list of n ints, or equal parts when splits is None.

    splits: a sequence, or anything with tolist() (a torch tensor, a NumPy
    array). name: the argument as errors call it ("input_split_sizes")."""
    if splits is None:
        if rows % n:
            raise ValueError(error(what, f"the first dimension ({rows}) is not divisible by the "
                                   f"{n} ranks; pass {name}"))
        return [rows // n] * n
    s = splits.tolist() if hasattr(splits, "tolist") else list(splits)
    # Counts are integers (Horovod: int32): a float tensor is refused whatever
    # it holds, even values that happen to be whole (torch.empty's garbage).
    if not isinstance(s, list) or not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in s):
        kind = f"a {splits.dtype} tensor" if hasattr(splits, "dtype") else f"{s}"
        raise ValueError(error(what, f"{name} must be integer counts, got {kind}"))
    if len(s) != n or any(x < 0 for x in s):
        raise ValueError(error(what, f"{name} must hold {n} non-negative counts, got {s}"))
    if sum(s) != rows:
        raise ValueError(error(what, f"{name} {s} sum to {sum(s)}, but the first dimension is {rows}"))
    return [int(x) for x in s]
