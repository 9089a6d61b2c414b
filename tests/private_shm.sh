# Sourced first by the tests that check that no kolo segment at all is left
# in /dev/shm (their jobs' names come from each launcher, so they cannot look
# for their own): where a mount namespace can be made (root), the script runs
# again in one of its own with an empty /dev/shm, so the check sees this
# test's jobs only and the test runs beside others (ctest -j). Elsewhere it
# runs as it is, and CMake marks it RUN_SERIAL (kolo_checks_all_of_dev_shm in
# the top CMakeLists.txt, which makes the same probe).
#   source "$(dirname "$0")/../private_shm.sh" "$@"
# The namespace's /dev is made private inside it (not its root: in a chroot,
# such as tools/fresh-debian.sh's, the root is no mount point and
# `unshare --propagation private` fails), so the tmpfs never reaches the host.
if [ -z "${KOLO_TEST_PRIVATE_SHM:-}" ] &&
  unshare --mount --propagation unchanged mount --make-rprivate /dev 2>/dev/null; then
  export KOLO_TEST_PRIVATE_SHM=1
  # shellcheck disable=SC2016  # expanded by the inner bash
  exec unshare --mount --propagation unchanged \
    bash -c 'mount --make-rprivate /dev && mount -t tmpfs -o mode=1777 kolo-test-shm /dev/shm && exec "$0" "$@"' "$0" "$@"
fi
