#!/usr/bin/env python3
"""Every code block of the README and the docs pages runs in a test, or says
why not. Each fenced block must follow an annotation comment:

  <!-- run: sh -->            this test runs the block with bash in the checkout
  <!-- run: cxx -->           CMake compiled the block (tests/docs/CMakeLists.txt);
                              this test checks it is today's text and runs it on 2 ranks
                              (cxx and python blocks end by printing "rank R of N" on each rank:
                              the test checks both ranks got there)
  <!-- run: python-np2 -->    this test runs it under kolorun -np 2 with Debian's torch
  <!-- run: python-tf-np2 --> the same with the TensorFlow environment's Python
  <!-- tested-by: FILE [(why)] -->  another test or CI runs it: every command of the
                              block (each line without its # comment) must appear in FILE
  <!-- not-run: REASON -->    not runnable here (a GPU, a real cluster, output text, ...)

  code_blocks.py --check                       annotations and tested-by files only
  code_blocks.py --run --build DIR --cxx-example BIN [--tf-python PY]
  code_blocks.py extract-cxx README.md OUT.cc  (CMake: the README's run: cxx block)
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
ANNOTATION = re.compile(r"^<!-- (run|tested-by|not-run): (.*?) -->$")
FENCE = re.compile(r"^(```+)(.*)$")


def pages():
    yield ROOT / "README.md"
    for p in sorted((ROOT / "docs").rglob("*.md")):
        yield p


def blocks(path):
    """(line, info, text, annotation kind, annotation value) of each code block."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        i += 1
        if info.startswith("{"):  # a MyST directive (toctree, eval-rst), not code
            continue
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        a = ANNOTATION.match(lines[prev].strip()) if prev >= 0 else None
        yield (start + 1, info, "\n".join(body) + "\n",
               a.group(1) if a else None, a.group(2).strip() if a else None)


def commands(text):
    """The block's commands: each non-empty line without its trailing # comment."""
    out = []
    for line in text.splitlines():
        cmd = re.sub(r"\s+#.*$", "", line).strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


def check_annotations():
    problems, runs = [], []
    for path in pages():
        rel = path.relative_to(ROOT)
        for line, info, text, kind, value in blocks(path):
            where = f"{rel}:{line}"
            if kind is None:
                problems.append(f"{where}: a ```{info} block without <!-- run: ... -->, "
                                "<!-- tested-by: FILE --> or <!-- not-run: REASON --> before it")
            elif kind == "not-run" and len(value) < 10:
                problems.append(f"{where}: not-run needs a reason, not {value!r}")
            elif kind == "tested-by":
                target = ROOT / value.split()[0]
                if not target.is_file():
                    problems.append(f"{where}: tested-by names {value.split()[0]}, which does not exist")
                    continue
                have = target.read_text()
                for cmd in commands(text):
                    if cmd not in have:
                        problems.append(f"{where}: {value.split()[0]} does not run: {cmd}")
            elif kind == "run":
                if value not in ("sh", "cxx", "python-np2", "python-tf-np2"):
                    problems.append(f"{where}: unknown run kind {value!r}")
                runs.append((where, value, text))
    return problems, runs


def github_slug(heading):
    """GitHub's anchor of a Markdown heading (what the README's links point at)."""
    s = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return s.replace(" ", "-")


def check_readme_links():
    """The README is read on GitHub, not in the Sphinx site (whose build checks the pages'
    links): each relative link must name a file that exists, and an #anchor one of its headings."""
    problems = []
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        f = ROOT / path if path else ROOT / "README.md"
        if not f.exists():
            problems.append(f"README.md: the link {target} names a file that does not exist")
        elif anchor and f.suffix == ".md":
            slugs = {github_slug(line.lstrip("#")) for line in f.read_text().splitlines()
                     if re.match(r"#+ ", line)}
            if anchor not in slugs:
                problems.append(f"README.md: the link {target}: {path} has no heading with that anchor")
    return problems


def extract_cxx(readme, out):
    found = [text for _, _, text, kind, value in blocks(pathlib.Path(readme))
             if kind == "run" and value == "cxx"]
    if len(found) != 1:
        sys.exit(f"code_blocks.py: {readme} has {len(found)} run: cxx blocks, expected 1")
    out = pathlib.Path(out)
    if not out.exists() or out.read_text() != found[0]:  # unchanged: no rebuild
        out.write_text(found[0])


def run_block(where, kind, text, args, tmp):
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(args.build) / "python"),
               PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    kolorun = str(pathlib.Path(args.build) / "tools/kolorun/kolorun")
    if kind == "sh":
        script = text
        if pathlib.Path(args.build).resolve() != (ROOT / "build").resolve():
            script = re.sub(r"(?<![\w/])build/", str(pathlib.Path(args.build).resolve()) + "/", script)
        cmd = ["bash", "-euo", "pipefail", "-c", script]
    elif kind == "cxx":
        src = pathlib.Path(args.cxx_example + ".cc")
        if not src.exists() or src.read_text() != text:
            return f"{where}: the compiled example ({src}) is not the README's block of today: rebuild"
        cmd = [kolorun, "-np", "2", args.cxx_example]
    else:
        python = args.python if kind == "python-np2" else args.tf_python
        if not python:
            return f"{where}: needs --tf-python (a Python with TensorFlow)"
        f = pathlib.Path(tmp) / f"block_{abs(hash(where))}.py"
        f.write_text(text)
        cmd = [kolorun, "-np", "2", python, str(f)]
    # The block runs in a scratch folder that links to the checkout's entries, so the
    # relative paths of the docs work and what the programs write (checkpoints, logs)
    # goes with the folder, not into the checkout.
    work = pathlib.Path(tmp) / f"cwd_{abs(hash(where))}"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (work / entry.name).symlink_to(entry)
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    except subprocess.TimeoutExpired as e:
        return f"{where}: still running after {e.timeout} s"
    out = r.stdout + r.stderr
    print(f"== {where} ({kind}): exit {r.returncode} after {time.monotonic() - start:.0f} s")
    print("   " + "\n   ".join(out.strip().splitlines()[-4:]))
    if r.returncode != 0:
        return f"{where}: exit {r.returncode}:\n{out[-3000:]}"
    if kind != "sh" and not all(re.search(rf"^\[{r}\] .*rank {r} of 2", out, re.M) for r in (0, 1)):
        return f"{where}: expected each rank to print 'rank R of 2' (as the examples end), got:\n{out[-2000:]}"
    return None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "extract-cxx":
        extract_cxx(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--run", action="store_true")
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--cxx-example", help="the binary CMake built from the README's run: cxx block")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--tf-python", default="")
    ap.add_argument("--only", help="run only the blocks of this page (e.g. README.md)")
    args = ap.parse_args()
    problems, runs = check_annotations()
    problems += check_readme_links()
    n = sum(1 for p in pages() for _ in blocks(p))
    if args.run:
        with tempfile.TemporaryDirectory(prefix="kolo-code-blocks.") as tmp:
            for where, kind, text in runs:
                if args.only and not where.startswith(args.only + ":"):
                    continue
                if kind == "cxx" and not args.cxx_example:
                    problems.append(f"{where}: needs --cxx-example")
                    continue
                p = run_block(where, kind, text, args, tmp)
                if p:
                    problems.append(p)
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print(f"PASS: {n} code blocks annotated; {len(runs)} run{' here' if args.run else ' (not run: --check)'}")


if __name__ == "__main__":
    main()
