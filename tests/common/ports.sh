# Sourced by the shell tests that pick a port before anything binds it (a
# store's, MASTER_PORT): test_port prints one below Linux's ephemeral range
# (32768-60999). Outgoing connections take their ports from that range — other
# tests' beside this one, ssh's, Open MPI's daemons' on an emulated host — and
# one may hold a port picked inside it: "Address already in use" (seen for the
# Slurm store port on 2026-11-29, for mpirun's KOLO_STORE_ADDR on 2026-12-07).
test_port() { echo $((20000 + RANDOM % 12768)); }
