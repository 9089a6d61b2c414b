# Sourced by scripts/install-torch.sh and install-tensorflow.sh: a virtual environment of
# Debian's Python filled from PyPI once per machine (pip's cache serves later installs).
#   pypi_venv NAME VENV CHECK PACKAGE...
# Does nothing when VENV holds its marker; else makes VENV anew, pip-installs the packages,
# runs the Python snippet CHECK in it (it fails the install when the wrong version came) and
# writes the marker last, so that a half-finished environment (a killed pip) is made anew.
pypi_venv() {
  local name=$1 venv=$2 check=$3
  shift 3
  [ -f "$venv/.kolo-installed" ] && return 0
  echo "$name: $* from PyPI into $venv (once per machine)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
  # pip's progress bars would fill CI's log: quiet, but errors still show.
  "$venv/bin/pip" install -q --disable-pip-version-check "$@" >&2
  "$venv/bin/python" -c "$check"
  touch "$venv/.kolo-installed"
}
