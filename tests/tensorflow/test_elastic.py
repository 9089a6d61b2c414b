"""kolo.tensorflow.elastic under elastic kolorun on this machine, two "hosts"
by name (localhost and 127.0.0.1, each with its own agent; the workers share
one /dev/shm), as tests/elastic/elastic_test.sh does for C++.

test_lose_and_gain_a_worker (workers/elastic_worker.py): 3 workers train;
the one on 127.0.0.1 is SIGKILLed; the survivors get kolo's error out of the
tf.function step, restore the commit, re-form as 2 and go on; the host is
listed again and its new worker joins (generation 3 workers again), gets the
state from a survivor and all finish. The replay finds every sample once per
epoch and the weights of one process trained on the same steps.

test_keras_fit_loses_a_worker (workers/elastic_fit_worker.py): Horovod's
Keras shape — model.fit with KerasState and the callbacks inside run — on 3
workers; one is SIGKILLed mid-epoch; the survivors restore the commit and fit
on as 2 from that epoch, ending with the same weights.

test_keras_callbacks: KerasState and the three callbacks around a 1-rank
model.fit (outside an elastic job commit() only saves)."""
import json
import os
import re
import signal
import subprocess
import sys
import time

from launch import KOLORUN, assert_ok, run

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
DEADLINE_S = 300  # three TensorFlow processes on two loaded cores


