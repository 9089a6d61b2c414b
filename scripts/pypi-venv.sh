# How kolo's scripts make a virtual environment of Debian's Python. Sourced by
# scripts/install-torch.sh, install-tensorflow.sh and wheel.sh (PyPI's environments, once
# per machine: pypi_venv), tests/python/wheel_in_both_torches.sh (throwaway ones for the
# wheel) and bench/horovod/build.sh (Horovod's, which it marks itself once built). The
# install tests that run a user's own commands (readme_install.sh, wheel_in_bare_root.sh)
# keep them as the user types them.
#   make_venv [--system-site-packages] VENV PIP_ARGS...
# Makes VENV and pip-installs PIP_ARGS into it; --system-site-packages: it also sees
# Debian's dist-packages (torch 1.13). Writes nothing on stdout (its callers print a path
# there) and returns non-zero at a failed step, also where the caller has no set -e.
make_venv() {
  local opts=()
  if [ "$1" = --system-site-packages ]; then
    opts+=("$1")
    shift
  fi
  local venv=$1
  shift
  /usr/bin/python3 -m venv "${opts[@]}" "$venv" >&2 || return
  # pip's progress bars would fill CI's log: quiet, but errors still show.
  "$venv/bin/pip" install -q --disable-pip-version-check "$@" >&2 || return
}

#   pypi_venv NAME VENV CHECK PACKAGE...
# Does nothing when VENV holds its marker; else makes VENV anew, pip-installs the packages,
# runs the Python snippet CHECK in it (it fails the install when the wrong version came) and
# writes the marker last, so that a half-finished environment (a killed pip) is made anew.
# pip's cache serves later installs.
pypi_venv() {
  local name=$1 venv=$2 check=$3
  shift 3
  [ -f "$venv/.kolo-installed" ] && return 0
  echo "$name: $* from PyPI into $venv (once per machine)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  make_venv "$venv" "$@" || return
  "$venv/bin/python" -c "$check" || return
  touch "$venv/.kolo-installed"
}
