"""`pip wheel .` and the wheel installed into a fresh virtual environment (with the system's site
packages, for Debian's torch), then, from another folder so that the source tree is not on the
path:

    python3 -c "import trainfit; print(trainfit.estimate('resnet50', batch=64)[...])"
    trainfit estimate --model resnet50 --batch 64 --json      (the installed command)
    python3 -m trainfit estimate --model resnet50 --batch 64 --json

each give the figure the build's own binary gives. pyproject.toml builds with setuptools and
setup.py's CMake step; here without build isolation (Debian's setuptools, nothing downloaded)
and in the given build folder (TRAINFIT_CMAKE_BUILD), which is already built, so the test takes
seconds; a fresh `pip install .` builds in build/pip.

    /usr/bin/python3 tests/python/pip_install_test.py --build build/release
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = ""


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


class PipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        venv = os.path.join(cls.tmp.name, "venv")
        made = run([sys.executable, "-m", "venv", "--system-site-packages", venv])
        assert made.returncode == 0, made.stderr
        cls.python = os.path.join(venv, "bin", "python3")
        cls.command = os.path.join(venv, "bin", "trainfit")
        env = dict(os.environ, TRAINFIT_CMAKE_BUILD=BUILD)
        env.pop("TRAINFIT_BUILD", None)
        cls.status_before = run(["git", "status", "--porcelain"], cwd=ROOT)
        wheels = os.path.join(cls.tmp.name, "wheels")
        cls.install = run([cls.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                           "--wheel-dir", wheels, "."], cwd=ROOT, env=env)
        if cls.install.returncode == 0:
            cls.wheels = os.listdir(wheels)
            cls.install = run([cls.python, "-m", "pip", "install", "--no-deps",
                               *(os.path.join(wheels, w) for w in cls.wheels)], env=env)
        cls.env = dict(os.environ)
        cls.env.pop("TRAINFIT_BUILD", None)
        cls.env.pop("PYTHONPATH", None)
        cls.reference = json.loads(run([os.path.join(BUILD, "trainfit"), "estimate", "--model",
                                        "resnet50", "--batch", "64", "--json"]).stdout)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.install.returncode, 0, self.install.stdout + self.install.stderr)

    def test_one_wheel_for_this_platform(self):
        self.assertEqual(len(self.wheels), 1, self.wheels)
        self.assertRegex(self.wheels[0], r"^trainfit-[0-9.]+-cp3[0-9]+-cp3[0-9]+-linux_\w+\.whl$")

    def test_import_estimates_in_process(self):
        code = ("import trainfit; print(trainfit.__file__); "
                "print(trainfit.estimate('resnet50', batch=64)['peak_allocated_bytes'])")
        proc = run([self.python, "-c", code], cwd=self.tmp.name, env=self.env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        where, peak = proc.stdout.split()
        self.assertTrue(where.startswith(self.tmp.name), where)  # the installed package
        self.assertEqual(int(peak), self.reference["peak_allocated_bytes"])

    def test_installed_command_and_python_m(self):
        args = ["estimate", "--model", "resnet50", "--batch", "64", "--json"]
        for launcher in ([self.command], [self.python, "-m", "trainfit"]):
            proc = run(launcher + args, cwd=self.tmp.name, env=self.env)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(json.loads(proc.stdout)["peak_allocated_bytes"],
                             self.reference["peak_allocated_bytes"])
            bad = run(launcher + ["estimate", "--model", "nope"], cwd=self.tmp.name, env=self.env)
            self.assertEqual(bad.returncode, 2)
            self.assertEqual(len(bad.stderr.strip().splitlines()), 1, bad.stderr)

    def test_source_tree_stays_clean(self):
        """What pip and setuptools write (build/lib, python/trainfit.egg-info) is ignored: the
        checkout's status is what it was before the install."""
        status = run(["git", "status", "--porcelain"], cwd=ROOT)
        if status.returncode != 0:
            self.skipTest("not a git checkout")
        self.assertEqual(status.stdout, self.status_before.stdout)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="a CMake build folder of trainfit, built")
    args, rest = ap.parse_known_args()
    BUILD = os.path.abspath(args.build)
    unittest.main(argv=[sys.argv[0]] + rest)
