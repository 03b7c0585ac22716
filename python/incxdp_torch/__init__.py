# SPDX-License-Identifier: BSD-2-Clause
"""The torch.distributed backend "incxdp" (docs/PYTORCH.md).

    import incxdp_torch, torch.distributed as dist
    dist.init_process_group("incxdp", init_method="file:///tmp/rdv", rank=r, world_size=4)

Rank r of torch is rank r of the topology's job. The topology file, job and
transport come from set_options() or the environment: INCXDP_TOPOLOGY,
INCXDP_JOB (default 1), INCXDP_TRANSPORT (star jobs: udp, afxdp; a roce-tree
job always speaks roce).
"""
from datetime import timedelta

import torch
import torch.distributed as dist  # c10d's pybind types, the base of _C's class

from . import _C

ProcessGroupIncxdp = _C.ProcessGroupIncxdp

_options = {"topology": "", "job": 0, "transport": ""}


def set_options(topology=None, job=None, transport=None):
    """Override INCXDP_TOPOLOGY / INCXDP_JOB / INCXDP_TRANSPORT for the
    process groups created from now on."""
    if topology is not None:
        _options["topology"] = str(topology)
    if job is not None:
        _options["job"] = int(job)
    if transport is not None:
        _options["transport"] = str(transport)


def _create(store, rank, world_size, timeout):
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return _C.create_process_group(store, rank, world_size, timeout, _options["topology"],
                                   _options["job"], _options["transport"])


if not hasattr(dist.Backend, "INCXDP"):
    dist.Backend.register_backend("incxdp", _create)
