// ringcomm._core's log, Horovod timeline and build report (include/ringcomm/debug.h,
// build_info.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "parts.h"
#include "ringcomm/build_info.h"
#include "ringcomm/debug.h"

namespace py = pybind11;

namespace ringcomm::bindings {

void bindObservability(py::module_& m) {
  m.def("parse_log_level", &parseLogLevel, py::arg("text"));
  m.def("parse_log_subsystems", &parseLogSubsystems, py::arg("text"));
  m.def("configure_observability", &configureObservability, py::arg("config"),
        py::arg("rank") = -1);
  m.def("log_enabled", &logEnabled, py::arg("level"), py::arg("subsystem"));
  m.def("log", &logMessage, py::arg("level"), py::arg("subsystem"), py::arg("text"));
  m.def("start_horovod_timeline", &startHorovodTimeline, py::arg("path"),
        py::arg("mark_cycles") = false);
  // Rank 0 renders and writes the file: release the GIL meanwhile.
  m.def("stop_horovod_timeline", &stopHorovodTimeline, py::call_guard<py::gil_scoped_release>());
  m.def("horovod_timeline_active", &horovodTimelineActive);

  // What this build is. ------------------------------------------------------------------
  m.def("build_info", [] {
    BuildInfo b = buildInfo();
    return py::dict(py::arg("compiler") = b.compiler, py::arg("cuda") = b.cuda,
                    py::arg("cuda_architectures") = b.cudaArchitectures,
                    py::arg("cuda_runtime_version") = b.cudaRuntimeVersion,
                    py::arg("cuda_driver_version") = b.cudaDriverVersion,
                    py::arg("reduce_kernels") = b.reduceKernels, py::arg("half_codec") = b.halfCodec,
                    py::arg("wire_protection") = b.wireProtection, py::arg("ucx") = b.ucx);
  });
  m.def("ucx_info", [] {
    UcxInfo u = ucxInfo();
    return py::dict(py::arg("version") = u.version, py::arg("lanes") = u.lanes,
                    py::arg("why_not") = u.whyNot);
  });
  m.def("mps_running", &mpsRunning, py::arg("pipe_directory"));
}

}  // namespace ringcomm::bindings
