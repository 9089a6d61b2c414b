"""Why a Horovod name differs in kolo or is not provided, and what to use
instead; why an operation of torch's ProcessGroup is not provided by backend
"kolo". docs/tools/migration.py reads these: every row that is not "same" /
"provided" needs a reason here, and a reason for a row that no longer needs
one (or a name that no longer exists) fails the generator."""

# Horovod's default (its source text) -> kolo's defaults (repr) that mean the same:
# kolo's collectives take process_set=None as the global set (Horovod's
# global_process_set; kolo.tensorflow's default is that ProcessSet itself), and
# compression None or NoneCompressor as Horovod's Compression.none (which is
# that class in kolo too).
EQUIVALENT_DEFAULTS = {
    "global_process_set": ["None", "ProcessSet(process_set_id=0, ranks=[])"],
    "Compression.none": ["None", "<class 'kolo.compression.NoneCompressor'>"],
}

ORDER = ("named operations (`name=` on `horovod.torch`'s allreduce, allgather, broadcast, "
         "reducescatter and on `horovod.tensorflow`'s collectives) are negotiated as Horovod's "
         "are: ranks may issue them in any order, and a second in-flight operation of one name is "
         "a `ValueError`. Unnamed ones (and alltoall in `kolo.torch`) are matched by call order "
         "(as NCCL and DDP); a TF1 graph's collectives run in creation order, one at a time")

PROCESS_SET = ("a kolo process set is a list of global ranks; Horovod's `ranks_or_comm` also takes "
               "an mpi4py communicator, which kolo cannot use (no MPI inside kolo): pass "
               "`comm.Get_group()`'s ranks as a list")

INIT = ("`init(comm=...)` (an mpi4py communicator or a list of ranks) is refused: kolo has no MPI "
        "inside, and a job's ranks come from the launcher; `init(process_sets=...)` works as Horovod's")

NOT_API = "an internal helper of Horovod that its module happens to import; no program needs it"

HOROVOD_NOTES = {
    "horovod.torch": {
        "Adasum": "the name exists, but an Adasum reduction raises NotImplementedError: kolo has no "
                  "Adasum (by design); use Average",
        "ProcessSet": PROCESS_SET,
        "allgather_object": "kolo adds `process_set=` (gathers over a process set), after Horovod's "
                            "parameters: Horovod's calls work unchanged",
        "broadcast_optimizer_state": "`root_rank` defaults to 0 and `process_set=` is added; Horovod's "
                                     "`model=` (to find sparse parameters) is not accepted — kolo "
                                     "broadcasts every state tensor densely, so drop the argument",
        "broadcast_parameters": "`root_rank` defaults to 0 and `process_set=` is added after it: "
                                "Horovod's calls work unchanged",
        "check_extension": NOT_API,
        "init": INIT,
        "grouped_reducescatter": "`process_set` comes after `prescale_factor`/`postscale_factor` "
                                 "(Horovod: before them): pass it by keyword",
        "grouped_reducescatter_async": "`process_set` comes after `prescale_factor`/`postscale_factor` "
                                       "(Horovod: before them): pass it by keyword",
        "join": "kolo adds `process_set=` (Horovod's join covers all ranks only); a joined rank "
                "mirrors DistributedOptimizer steps only, not other collectives (it cannot know "
                "their shapes)",
        "reducescatter": "`process_set` comes after `prescale_factor`/`postscale_factor` "
                         "(Horovod: before them): pass it by keyword",
        "reducescatter_async": "`process_set` comes after `prescale_factor`/`postscale_factor` "
                               "(Horovod: before them): pass it by keyword",
    },
    "horovod.tensorflow": {
        "Adasum": "the name exists, but an Adasum reduction raises: kolo has no Adasum (by design); "
                  "use Average",
        "BroadcastGlobalVariablesHook": "a TF1 `SessionRunHook`; kolo supports TF 2.x eager and "
                                        "`tf.function` only: call `broadcast_variables` after the "
                                        "first step",
        "LocalGradientAggregationHelper": "an internal class of Horovod's for "
                                          "`backward_passes_per_step > 1`: kolo's Keras "
                                          "`DistributedOptimizer` accumulates itself (the "
                                          "`tf.compat.v1` optimizer: a clear error)",
        "ProcessSet": PROCESS_SET,
        "check_extension": NOT_API,
        "check_num_rank_power_of_2": NOT_API + " (Adasum's precondition)",
        "gpu_available": "kolo.tensorflow reduces CPU tensors only (GPU tensors are an error): "
                         "use `tf.config.list_physical_devices('GPU')`",
        "grouped_reducescatter": "kolo adds `name=` and `ignore_name_scope=` (as its reducescatter): "
                                 "Horovod's calls work unchanged",
        "init": INIT,
        "handle_average_backwards_compatibility": NOT_API + " (it maps the deprecated `average=`)",
        "is_homogeneous": "not provided: kolo's hierarchical collectives handle hosts with unequal "
                          "rank counts themselves; compare `local_size()` across ranks if needed",
        "process_set_included_op": "not provided: use `process_set.included()` in Python (a set's "
                                   "membership does not change while the job runs)",
        "refs_to_vars": NOT_API,
        "split_list": NOT_API,
        "vars_to_refs": NOT_API,
    },
    "horovod.tensorflow.keras": {
        "ProcessSet": PROCESS_SET,
        "allgather": "kolo.tensorflow.keras's collectives are kolo.tensorflow's: the first parameter is "
                     "`tensor` (Horovod's Keras: `value`), and they return a `tf.Tensor`; pass it "
                     "positionally",
        "allreduce": "kolo.tensorflow.keras's collectives are kolo.tensorflow's: the first parameter is "
                     "`tensor` (Horovod's Keras: `value`), the later ones in kolo.tensorflow's order, "
                     "and they return a `tf.Tensor`; pass arguments after the first by keyword",
        "broadcast": "kolo.tensorflow.keras's collectives are kolo.tensorflow's: the first parameter is "
                     "`tensor` (Horovod's Keras: `value`), and they return a `tf.Tensor`; pass it "
                     "positionally",
        "init": INIT,
        "is_version_greater_equal_than": NOT_API,
        "load_model": "not provided: Keras 3 saves the wrapped optimizer's class; load with "
                      "`keras.models.load_model` and wrap its optimizer in "
                      "`hvd.DistributedOptimizer` again",
        "reducescatter": "kolo.tensorflow.keras's collectives are kolo.tensorflow's: the first parameter "
                         "is `tensor` (Horovod's Keras: `value`), the later ones in kolo.tensorflow's "
                         "order; pass arguments after the first by keyword",
    },
}

# An operation kolo's group defines but refuses starts with "refused:".
P2P = ("refused: kolo has collectives only; the call raises an error naming the operation "
       "(`batch_isend_irecv` too). Express the exchange as a collective (`all_to_all_single` "
       "with splits, `broadcast`, `all_gather`)")

TORCH_NOTES = {
    "_end_coalescing": "torch's `_coalescing_manager` calls it only for operations it does not batch "
                       "itself (point-to-point ones, which kolo refuses); its batched all_reduce, "
                       "all_gather_into_tensor and reduce_scatter_tensor go to kolo's `*_coalesced` "
                       "operations",
    "reconfigure": "torch 2.15's in-place change of a group's members; a kolo communicator never "
                   "changes its members: destroy the group and create a new one, or run an elastic "
                   "job ([Elastic jobs](../elastic.md))",
    "send": P2P,
    "recv": P2P,
    "recv_anysource": P2P,
}
