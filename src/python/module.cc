// trainfit's Python binding, `trainfit._trainfit`: the command line, run in this process.
//
//   code, out, err = _trainfit.run(["trainfit", "estimate", "--model", "resnet50", "--json"])
//
// python/trainfit/api.py builds the arguments from keywords and turns `--json` output into a
// dict, so `trainfit.estimate(...)` returns exactly the report `trainfit estimate --json` prints.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace py = pybind11;

PYBIND11_MODULE(_trainfit, m) {
  m.doc() = "trainfit's command line in process (use trainfit.estimate and trainfit.fit)";
  m.def(
      "run",
      [](const std::vector<std::string>& args) {
        std::ostringstream out;
        std::ostringstream err;
        int code = 0;
        {
          // The estimate touches no Python object: other threads may run meanwhile.
          py::gil_scoped_release release;
          code = trainfit::run_cli(args, out, err);
        }
        return py::make_tuple(code, out.str(), err.str());
      },
      py::arg("args"),
      "Runs `trainfit ARGS...` (args[0] is the program name); returns (exit code, stdout, "
      "stderr).");
}
