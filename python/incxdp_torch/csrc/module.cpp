// SPDX-License-Identifier: BSD-2-Clause
// incxdp_torch._C: the process group class and its creator, for
// incxdp_torch/__init__.py to register with torch.distributed.
#include "process_group_incxdp.h"

#include <torch/python.h>

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>

namespace py = pybind11;
using incxdp::torch_backend::BackendOptions;
using incxdp::torch_backend::ProcessGroupIncxdp;

PYBIND11_MODULE(_C, m) {
    m.doc() = "incxdp's torch.distributed process group (docs/PYTORCH.md)";
    // The base class is torch's c10d ProcessGroup binding, so that
    // torch.distributed treats this like any other process group.
    py::class_<ProcessGroupIncxdp, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupIncxdp>>(
        m, "ProcessGroupIncxdp")
        // What the communicator opened: "native/socket", "roce/af_xdp".
        .def_property_readonly(
            "transport", [](const ProcessGroupIncxdp &pg) { return pg.config().transport_name(); })
        .def_property_readonly(
            "protocol",
            [](const ProcessGroupIncxdp &pg) { return incxdp::to_string(pg.config().protocol); })
        .def_property_readonly(
            "carrier",
            [](const ProcessGroupIncxdp &pg) { return incxdp::to_string(pg.config().carrier); })
        .def_property_readonly("job", [](const ProcessGroupIncxdp &pg) { return pg.config().job; });
    // The store barrier in the constructor blocks: let other Python threads run.
    m.def(
        "create_process_group",
        [](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
           std::chrono::milliseconds timeout, std::string topology, uint32_t job,
           std::string transport, std::string carrier) {
            BackendOptions o{std::move(topology), job, std::move(transport), std::move(carrier)};
            return c10::make_intrusive<ProcessGroupIncxdp>(store, rank, size, std::move(o),
                                                           timeout);
        },
        py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::arg("topology") = "", py::arg("job") = 0, py::arg("transport") = "",
        py::arg("carrier") = "", py::call_guard<py::gil_scoped_release>());
}
