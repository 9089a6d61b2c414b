#!/usr/bin/env python3
"""Writes the migration tables: docs/migration/horovod.md (every public name of
horovod.torch, horovod.tensorflow and horovod.tensorflow.keras, with kolo's
status) and docs/migration/torch-distributed.md (every operation of torch's
ProcessGroup, with what backend "kolo" does).

Horovod's side comes from Horovod's sources, never from memory: `extract`
reads a Horovod checkout or bare git directory with Python's ast (the names
each module's __init__.py binds, and the parameters of the function or class
each name comes from) into docs/migration/horovod-api.json, with the commit
it read. kolo's side is introspected at generation time: kolo's modules are
imported (under a Python that has each framework) and their signatures read.
Why a name differs or is not provided is written once, in
docs/tools/migration_notes.py; a row that needs a reason and has none, or a
reason for a row that no longer needs one, fails the generator.

  migration.py extract HOROVOD_GIT_DIR            refresh horovod-api.json
  migration.py --write|--check --build-python DIR --torch-python PY \
               --torch2-python PY --tf-python PY
  (--check: fail when a committed page differs from what would be written;
   scripts/docs.sh runs it)
"""
import argparse
import ast
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
API_JSON = ROOT / "docs/migration/horovod-api.json"
HOROVOD_PAGE = ROOT / "docs/migration/horovod.md"
TORCH_PAGE = ROOT / "docs/migration/torch-distributed.md"
MODULES = {  # Horovod's module -> (its __init__.py, kolo's module, the framework needed)
    "horovod.torch": ("horovod/torch/__init__.py", "kolo.torch", "torch"),
    "horovod.tensorflow": ("horovod/tensorflow/__init__.py", "kolo.tensorflow", "tf"),
    "horovod.tensorflow.keras": ("horovod/tensorflow/keras/__init__.py", "kolo.tensorflow.keras", "tf"),
}

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from migration_notes import EQUIVALENT_DEFAULTS, HOROVOD_NOTES, ORDER, TORCH_NOTES  # noqa: E402


# --- Horovod's sources ------------------------------------------------------

def git_show(git_dir, path):
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout


def module_path(module):
    return module.replace(".", "/") + ".py"


def params_of(node):
    """[[name, default source or None, kind]] of a def (a class: its __init__, self left out)."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            return []
        return params_of(init)[1:]
    a = node.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(positional, defaults):
        out.append([arg.arg, None if d is None else ast.unparse(d), "positional"])
    if a.vararg:
        out.append(["*" + a.vararg.arg, None, "var"])
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append([arg.arg, None if d is None else ast.unparse(d), "keyword"])
    if a.kwarg:
        out.append(["**" + a.kwarg.arg, None, "var"])
    return out


def top_level(tree):
    """Statements at a module's top level, including those inside if/try blocks."""
    todo = list(tree.body)
    while todo:
        s = todo.pop(0)
        if isinstance(s, (ast.If, ast.Try)):
            todo[:0] = s.body + s.orelse + getattr(s, "finalbody", []) + \
                [x for h in getattr(s, "handlers", []) for x in h.body]
        else:
            yield s


def resolve(git_dir, module, name, depth=0):
    """(kind, params, defined_in) of `name` as bound in Horovod's `module`."""
    try:
        tree = ast.parse(git_show(git_dir, module_path(module)))
    except subprocess.CalledProcessError:
        try:  # a package
            tree = ast.parse(git_show(git_dir, module.replace(".", "/") + "/__init__.py"))
        except subprocess.CalledProcessError:
            return "unknown", None, module
    found = None
    for s in top_level(tree):
        if isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name == name:
            found = ("class" if isinstance(s, ast.ClassDef) else "function", params_of(s), module)
        elif isinstance(s, ast.ImportFrom) and s.module and s.module.startswith("horovod") and depth < 6:
            for al in s.names:
                if (al.asname or al.name) == name:
                    found = resolve(git_dir, s.module, al.name, depth + 1)
        elif isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets):
            found = ("assigned", None, module)
    return found or ("unknown", None, module)


