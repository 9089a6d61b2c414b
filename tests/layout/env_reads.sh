#!/bin/bash
# No environment read outside the settings modules: kolo's C++ reads variables
# through src/core/config.{h,cc} alone, its Python through python/kolo/settings.py
# alone, so every setting and launcher variable kolo looks at is named in one
# place per language (docs/tunables.md is generated from config.h).
#   env_reads.sh [ROOT]     exit 1 naming each read found elsewhere under ROOT
#   env_reads.sh --self-test  plants one read of each kind in a scratch tree and
#                           fails unless every one is found (the check can fail)
set -uo pipefail

reads() {  # ROOT -> file:line: text of each read outside the settings modules
  local root=$1
  (cd "$root" &&
   grep -rnE --include='*.cc' --include='*.h' --include='*.cu' --include='*.cuh' --include='*.cpp' \
     '\b(secure_)?getenv[[:space:]]*\(|\benviron\b' src tools kolo_torch kolo_data include python/src 2>/dev/null |
     grep -v '^src/core/config\.cc:'
   grep -rnE --include='*.py' \
     '\bos\.environ\b|\bos\.getenv\b|\bfrom[[:space:]]+os[[:space:]]+import\b.*\b(environ|getenv)\b' python/kolo 2>/dev/null |
     grep -v '^python/kolo/settings\.py:')
}

if [ "${1:-}" = --self-test ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/src/core" "$tmp/tools/x" "$tmp/python/kolo/torch"
  printf 'const char* v = std::getenv("A");\n' > "$tmp/src/core/config.cc"     # allowed
  printf 'os.environ.get("A")\n' > "$tmp/python/kolo/settings.py"               # allowed
  printf 'int f() { return ::getenv("KOLO_X") != nullptr; }\n' > "$tmp/tools/x/a.cc"
  printf 'extern char** environ;\n' > "$tmp/src/core/b.h"
  printf 'import os\nx = os.environ["KOLO_X"]\n' > "$tmp/python/kolo/torch/c.py"
  printf 'from os import getenv\n' > "$tmp/python/kolo/d.py"
  found=$(reads "$tmp")
  want=(tools/x/a.cc:1: src/core/b.h:1: python/kolo/torch/c.py:2: python/kolo/d.py:1:)
  for w in "${want[@]}"; do
    grep -q "^$w" <<<"$found" || { echo "self-test: the read in ${w%%:*} was not found; found:"; echo "$found"; exit 1; }
  done
  [ "$(wc -l <<<"$found")" -eq ${#want[@]} ] || { echo "self-test: a read in a settings module was reported:"; echo "$found"; exit 1; }
  echo "self-test: all ${#want[@]} planted reads found, none in the settings modules"
  exit 0
fi

root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
found=$(reads "$root")
if [ -n "$found" ]; then
  echo "environment read outside the settings modules (src/core/config.h, python/kolo/settings.py):"
  echo "$found"
  exit 1
fi
echo "no environment read outside src/core/config.cc and python/kolo/settings.py"
