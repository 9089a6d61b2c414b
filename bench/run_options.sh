# The options the emulated-host benchmarks share (sourced, not run):
#   SCRIPT [--quick] [--no-write] [-h|--help] [BUILD_DIR]
# bench_options "$0" "$@" sets QUICK (0/1), WRITE (0/1) and BUILD (the build dir's absolute
# path: the argument, else $KOLO_BUILD, else build/), or exits 2 naming the bad option or
# directory. --help prints the script's header comment (from line 2 to `set -uo`).
bench_options() {
  local script=$1 name
  name=$(basename "$script")
  shift
  QUICK=0 WRITE=1
  while [[ ${1:-} == -* ]]; do
    case $1 in
      --quick) QUICK=1 ;;
      --no-write) WRITE=0 ;;
      -h|--help) sed -n '2,/^set -uo/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) echo "$name: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
  done
  local dir=${1:-${KOLO_BUILD:-$ROOT/build}}
  BUILD=$(cd "$dir" 2>/dev/null && pwd) || { echo "$name: no build dir '$dir'" >&2; exit 2; }
}

# snapshot_build BUILD: copies what a Horovod comparison runs of kolo (kolorun, and the Python
# package with its sources dereferenced) into a fresh /tmp directory and prints its path. A
# run takes hours: a rebuild or an edit in the tree meanwhile must not change (or, relinking
# kolorun, break) what is measured. The caller removes the directory.
snapshot_build() {
  local build=$1 snap
  snap=$(mktemp -d /tmp/kolo-bench-build.XXXXXX) || return 1
  mkdir -p "$snap/tools/kolorun" &&
    cp "$build/tools/kolorun/kolorun" "$snap/tools/kolorun/" &&
    cp -rL "$build/python" "$snap/python" &&
    find "$snap/python" -name __pycache__ -prune -exec rm -rf {} + || { rm -rf "$snap"; return 1; }
  echo "$snap"
}
