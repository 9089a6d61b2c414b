#!/usr/bin/env python3
"""The arrows point one way: a file of kolo's core includes headers of its own
layer and of the layers below it, never above (CONTRIBUTING: docs/contributing.md).

  include_layers.py [ROOT]      exit 1 naming each include that points up
  include_layers.py --self-test plants an upward include of each kind in a
                                scratch tree and fails unless each is found

Layers of src/, lowest first: a directory may include its own headers and any
lower directory's ("kolo/..." is the public API, open to all). A file directly
in src/ would be the top (there is none: the communicator is src/comm/). The public
headers (include/kolo) include only each other, and the fronts (kolo_torch,
kolo_data, the Python binding) only those.
"""
import pathlib
import re
import sys
import tempfile

LAYERS = [
    ("core",),                   # errors, settings, logging, dtypes
    ("kernels", "net"),          # reductions; sockets, wire codec, handshake, addresses
    ("rendezvous",),             # the store and discovery
    ("timeline",),               # the recorder the collectives record into
    ("transport",),              # shared memory, TCP, the GPU planes
    ("collectives",),            # the algorithms over the transports
    ("engine",),                 # ordered execution, async Work, the name table
    ("comm",),                   # the communicator: init, connect, split, Context, named operations
    ("reducer", "report"),       # the gradient reducer; the timeline's file, merge and report
]
TOP = len(LAYERS)  # src/*.cc
RANK = {d: i for i, group in enumerate(LAYERS) for d in group}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = ("*.h", "*.cc", "*.cu", "*.cuh")
FRONTS = ("kolo_torch", "kolo_data", "python/src")  # include/ only


def violations(root):
    root = pathlib.Path(root)
    out = []
    src = root / "src"
    for pattern in SOURCES:
        for f in sorted(src.rglob(pattern)):
            rel = f.relative_to(src)
            here = rel.parts[0] if len(rel.parts) > 1 else None
            if here is not None and here not in RANK:
                out.append(f"src/{rel}: directory src/{here} is in no layer (tests/layout/include_layers.py)")
                continue
            mine = TOP if here is None else RANK[here]
            text = f.read_text(errors="replace")
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                top = target.split("/")[0] if "/" in target else None
                if top is None or top == "kolo" or top == here:
                    continue
                if top not in RANK:
                    continue  # a library's header ("hwy/...")
                if RANK[top] >= mine:
                    line = text.count("\n", 0, m.start(1)) + 1
                    out.append(f"src/{rel}:{line}: includes \"{target}\": src/{top} is not below src/{here or '.'}")
    # The fronts stand on the public API, as a user's program does.
    for front in FRONTS:
        for pattern in SOURCES:
            for f in sorted((root / front).rglob(pattern)):
                text = f.read_text(errors="replace")
                for m in INCLUDE.finditer(text):
                    top = m.group(1).split("/")[0] if "/" in m.group(1) else None
                    if top in RANK:
                        line = text.count("\n", 0, m.start(1)) + 1
                        out.append(f"{f.relative_to(root)}:{line}: includes \"{m.group(1)}\", a private "
                                   "header of src/: a front sees include/ only")
    inc = root / "include" / "kolo"
    for f in sorted(inc.rglob("*.h")) if inc.is_dir() else []:
        text = f.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            if not m.group(1).startswith("kolo/"):
                line = text.count("\n", 0, m.start(1)) + 1
                out.append(f"{f.relative_to(root)}:{line}: a public header includes \"{m.group(1)}\", "
                           "which is not in include/kolo")
    return out


def self_test():
    with tempfile.TemporaryDirectory() as t:
        t = pathlib.Path(t)
        files = {
            "src/core/a.h": '#include "core/b.h"\n#include "kolo/kolo.h"\n',            # fine
            "src/collectives/c.cc": '#include "transport/x.h"\n#include "hwy/h.h"\n',  # fine
            "src/init.cc": '#include "comm/context.h"\n',                             # fine: the top
            "src/transport/d.h": '#include "collectives/backend.h"\n',                  # up
            "src/kernels/e.cc": '#include "net/socket.h"\n',                           # sideways
            "src/core/f.cc": '\n#include "engine/engine.h"\n',                          # up, line 2
            "src/newdir/g.cc": "\n",                                                    # unplaced
            "include/kolo/h.h": '#include "core/error.h"\n',                            # private
            "kolo_data/src/i.cc": '#include "kolo/kolo.h"\n#include "core/error.h"\n',  # private, line 2
        }
        for name, text in files.items():
            (t / name).parent.mkdir(parents=True, exist_ok=True)
            (t / name).write_text(text)
        found = violations(t)
        want = ["src/transport/d.h:1:", "src/kernels/e.cc:1:", "src/core/f.cc:2:", "src/newdir/g.cc:",
                "include/kolo/h.h:1:", "kolo_data/src/i.cc:2:"]
        missing = [w for w in want if not any(v.startswith(w) for v in found)]
        if missing or len(found) != len(want):
            print("self-test: expected", want, "found:", *found, sep="\n  ")
            return 1
        print(f"self-test: all {len(want)} planted upward includes found, nothing else")
        return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    found = violations(root)
    if found:
        print("includes that point up a layer (tests/layout/include_layers.py lists the layers):")
        print(*found, sep="\n")
        return 1
    print(f"every include of src/ points down ({', '.join('/'.join(g) for g in LAYERS)}, then src/*.cc); "
          "include/kolo includes only itself")
    return 0


if __name__ == "__main__":
    sys.exit(main())
