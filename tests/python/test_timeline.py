"""hvd.start_timeline/stop_timeline (workers/timeline_worker.py): each session's
file is JSON with the named collectives, the optimizer's buckets, backward and
step marks on every rank; KOLO_TIMELINE records a Python job too."""
import json
import os

from launch import assert_ok, run


def _events(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def test_start_stop_timeline(tmp_path):
    proc = run(2, "timeline_worker.py", tmp_path)
    assert_ok(proc, 2, "timeline")
    for session in range(2):
        ev = _events(tmp_path / f"t{session}.json")
        for r in range(2):
            names = [e["name"] for e in ev if e.get("cat") == "collective" and e["pid"] == r]
            assert "allreduce my.tensor" in names and "broadcast my.broadcast" in names, names
            assert "allreduce not.recorded" not in names
            buckets = [n for n in names if n.startswith("allreduce bucket")]
            assert len(buckets) >= 3, names  # at least one bucket per step
            marks = {e["name"] for e in ev if e.get("cat") == "torch" and e["pid"] == r}
            assert {"backward", "synchronize", "optimizer step", "bucket 0"} <= marks, marks
    assert not list(tmp_path.glob("*.rank*.json")), "snapshots left behind"
    assert not (tmp_path / "again.json").exists()


def test_kolo_timeline_variable(tmp_path):
    path = tmp_path / "env.json"
    proc = run(2, "timeline_worker.py", "env", env={"KOLO_TIMELINE": str(path)})
    assert_ok(proc, 2, "timeline")
    names = [(e["pid"], e["name"]) for e in _events(path) if e.get("cat") == "collective"]
    assert (0, "allreduce from.env") in names and (1, "allreduce from.env") in names, names
