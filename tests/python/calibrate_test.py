"""trainfit.calibrate: without a CUDA GPU it refuses with one line and exit 2; the profile it
builds (here from a CPU run at tiny sizes, which only checks the file's shape) is one that
`trainfit estimate --gpu-profile` reads, fitting its constants to every timing in it.

    /usr/bin/python3 tests/python/calibrate_test.py --trainfit build/release/trainfit
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)
from trainfit import calibrate  # noqa: E402

TRAINFIT = None  # the command-line binary, from --trainfit


class Calibrate(unittest.TestCase):
    def test_refuses_without_a_cuda_gpu(self):
        import torch
        if torch.cuda.is_available():
            self.skipTest("this machine has a CUDA GPU")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "gpu.json")
            done = subprocess.run([sys.executable, "-m", "trainfit.calibrate", "--out", out],
                                  capture_output=True, text=True, cwd=PYTHON_DIR)
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertEqual(done.stderr.count("\n"), 1, done.stderr)
            self.assertIn("no CUDA GPU", done.stderr)
            self.assertIn("hint", done.stderr)
            self.assertFalse(os.path.exists(out), "wrote a profile without measuring a GPU")

    def test_the_profile_is_one_trainfit_reads(self):
        profile = calibrate.measure("cpu", quick=True)
        self.assertEqual(profile["format"], calibrate.FORMAT)
        timings = len(profile["gemm"]) + len(profile["conv"]) + len(profile["copy"])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "cpu.json")
            with open(path, "w") as f:
                json.dump(profile, f)
            done = subprocess.run([TRAINFIT, "estimate", "--model", "resnet18", "--batch", "8",
                                   "--gpu-profile", path, "--json"],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            report = json.loads(done.stdout)
            self.assertEqual(report["gpu_profile"]["file"], path)
            fitted = report["gpu_profile"]["kernels"]
            self.assertGreater(fitted, 0)
            self.assertEqual(fitted + report["gpu_profile"]["host_bound_kernels"], timings)
            self.assertGreater(report["step_time_s"], 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainfit", required=True)
    args, rest = parser.parse_known_args()
    TRAINFIT = os.path.abspath(args.trainfit)
    unittest.main(argv=[sys.argv[0], *rest])