def extract(git_dir):
    commit = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    date = subprocess.run(["git", "--git-dir", git_dir, "log", "-1", "--format=%cs"], check=True,
                          capture_output=True, text=True).stdout.strip()
    api = {"source": "https://github.com/horovod/horovod", "commit": commit, "date": date,
           "extracted_by": "docs/tools/migration.py extract", "modules": {}}
    for hmod, (path, _, _) in MODULES.items():
        tree = ast.parse(git_show(git_dir, path))
        names = {}
        for s in top_level(tree):
            if isinstance(s, ast.ImportFrom) and s.module and s.module.startswith("horovod"):
                for al in s.names:
                    n = al.asname or al.name
                    if n.startswith("_"):
                        continue
                    sub = f"{s.module}.{al.name}"
                    if git_exists(git_dir, module_path(sub)) or git_exists(git_dir, sub.replace(".", "/") + "/__init__.py"):
                        names[n] = {"kind": "module", "params": None, "defined_in": sub}
                    else:
                        kind, params, where = resolve(git_dir, s.module, al.name)
                        names[n] = {"kind": kind, "params": params, "defined_in": where}
            elif isinstance(s, (ast.FunctionDef, ast.ClassDef)) and not s.name.startswith("_"):
                names[s.name] = {"kind": "class" if isinstance(s, ast.ClassDef) else "function",
                                 "params": params_of(s), "defined_in": hmod}
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    if isinstance(t, ast.Name) and not t.id.startswith("_") and t.id not in names:
                        names[t.id] = {"kind": "assigned", "params": None, "defined_in": hmod}
        api["modules"][hmod] = dict(sorted(names.items()))
    API_JSON.write_text(json.dumps(api, indent=1) + "\n")
    print(f"migration.py: {sum(len(m) for m in api['modules'].values())} names of Horovod {commit[:10]} "
          f"into {API_JSON.relative_to(ROOT)}")


def git_exists(git_dir, path):
    return subprocess.run(["git", "--git-dir", git_dir, "cat-file", "-e", f"HEAD:{path}"],
                          capture_output=True).returncode == 0


# --- kolo's side: run under each framework's Python ---------------------------

INTROSPECT = r'''
import importlib, inspect, json, sys
module, names = sys.argv[1], json.loads(sys.stdin.read())
m = importlib.import_module(module)
out = {}
for n in names:
    if not hasattr(m, n):
        out[n] = None
        continue
    o = getattr(m, n)
    kind = ("module" if inspect.ismodule(o) else "class" if inspect.isclass(o)
            else "function" if callable(o) else "constant")
    params = None
    if kind in ("function", "class"):
        try:
            sig = inspect.signature(o)
            params = []
            for p in sig.parameters.values():
                if p.kind == p.VAR_POSITIONAL:
                    params.append(["*" + p.name, None, "var"])
                elif p.kind == p.VAR_KEYWORD:
                    params.append(["**" + p.name, None, "var"])
                else:
                    d = None if p.default is p.empty else p.default
                    dtext = None if p.default is p.empty else repr(d)
                    dname = getattr(d, "__name__", None) or getattr(type(d), "__name__", None)
                    params.append([p.name, dtext, "keyword" if p.kind == p.KEYWORD_ONLY else "positional", dname])
        except (TypeError, ValueError):
            params = None
    out[n] = {"kind": kind, "params": params}
print(json.dumps(out))
'''

TORCH_OPS = r'''
import inspect, json, sys
import torch, torch.distributed as dist
import kolo.torch
from kolo.torch.process_group import ProcessGroupKolo
base = dist.ProcessGroup
ops = {}
for n in sorted(dir(base)):
    if n.startswith("__"):
        continue
    doc = getattr(getattr(base, n), "__doc__", "") or ""
    if not any(w in doc for w in ("-> c10d::Work", "-> torch._C._distributed_c10d.Work")):
        continue  # not an operation (queries, hooks, set-up)
    own = any(n in vars(c) for c in ProcessGroupKolo.__mro__ if c is not base and issubclass(c, base))
    ops[n] = own
print(json.dumps({"torch": torch.__version__.split("+")[0], "ops": ops}))
'''