class Job:
    """Elastic kolorun running WORKER DIR ARGS... on localhost:2 and 127.0.0.1:1."""

    def __init__(self, tmp_path, worker, *args):
        self.dir = str(tmp_path)
        self.hosts = os.path.join(self.dir, "hosts")
        discover = os.path.join(self.dir, "discover.sh")
        with open(discover, "w") as f:
            f.write(f"#!/bin/sh\nexec cat {self.hosts}\n")
        os.chmod(discover, 0o755)
        self.out = os.path.join(self.dir, "out")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KOLO_")}
        env.update(PYTHONDONTWRITEBYTECODE="1", TF_CPP_MIN_LOG_LEVEL="2")
        self.list_hosts("localhost:2", "127.0.0.1:1")
        with open(self.out, "w") as log:
            self.proc = subprocess.Popen(
                [KOLORUN, "--min-np", "2", "--max-np", "3", "--host-discovery-script", discover,
                 "--elastic-timeout", "60", "--timeout", str(DEADLINE_S),
                 # A TensorFlow worker on loaded cores took over the default 30 s to reach
                 # init(): generation 0 formed without it, and the test waits for all three.
                 "--join-timeout", "120", sys.executable,
                 os.path.join(WORKERS, worker), self.dir, *args],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def list_hosts(self, *hosts):
        with open(self.hosts + ".tmp", "w") as f:
            f.write("".join(h + "\n" for h in hosts))
        os.rename(self.hosts + ".tmp", self.hosts)

    def log(self):
        with open(self.out) as f:
            return f.read()

    def wait_for(self, pattern):
        deadline = time.monotonic() + DEADLINE_S
        while not re.search(pattern, self.log(), re.M):
            assert self.proc.poll() is None, f"kolorun exited {self.proc.returncode} before /{pattern}/:\n" \
                                             f"{self.log()[-6000:]}"
            assert time.monotonic() < deadline, f"no /{pattern}/ in {DEADLINE_S} s:\n{self.log()[-6000:]}"
            time.sleep(0.2)

    def worker_pid(self, worker):
        return int(re.search(rf"^\[{worker}\] pid (\d+) ", self.log(), re.M).group(1))

    def finish(self):
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"kolorun still running after {DEADLINE_S} s:\n{self.log()[-6000:]}")

    def assert_nothing_left(self):
        assert subprocess.run(["pgrep", "-f", self.dir + " "], stdout=subprocess.DEVNULL).returncode == 1, \
            "processes of the job left"

    def clean_up(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        subprocess.run(["pkill", "-KILL", "-f", self.dir + " "], check=False)


def test_lose_and_gain_a_worker(tmp_path):
    job = Job(tmp_path, "elastic_worker.py", "--hold-for-join")
    try:
        job.wait_for(r"generation 0: 3 workers \(localhost: 0, 1; 127\.0\.0\.1: 2\)")
        job.wait_for(r"^\[2\] step 6 rank 2 size 3$")
        os.kill(job.worker_pid(2), signal.SIGKILL)
        job.wait_for(r"generation 1: 2 workers \(localhost: 0, 1\)")
        job.wait_for(r"^\[0\] step \d+ rank 0 size 2$")
        job.list_hosts("localhost:2")
        time.sleep(2.5)  # one discovery run without the host: it may come back
        job.list_hosts("localhost:2", "127.0.0.1:1")
        job.wait_for(r"generation 2: 3 workers \(localhost: 0, 1; 127\.0\.0\.1: 3\)")
        assert job.finish() == 0, job.log()[-6000:]
        out = job.log()
        for w in (0, 1):
            assert re.search(rf"^\[{w}\] reset: rank {w} size 2$", out, re.M), out[-6000:]
            assert re.search(rf"^\[{w}\] synced: rank {w} size 3 epoch \d+ consumed \d+ steps (\d+)$",
                             out, re.M), out[-6000:]
        for w in (0, 1):
            # where the death is noticed: the next step's allreduce, or the commit's broadcast
            # when rank 2 died between its last step and that commit (there the class is
            # kolo's own, whose __name__ is plain "Error"; a step raises TF's UnknownError)
            assert re.search(rf"^\[{w}\] (step|commit) failed: \w*Error: kolo rank {w}: \S+: rank 2 \(pid \d+\) died$",
                             out, re.M), out[-6000:]
        # the newcomer starts where the survivors are, not at the start
        joined = re.search(r"^\[3\] synced: rank 2 size 3 epoch (\d+) consumed (\d+) steps (\d+)$", out, re.M)
        assert joined and int(joined.group(3)) > 6, out[-6000:]
        assert re.search(rf"^\[0\] synced: rank 0 size 3 epoch {joined.group(1)} consumed {joined.group(2)} "
                         rf"steps {joined.group(3)}$", out, re.M), out[-6000:]
        assert re.search(rf"^\[3\] step {int(joined.group(3)) + 1} rank 2 size 3$", out, re.M), out[-6000:]
        for w in (0, 1, 3):
            assert re.search(rf"^\[{w}\] done: rank \d size 3 steps \d+$", out, re.M), out[-6000:]
        # every rank of the last generation ends with the same log and weights, bit for bit
        results = [json.load(open(os.path.join(job.dir, f"result.{r}.json"))) for r in range(3)]
        assert results[1] == results[0] and results[2] == results[0], "the ranks' results differ"
        replay = subprocess.run([sys.executable, os.path.join(WORKERS, "elastic_worker.py"), job.dir, "--replay"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert replay.returncode == 0, replay.stdout[-4000:]
        assert re.search(r"^replay: OK: \d+ steps, step sizes \[[^]]*\b8\b[^]]*\b12\b", replay.stdout, re.M), \
            replay.stdout[-4000:]
    finally:
        job.clean_up()
    job.assert_nothing_left()


def test_keras_fit_loses_a_worker(tmp_path):
    job = Job(tmp_path, "elastic_fit_worker.py")
    try:
        job.wait_for(r"generation 0: 3 workers \(localhost: 0, 1; 127\.0\.0\.1: 2\)")
        job.wait_for(r"^\[2\] epoch 1 rank 2 size 3 batch 5$")
        os.kill(job.worker_pid(2), signal.SIGKILL)
        job.wait_for(r"generation 1: 2 workers \(localhost: 0, 1\)")
        assert job.finish() == 0, job.log()[-6000:]
        out = job.log()
        for w in (0, 1):
            # kolo's error came out of fit's traced step; the commit (epoch 1) was restored
            assert re.search(rf"^\[{w}\] reset: rank {w} size 2$", out, re.M), out[-6000:]
            assert re.search(rf"^\[{w}\] fit: rank {w} size 2 from epoch 1$", out, re.M), out[-6000:]
            assert re.search(rf"^\[{w}\] done: rank {w} size 2 epoch 3$", out, re.M), out[-6000:]
        results = [json.load(open(os.path.join(job.dir, f"fit.{r}.json"))) for r in (0, 1)]
        assert results[0]["epoch"] == 3 and results[0]["batch"] == 0, results[0]
        assert results[1] == results[0], "the survivors' weights differ"
    finally:
        job.clean_up()
    job.assert_nothing_left()


def test_keras_callbacks():
    proc = run(1, os.path.join(WORKERS, "elastic_keras_worker.py"))
    assert_ok(proc, 1, "tf-elastic-keras")
