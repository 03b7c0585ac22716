# SPDX-License-Identifier: BSD-2-Clause
"""The torch.distributed backend "incxdp" (docs/PYTORCH.md).

    import incxdp_torch, torch.distributed as dist
    dist.init_process_group("incxdp", init_method="file:///tmp/rdv", rank=r, world_size=4)

Rank r of torch is rank r of the topology's job. The topology file, job and
carrier come from set_options() or the environment: INCXDP_TOPOLOGY,
INCXDP_JOB (default 1), INCXDP_CARRIER (auto, socket, af_xdp, verbs; the
job's kind gives the protocol: star and tree jobs native, roce-tree jobs
roce). INCXDP_TRANSPORT / transport= take the older names (udp, afxdp, roce,
verbs, auto). pg.transport tells what was opened ("native/af_xdp").
"""
from datetime import timedelta

import torch
import torch.distributed as dist  # c10d's pybind types, the base of _C's class

from . import _C

ProcessGroupIncxdp = _C.ProcessGroupIncxdp

_options = {"topology": "", "job": 0, "transport": "", "carrier": ""}


def set_options(topology=None, job=None, transport=None, carrier=None):
    """Override INCXDP_TOPOLOGY / INCXDP_JOB / INCXDP_TRANSPORT /
    INCXDP_CARRIER for the process groups created from now on."""
    if topology is not None:
        _options["topology"] = str(topology)
    if job is not None:
        _options["job"] = int(job)
    if transport is not None:
        _options["transport"] = str(transport)
    if carrier is not None:
        _options["carrier"] = str(carrier)


def _create(store, rank, world_size, timeout):
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return _C.create_process_group(store, rank, world_size, timeout, _options["topology"],
                                   _options["job"], _options["transport"], _options["carrier"])


if not hasattr(dist.Backend, "INCXDP"):
    dist.Backend.register_backend("incxdp", _create)
