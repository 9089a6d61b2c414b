"""Ray Train and ray.data on kolo, on a local Ray cluster this module starts and stops.

  KOLORUN=build/tools/kolorun/kolorun PYTHONPATH=build/python \
      <venv>/bin/python -m pytest -q tests/trainers/test_ray.py

The cluster (`ray start --head`, 2 CPUs, no dashboard) lives in its own
temporary directory with its own ports. Every process it starts carries a
marker variable in its environment; at the end (also after a failure) those
processes, and only those, are stopped, and the module fails if any
survives. `ray stop --force` is not used: it kills every Ray process of the
machine, including clusters that are not this test's.
"""
import filecmp
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "workers"))
import ray_train  # noqa: E402

KOLORUN = os.environ.get("KOLORUN", os.path.join(ROOT, "build", "tools", "kolorun", "kolorun"))
BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(KOLORUN))))
PREPROCESS = os.path.join(BUILD, "examples", "fashion_mnist", "fashion_mnist_preprocess")
DATA = "/usr/share/datasets/fashion-mnist"
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
DEADLINE_S = 480  # per Ray job; generous: 2 loaded cores, never a speed assertion
MARK = "KOLO_RAY_TEST_CLUSTER"


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _marked(token):
    """Live processes whose environment carries MARK=token (the cluster's)."""
    found, needle = [], f"{MARK}={token}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # exited; only waiting to be reaped
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found.append((int(pid), f.read().replace(b"\0", b" ").decode(errors="replace")[:160]))
        except OSError:
            pass  # gone meanwhile, or not ours to read
    return found


