#!/usr/bin/env bash
# Builds the documentation site: build/docs/html/index.html (or $KOLO_BUILD_DIR/docs/html).
#   scripts/docs.sh            install what is needed, build, fail on any warning
# Sphinx with MyST Markdown (the pages are docs/*.md, the README's links point at them),
# the furo theme, autodoc for the Python API (the package imported from the build tree,
# so kolo._C is built first) and Doxygen + Breathe for the C++ header; all from Debian 12
# (scripts/install-deps.sh docs). Warnings are errors: a broken link between pages, a
# missing reference or a docstring Sphinx cannot read fails the build. Before Sphinx,
# the generated pages are checked against what their generators write today (the
# tunables from src/core/config.h; the Horovod and torch.distributed tables from
# kolo's modules, introspected under each framework's Python): a stale one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh docs
BUILD=${KOLO_BUILD_DIR:-build}
# kolo._C for autodoc and the migration tables' introspection. An existing build
# directory keeps its configuration (the tests' build, under ctest); a new one is
# configured without tests, whose packages (GoogleTest, ...) the docs do not need.
if [ -f "$BUILD/CMakeCache.txt" ]; then
  KOLO_BUILD_TARGETS=kolo_python scripts/build.sh
else
  KOLO_BUILD_TARGETS=kolo_python scripts/build.sh -DKOLO_BUILD_TESTS=OFF
fi
mkdir -p "$BUILD/docs"
OUT=$(cd "$BUILD/docs" && pwd)  # absolute: KOLO_BUILD_DIR may be either
export KOLO_DOCS_PYTHONPATH=$(cd "$BUILD/python" && pwd)

# The generated pages: --check fails when a committed page differs from what its
# generator writes now (run it with --write after changing a tunable or an API).
TORCH2_PYTHON=${KOLO_TORCH2_PYTHON:-$(scripts/install-torch.sh)}
TF_PYTHON=${KOLO_TF_PYTHON:-$(scripts/install-tensorflow.sh)}
/usr/bin/python3 docs/tools/tunables.py --check
/usr/bin/python3 docs/tools/migration.py --check --build-python "$KOLO_DOCS_PYTHONPATH" \
  --torch-python /usr/bin/python3 --torch2-python "$TORCH2_PYTHON" --tf-python "$TF_PYTHON"

# Doxygen's XML of the public header, for Breathe.
rm -rf "$OUT/doxygen"
mkdir -p "$OUT/doxygen"
(cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $OUT/doxygen"; echo "INPUT = $PWD/include/kolo/kolo.h") |
  doxygen - >/dev/null
export KOLO_DOCS_DOXYGEN_XML=$OUT/doxygen/xml

# -W: warnings are errors; --keep-going: report all of them, not only the first.
# -E: no cached environment, so a warning is never hidden by an earlier run.
/usr/bin/python3 -m sphinx -W --keep-going -E -q -b html -d "$OUT/doctrees" docs "$OUT/html"
echo "docs: $OUT/html/index.html"
