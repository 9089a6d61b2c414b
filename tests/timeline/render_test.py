#!/usr/bin/python3
"""kolo-trace render on a known small trace (2 ranks, 5 optimizer steps, made here in the
format timeline_writer.cc writes): the PNG is valid, the default window is rank 0's middle
three steps, every phase and mark is drawn in its colour, and bad windows are errors.
Runs under Debian's python3 (python3-matplotlib)."""
import json
import os
import subprocess
import sys
import tempfile

import matplotlib.image

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "kolo-trace", "kolo-trace")
sys.path.insert(0, os.path.dirname(TOOL))
import render  # noqa: E402  (the colours the picture must contain)

STEP_US = 10_000.0


def trace():
    """Per rank and step (10 ms from 1 s): backward 2-6 ms, bucket 0 issued at 3 ms with its
    allreduce (rank 0 waits 1 ms for rank 1, 0.5 ms of reduction), queued 0.2 ms before;
    synchronize 6-8 ms, optimizer step 8-9 ms."""
    ev, ids = [], 0

    def span(cat, name, pid, b, e, args=None):
        nonlocal ids
        ids += 1
        ev.append({"ph": "b", "cat": cat, "name": name, "id": f"r{pid}.{ids}", "pid": pid, "tid": 1000,
                   "ts": b, "args": args or {}})
        ev.append({"ph": "e", "cat": cat, "name": name, "id": f"r{pid}.{ids}", "pid": pid, "tid": 1000, "ts": e})

    for step in range(5):
        t = 1e6 + step * STEP_US
        for pid in (0, 1):
            span("torch", "backward", pid, t + 2000, t + 6000)
            span("torch", "bucket 0", pid, t + 3000, t + 7000, {"bytes": 4096})
            span("torch", "synchronize", pid, t + 6000, t + 8000)
            span("torch", "optimizer step", pid, t + 8000, t + 9000)
            begin = t + 3200 + (1000 if pid == 1 else 0)
            span("queued", "queued allreduce bucket 0", pid, t + 3000, begin)
            ev.append({"ph": "X", "cat": "collective", "name": "allreduce bucket 0", "pid": pid, "tid": 1,
                       "ts": begin, "dur": t + 6000 - begin,
                       "args": {"comm": "kolo/comm0", "seq": step, "bytes": 4096, "reduce_us": 500.0}})
        ev.append({"ph": "X", "cat": "wait", "name": "wait for rank 1", "pid": 0, "tid": 1, "ts": t + 3200,
                   "dur": 1000.0, "args": {"straggler": 1, "comm": "kolo/comm0", "seq": step}})
    return {"displayTimeUnit": "ms", "traceEvents": ev}


def run(*args):
    return subprocess.run([sys.executable, TOOL, "render", *args], capture_output=True, text=True)


def colours_in(png):
    """The set of #rrggbb colours of the image's pixels above the legend (which has them all)."""
    img = matplotlib.image.imread(png)
    img = img[: img.shape[0] - int(render.LEGEND_IN * render.DPI)]
    px = (img[..., :3].reshape(-1, 3) * 255).round().astype(int)
    return {"#%02X%02X%02X" % tuple(p) for p in {tuple(p) for p in px.tolist()}}


def main():
    with tempfile.TemporaryDirectory() as d:
        path, png = os.path.join(d, "t.json"), os.path.join(d, "t.png")
        with open(path, "w") as f:
            json.dump(trace(), f)
        r = run(path, png)
        assert r.returncode == 0, r.stderr
        with open(png, "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", head
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        assert 800 <= width <= 1600 and 200 <= height <= 1200, (width, height)
        # The first event is at 2 ms of step 0, so optimizer steps end at 7, 17, 27, 37 and 47 ms
        # after it: the middle three run from 17 to 47 (and 2 % padding).
        assert "from 16.400 to 47.600 ms" in r.stdout, r.stdout
        have = colours_in(png)
        want = {c for _, c, _ in render.PHASES} | set(render.MARKS.values()) | {render.BUCKET}
        assert want <= have, f"colours not drawn: {sorted(want - have)}"
        # An explicit window (seconds from the first event) is used as given.
        r = run(path, png, "--from", "0.001", "--to", "0.0025")
        assert r.returncode == 0 and "from 1.000 to 2.500 ms" in r.stdout, (r.stdout, r.stderr)
        r = run(path, png, "--from", "0.03", "--to", "0.01")
        assert r.returncode != 0 and "empty window" in r.stderr, (r.stdout, r.stderr)
        with open(path, "w") as f:
            json.dump({"traceEvents": []}, f)
        r = run(path, png)
        assert r.returncode != 0 and "no timed events" in r.stderr, (r.stdout, r.stderr)
    print("render_test: ok")


if __name__ == "__main__":
    main()