def _stop(token, grace_s=5):
    """SIGTERM the cluster's processes, SIGKILL what is left after grace_s (as `ray stop --force`
    would at once: gcs_server, raylet and the autoscaler's monitor take longer than 20 s to act on
    SIGTERM when stopped together); returns the survivors."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        for pid, _ in _marked(token):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait_s
        while _marked(token) and time.time() < deadline:
            time.sleep(0.5)
    return _marked(token)


def _cluster_env(token, temp):
    """The environment of `ray start` and of the drivers: no launcher variables
    (kolo's discovery must see Ray's only), and Ray's token authentication with
    a token of this cluster's own (not ~/.ray/auth_token, which Ray would
    otherwise create or share with other clusters)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KOLO_", "RAY_", "MASTER_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    token_path = os.path.join(temp, "auth_token")
    with open(os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(secrets.token_hex(32))
    env.update({MARK: token, "PYTHONDONTWRITEBYTECODE": "1", "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path, "OMP_NUM_THREADS": "1"})
    return env


@pytest.fixture(scope="module")
def cluster():
    """A running local Ray cluster: yields (address, environment for its drivers)."""
    token = uuid.uuid4().hex
    temp = tempfile.mkdtemp(prefix="kolo-ray-")  # short: Ray's socket paths live under it
    gcs, agent, agent_grpc, node_mgr, obj_mgr, runtime_env, metrics = _free_ports(7)
    cmd = [RAY, "start", "--head", "--num-cpus=2", "--node-ip-address=127.0.0.1", f"--port={gcs}",
           f"--temp-dir={temp}", "--include-dashboard=false", "--disable-usage-stats",
           f"--dashboard-agent-listen-port={agent}",
           f"--dashboard-agent-grpc-port={agent_grpc}", f"--node-manager-port={node_mgr}",
           f"--object-manager-port={obj_mgr}", f"--runtime-env-agent-port={runtime_env}",
           f"--metrics-export-port={metrics}", "--object-store-memory=300000000"]
    try:
        env = _cluster_env(token, temp)
        started = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=300)
        assert started.returncode == 0, f"`ray start` failed ({started.returncode}):\n{started.stdout[-4000:]}"
        assert _marked(token), "`ray start` succeeded but no process of the cluster is running"
        yield f"127.0.0.1:{gcs}", env
    finally:
        survivors = _stop(token)
        shutil.rmtree(temp, ignore_errors=True)
        assert not survivors, f"Ray processes of the test cluster survived SIGKILL: {survivors}"
        assert not os.path.exists(temp), f"Ray's temporary directory {temp} was not removed"


def _run(cmd, env, what):
    """Runs a driver to completion; fails with its output when it fails or hangs."""
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=DEADLINE_S, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        pytest.fail(f"{what} did not finish in {DEADLINE_S} s:\n{out[-6000:]}")
    assert p.returncode == 0, f"{what} failed ({p.returncode}):\n{p.stdout[-6000:]}"
    return p.stdout


def test_kolo_config_refuses_other_backends():
    from kolo.ray import KoloConfig, _KoloBackend
    with pytest.raises(ValueError, match="KoloConfig\\(backend='gloo'\\).*'kolo' backend only"):
        _KoloBackend().on_start(None, KoloConfig(backend="gloo"))


def test_torch_trainer_on_kolo(cluster, tmp_path):
    address, env = cluster
    steps = 20
    _run([sys.executable, os.path.join(HERE, "workers", "ray_train.py"), "--address", address,
          "--out", str(tmp_path), "--steps", str(steps)], env, "the Ray Train job")
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    for r, res in enumerate(results):
        # kolo's rendezvous agrees with Ray's placement: one rank numbering.
        assert (res["ray_world_rank"], res["torch_rank"], res["kolo_rank"]) == (r, r, r), res
        assert (res["ray_world_size"], res["torch_size"], res["kolo_size"]) == (2, 2, 2), res
        assert res["kolo_local_rank"] == res["ray_local_rank"], res  # both workers on this one node
        assert res["backend"] == "kolo"
        assert res["sums"].tolist() == [1.0 + 2.0, 1.0 + 10.0]
        assert res["ints"].tolist() == [7 + 1007]
        assert res["top"].tolist() == [13]
        assert [g.tolist() for g in res["gathered"]] == [[0.0] * 3, [1.0] * 3]
    assert results[0]["pid"] != results[1]["pid"]

    # Every rank ends with bit-identical weights (kolo's contract) ...
    for name, w0 in results[0]["state"].items():
        assert torch.equal(w0, results[1]["state"][name]), f"{name} differs between the two workers"
    # ... equal to one process training on the whole batch from rank 0's weights.
    reference = ray_train.reference(steps)
    start, _, _ = ray_train.model_and_data(0)
    for name, want in reference.items():
        got = results[0]["state"][name]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"{name} differs from the reference")
        assert not torch.allclose(want, start.state_dict()[name]), f"{name} did not train"


def _cache_samples(path):
    from kolo.data_cache import Cache
    c = Cache(path)
    return c.spec, c.records(), c.labels()


def test_ray_data_cache_equals_fashion_mnist_preprocess(cluster, tmp_path):
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        pytest.skip(f"Fashion-MNIST is not installed in {DATA} (Debian's dataset-fashion-mnist)")
    if not os.access(PREPROCESS, os.X_OK):
        pytest.skip(f"{PREPROCESS} is not built")
    address, env = cluster
    # 96 images x 2 copies: sample i is image i mod 96 with randomness seeded
    # by i, so both copies of an image differ; 2 ranks, 2 Ray tasks at a time.
    options = ["--limit", "96", "--copies", "2", "--augment", "elastic", "--data", DATA]
    cpp, ray_built = str(tmp_path / "cpp.kcache"), str(tmp_path / "ray.kcache")
    _run([KOLORUN, "-np", "2", PREPROCESS, *options, "--chunk", "16", "--no-progress", "--out", cpp],
         env, "fashion_mnist_preprocess")
    out = _run([sys.executable, os.path.join(ROOT, "examples", "ray", "preprocess_fashion_mnist.py"), *options,
                "--chunk", "32", "--no-progress", "--address", address, "--out", ray_built],
               env, "examples/ray/preprocess_fashion_mnist.py")
    assert "192 samples" in out, out[-3000:]

    want_spec, want, want_labels = _cache_samples(cpp)
    spec, got, labels = _cache_samples(ray_built)
    assert spec == want_spec
    assert len(got) == 192 and np.array_equal(labels, want_labels)
    assert not np.array_equal(want[:96], want[96:])  # the two copies of each image differ
    differ = [i for i in range(len(want)) if not np.array_equal(got[i], want[i])]
    assert not differ, (f"{len(differ)} samples differ, first {differ[0]}: max |diff| "
                        f"{np.abs(got[differ[0]].astype(np.float64) - want[differ[0]]).max()}")
    assert filecmp.cmp(cpp, ray_built, shallow=False), "same samples, but the files differ byte for byte"

    # The C++ tool accepts the Ray-built file as its own up-to-date cache
    # (header, CRC-32 and spec checked) and leaves it alone.
    before = os.stat(ray_built).st_mtime_ns
    again = _run([PREPROCESS, *options, "--out", ray_built], env, "fashion_mnist_preprocess on the Ray cache")
    assert "reusing the cache (up to date)" in again, again
    assert os.stat(ray_built).st_mtime_ns == before


def test_data_cache_writer_and_reader(tmp_path):
    """kolo.data_cache on its own: what the C++ Cache::open refuses, it refuses too."""
    from kolo.data_cache import HEADER_BYTES, Cache, CacheError, CacheSpec, CacheWriter, InputHash
    spec = CacheSpec(3, "test/v1", InputHash().text("inputs").number(3).value(), "f32", (2, 3))
    records = [np.arange(6, dtype=np.float32).reshape(2, 3) * i for i in range(3)]
    path = tmp_path / "t.kcache"
    with CacheWriter(path, spec) as w:
        for i, r in enumerate(records):
            w.append(r, label=-i)
        w.commit()
    c = Cache(path)
    assert c.spec == spec and [c.label(i) for i in range(3)] == [0, -1, -2]
    assert np.array_equal(c.records(), np.stack(records)) and np.array_equal(c.record(2), records[2])
    with pytest.raises(CacheError, match="stale: transform 'test/v1' != 'test/v2'"):
        Cache(path, transform="test/v2")

    data = path.read_bytes()
    (tmp_path / "flipped").write_bytes(data[:HEADER_BYTES] + bytes([data[HEADER_BYTES] ^ 1]) + data[HEADER_BYTES + 1:])
    with pytest.raises(CacheError, match="CRC-32 of its records and index does not match"):
        Cache(tmp_path / "flipped")
    (tmp_path / "short").write_bytes(data[:-1])
    with pytest.raises(CacheError, match="truncated: the header says"):
        Cache(tmp_path / "short")

    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a cache")
    with pytest.raises(CacheError, match="exists and is not a kolo cache; not overwriting it"):
        CacheWriter(foreign, spec)
    with pytest.raises(CacheError, match="sample 0 has 4 bytes; records of \\[2, 3\\] f32 have 24"):
        with CacheWriter(tmp_path / "bad.kcache", spec) as w:
            w.append(np.float32(1), 0)
    assert foreign.read_text() == "not a cache"
    assert sorted(os.listdir(tmp_path)) == ["flipped", "notes.txt", "short", "t.kcache"]  # no partial file left
