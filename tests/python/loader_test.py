"""trainfit.loader, the Dataset probe: it never hangs (a Dataset that raises, a worker that
dies, a __getitem__ slower than the budget, a worker that never answers each end with one line,
exit 1 and the partial profile), bad arguments are one line and exit 2, and what it writes from
the command line or from Python is a profile `trainfit loader` plans from.

    /usr/bin/python3 tests/python/loader_test.py --trainfit build/release/trainfit
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PYTHON_DIR = os.path.join(ROOT, "python")
DATASETS_DIR = os.path.join(ROOT, "validation")
sys.path[:0] = [PYTHON_DIR, DATASETS_DIR]
from trainfit import loader  # noqa: E402
import loader_datasets  # noqa: E402

TRAINFIT = None  # the command-line binary, from --trainfit
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([PYTHON_DIR, DATASETS_DIR]))


def probe_cli(*args, timeout=120):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "loader.json")
        begin = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "trainfit.loader", "--out", out, *args],
                              capture_output=True, text=True, env=ENV, timeout=timeout)
        seconds = time.monotonic() - begin
        profile = json.load(open(out)) if os.path.exists(out) else None
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return done, errors, profile, seconds


class NeverHangs(unittest.TestCase):
    def assert_stopped(self, done, errors, profile, reason):
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(len(errors), 1, done.stderr)
        self.assertIn("the probe stopped early", errors[0])
        self.assertIn(reason, errors[0])
        self.assertIsNotNone(profile, "no partial profile")
        self.assertFalse(profile["complete"])
        self.assertIn(reason, profile["stopped"])
        self.assertIsNotNone(profile["host"]["affinity"])

    def test_a_dataset_that_raises(self):
        done, errors, profile, _ = probe_cli("--dataset", "loader_datasets:raises", "--batch", "4",
                                             "--seconds", "10")
        self.assert_stopped(done, errors, profile, "the dataset raised")
        self.assertIn("ValueError: corrupt sample", errors[0])

    def test_a_worker_that_dies(self):
        done, errors, profile, _ = probe_cli("--dataset", "loader_datasets:dies", "--batch", "4",
                                             "--seconds", "10", "--workers", "0,1")
        self.assert_stopped(done, errors, profile, "a DataLoader worker died with 1 workers")

    def test_a_sample_slower_than_the_budget(self):
        done, errors, profile, seconds = probe_cli("--dataset", "loader_datasets:slow",
                                                   "--batch", "4", "--seconds", "4")
        self.assert_stopped(done, errors, profile, "took longer than")
        self.assertLess(seconds, 30)

    def test_a_worker_that_never_answers(self):
        # Fast in the main process, an hour a sample in a worker: the DataLoader's timeout.
        done, errors, profile, seconds = probe_cli(
            "--dataset", "loader_datasets:slow", "--kwargs", '{"seconds": 0, "worker_seconds": 3600}',
            "--batch", "4", "--seconds", "4", "--workers", "1")
        self.assert_stopped(done, errors, profile, "no batch came from 1 workers")
        self.assertLess(seconds, 60)


class Arguments(unittest.TestCase):
    def test_bad_arguments_are_one_line(self):
        for args, expected in (
                (["--dataset", "nocolon"], "is not PKG.MODULE:NAME"),
                (["--dataset", "no_such_module:make"], "cannot import no_such_module"),
                (["--dataset", "loader_datasets:nothing"], "has no 'nothing'"),
                (["--dataset", "loader_datasets:decode", "--batch", "0"], "--batch 0"),
                (["--dataset", "loader_datasets:decode", "--workers", "1,x"], "--workers"),
                (["--dataset", "loader_datasets:decode", "--kwargs", "{"], "--kwargs is not JSON")):
            done, errors, profile, _ = probe_cli(*args)
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertEqual(len(errors), 1, done.stderr)
            self.assertIn(expected, errors[0])
            self.assertIsNone(profile)


class Profiles(unittest.TestCase):
    def plan(self, path):
        done = subprocess.run([TRAINFIT, "loader", "--profile", path, "--step-time", "50ms",
                               "--batch", "16", "--json"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout)

    def test_from_python(self):
        dataset = loader_datasets.LabelsNumpy(n=2000)
        profile = loader.probe(dataset, batch_size=16, seconds=6, worker_counts=[0, 1])
        self.assertTrue(profile["complete"], profile["stopped"])
        self.assertEqual(profile["dataset"]["length"], 2000)
        self.assertEqual([r["num_workers"] for r in profile["workers"]], [0, 1])
        self.assertEqual(profile["memory"]["inventory"]["flat_buffers"], 1)
        self.assertEqual(profile["memory"]["inventory"]["flat_buffer_bytes"],
                         dataset.labels.nbytes)
        self.assertEqual(profile["batch"]["tensors"], 2)
        self.assertEqual(profile["worker_threads"]["torch_threads"], 1)  # PyTorch sets one
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "p.json")
            json.dump(profile, open(path, "w"))
            plan = self.plan(path)
        self.assertIn(plan["num_workers"], (0, 1))

    def test_from_the_command_line(self):
        done, errors, profile, _ = probe_cli("--dataset", "loader_datasets:labels",
                                             "--kwargs", '{"n": 5000}', "--batch", "16",
                                             "--seconds", "6", "--workers", "0,1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(errors, [])
        self.assertEqual(profile["dataset"]["spec"], "loader_datasets:labels")
        construction = profile["memory"]["construction"]
        self.assertGreater(construction["after"]["anon_bytes"],
                           construction["before"]["anon_bytes"])
        # 5000 samples x (4 lists + 202 floats + a dict): the inventory counts them.
        self.assertGreater(profile["memory"]["inventory"]["python_objects"], 5000 * 200)

    def test_an_iterable_dataset_is_refused(self):
        import torch

        class Stream(torch.utils.data.IterableDataset):
            def __iter__(self):
                return iter(range(10))

        profile = loader.probe(Stream(), seconds=2)
        self.assertFalse(profile["complete"])
        self.assertIn("not a map-style Dataset", profile["stopped"])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    args, rest = ap.parse_known_args()
    TRAINFIT = args.trainfit
    unittest.main(argv=[sys.argv[0]] + rest)