def run_python(python, code, args, stdin, build_python):
    env = dict(os.environ, PYTHONPATH=str(build_python))
    r = subprocess.run([python, "-c", code] + args, input=stdin, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"migration.py: {python} could not introspect {args}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --- comparing ------------------------------------------------------------------

def same_default(hdefault, kparam):
    """Horovod's default (source text) against kolo's (repr, and the name of its object)."""
    krepr, kname = kparam[1], (kparam[3] if len(kparam) > 3 else None)
    if hdefault is None or krepr is None:
        return hdefault is None and krepr is None
    if krepr in EQUIVALENT_DEFAULTS.get(hdefault, ()):
        return True
    try:
        return ast.literal_eval(hdefault) == ast.literal_eval(krepr)
    except (ValueError, SyntaxError):
        pass
    last = hdefault.split(".")[-1]
    return last == kname or last in krepr


def compare(hinfo, kinfo):
    """(status, automatic detail) of one name."""
    if kinfo is None:
        return "not provided", ""
    hp, kp = hinfo["params"], kinfo["params"]
    if hinfo["kind"] not in ("function", "class") or hp is None or kp is None:
        return "same", ""
    hnames = [p[0] for p in hp]
    knames = [p[0] for p in kp]
    detail = []
    missing = [n for n in hnames if n not in knames and not n.startswith("*")]
    if missing and "**kwargs" not in knames:
        detail.append("kolo lacks " + ", ".join(f"`{n}`" for n in missing))
    extra = [n for n in knames if n not in hnames and not n.startswith("*")]
    if extra and not any(n.startswith("**") for n in hnames):  # Horovod's **kwargs takes them
        detail.append("kolo adds " + ", ".join(f"`{n}`" for n in extra))
    common = [n for n in hnames if n in knames and not n.startswith("*")]
    if [n for n in knames if n in common] != common:
        detail.append("parameters in another order")
    kby = {p[0]: p for p in kp}
    for p in hp:
        if p[0] in kby and not p[0].startswith("*") and not same_default(p[1], kby[p[0]]):
            def shown(d):
                return "none (required)" if d is None else f"`{d}`"
            detail.append(f"default of `{p[0]}`: Horovod {shown(p[1])}, kolo {shown(kby[p[0]][1])}")
    return ("differs", "; ".join(detail)) if detail else ("same", "")


def signature_text(params):
    if params is None:
        return ""
    return "(" + ", ".join(p[0] if p[1] is None else f"{p[0]}={p[1]}" for p in params) + ")"


def horovod_page(api, kolo_side):
    problems = []
    lines = [
        "# Coming from Horovod",
        "",
        "Every public name that Horovod's `horovod.torch`, `horovod.tensorflow` and",
        "`horovod.tensorflow.keras` bind, with what `kolo.torch`, `kolo.tensorflow` and",
        "`kolo.tensorflow.keras` have under the same name. A Horovod program changes its import",
        "(`import kolo.torch as hvd`); the rows below say what else, if anything, to change.",
        "",
        f"Generated by `docs/tools/migration.py` (`scripts/docs.sh` fails when this page is stale):",
        f"Horovod's names and parameters are read from its sources at commit",
        f"[`{api['commit'][:10]}`]({api['source']}/tree/{api['commit']}) ({api['date']}) into",
        "`docs/migration/horovod-api.json`; kolo's side is introspected by importing kolo's modules",
        "(`inspect.signature`). **same**: kolo has the name with Horovod's parameters and defaults;",
        "**differs**: kolo has it, and the row says how and why; **not provided**: kolo lacks it, and",
        "the row says why and what to use instead. Parameter differences are found by the",
        "generator; the reasons are written in `docs/tools/migration_notes.py`. Kind **alias**:",
        "Horovod binds the name by assignment (`rank = _basics.rank`), so only its presence is compared.",
        "",
        "One difference holds for every collective and is not repeated in the rows: " + ORDER + ".",
        "Ranks that issue different collectives get kolo's mismatch error on every rank (a",
        "`RuntimeError`, as Horovod's), never a hang. Details: [Horovod's API](../guides/horovod.md).",
        "",
    ]
    for hmod, names in api["modules"].items():
        kmod = MODULES[hmod][1]
        notes = HOROVOD_NOTES.get(hmod, {})
        counts = {"same": 0, "differs": 0, "not provided": 0}
        rows = []
        for name, hinfo in names.items():
            status, auto = compare(hinfo, kolo_side[hmod].get(name))
            note = notes.get(name)
            if note is not None and status == "same":
                status = "differs"  # a difference in behaviour, not in the signature
            if status != "same" and not note:
                problems.append(f"{hmod}.{name}: {status} ({auto or 'no detail'}) but "
                                "docs/tools/migration_notes.py gives no reason")
            counts[status] += 1
            what = "; ".join(x for x in (auto, note or "") if x)
            kind = "alias" if hinfo["kind"] == "assigned" else hinfo["kind"]
            sig = signature_text(hinfo["params"]) if kind in ("function", "class") else ""
            if kind == "class" and not hinfo["params"]:
                sig = ""  # no __init__ of its own: nothing to show
            if len(sig) > 60:
                sig = sig[:57] + "…)"
            what = what.replace("|", "\\|")
            head = f"`{name}`" + (f"<br>`{sig}`" if sig else "")
            rows.append(f"| {head} | {kind} | {status} | {what} |")
        for name in notes:
            if name not in names:
                problems.append(f"{hmod}.{name}: a reason in migration_notes.py for a name Horovod lacks")
        lines += [f"## `{hmod}` → `{kmod}`", "",
                  f"{len(names)} names: {counts['same']} same, {counts['differs']} differ, "
                  f"{counts['not provided']} not provided.", "",
                  "| Horovod's name | kind | kolo | how, why, and what instead |", "|---|---|---|---|"]
        lines += rows + [""]
    return "\n".join(lines).rstrip() + "\n", problems


def torch_page(v2, v1):
    problems = []
    lines = [
        "# `torch.distributed` operations on backend `\"kolo\"`",
        "",
        "Every operation of torch's `ProcessGroup` (the methods that return a `Work`: what",
        "`torch.distributed`'s functions call on a group), with what the process group of",
        "`import kolo.torch` does with it. Generated by `docs/tools/migration.py` by introspecting",
        f"torch {v2['torch']} (PyPI) and torch {v1['torch']} (Debian) and kolo's `ProcessGroupKolo`;",
        "reasons are in `docs/tools/migration_notes.py`. **provided**: kolo implements it;",
        "**not provided**: torch's own implementation, which raises for a Python backend, or kolo's",
        "refusal with a clear error; the row says why and what to use instead.",
        "",
        "Backend `\"kolo\"` serves CPU and CUDA tensors (`devices=[\"cpu\", \"cuda\"]`; CUDA where kolo",
        "was built with it, see [GPUs](../gpus.md)). Usage: [DDP guide](../guides/ddp.md).",
        "",
        f"| operation | torch {v2['torch']} | torch {v1['torch']} | kolo | how, why, and what instead |",
        "|---|---|---|---|---|",
    ]
    for op in sorted(set(v2["ops"]) | set(v1["ops"])):
        in2, in1 = op in v2["ops"], op in v1["ops"]
        own = v2["ops"].get(op, v1["ops"].get(op))
        note = TORCH_NOTES.get(op)
        status = "provided" if own else "not provided"
        if note and note.startswith("refused:"):
            status = "not provided"
            note = note[len("refused:"):].strip()
        if status != "provided" and not note:
            problems.append(f"ProcessGroup.{op}: not provided but migration_notes.py gives no reason")
        why = (note or "").replace("|", "\\|")
        lines.append(f"| `{op}` | {'yes' if in2 else '—'} | {'yes' if in1 else '—'} | {status} | {why} |")
    for op in TORCH_NOTES:
        if op not in v2["ops"] and op not in v1["ops"]:
            problems.append(f"ProcessGroup.{op}: a reason in migration_notes.py for an operation torch lacks")
    return "\n".join(lines) + "\n", problems


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "extract":
        if len(sys.argv) != 3:
            sys.exit("usage: migration.py extract HOROVOD_GIT_DIR")
        extract(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    ap.add_argument("--build-python", required=True, help="the build's python/ folder (kolo, kolo._C)")
    ap.add_argument("--torch-python", default="/usr/bin/python3", help="a Python with torch (Debian's)")
    ap.add_argument("--torch2-python", required=True, help="a Python with PyPI's torch 2.x")
    ap.add_argument("--tf-python", required=True, help="a Python with TensorFlow 2.x")
    args = ap.parse_args()
    build = pathlib.Path(args.build_python).resolve()
    api = json.loads(API_JSON.read_text())
    kolo_side = {}
    for hmod, (_, kmod, fw) in MODULES.items():
        python = args.torch_python if fw == "torch" else args.tf_python
        kolo_side[hmod] = run_python(python, INTROSPECT, [kmod], json.dumps(list(api["modules"][hmod])), build)
    hpage, problems = horovod_page(api, kolo_side)
    v2 = run_python(args.torch2_python, TORCH_OPS, [], "", build)
    v1 = run_python(args.torch_python, TORCH_OPS, [], "", build)
    tpage, tproblems = torch_page(v2, v1)
    problems += tproblems
    if problems:
        sys.exit("migration.py: the tables are not complete:\n  " + "\n  ".join(problems))
    stale = []
    for path, text in ((HOROVOD_PAGE, hpage), (TORCH_PAGE, tpage)):
        if args.write:
            path.write_text(text)
            print(f"migration.py: wrote {path.relative_to(ROOT)}")
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path.relative_to(ROOT)))
    if stale:
        sys.exit(f"migration.py: {', '.join(stale)} differ from what kolo's code gives today: "
                 "run docs/tools/migration.py --write (see scripts/docs.sh for the arguments)")
    if args.check:
        print("migration.py: the migration tables match kolo's code")


if __name__ == "__main__":
    main()
