"""Time of the SOK all-to-alls under the alpha-beta model, with nccl-tests bandwidths."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np

from scwork.errors import ConfigError
from scwork.sharding.sok._checks import _PHASES
from scwork.sharding.sok._input import DispatchPlan, _check_plan

if TYPE_CHECKING:  # pragma: no cover
    import xarray

__all__ = ["all_to_all_time"]


def all_to_all_time(plan: DispatchPlan, embedding_dim: int, dtype="f32", *, bandwidth: float,
                    latency: float = 0.0, key_itemsize: int = 8) -> "xarray.Dataset":
    """Time of each all-to-all of one SOK step from the count matrix (NCCL-style, per GPU).

    Every GPU sends its chunks to all others and receives theirs at once over its own
    link to the fabric (``bandwidth`` bytes/s in each direction, full duplex, as
    NVLink / NVSwitch and InfiniBand ports are), so a GPU needs
    ``max(sent, received) / bandwidth`` and the all-to-all waits for the slowest one::

        time = latency + max over GPUs g of max(sent_g, received_g) / bandwidth

    with ``sent_g`` / ``received_g`` the bytes of :meth:`DispatchPlan.traffic` that
    cross the network (a GPU's chunk for itself is a local copy). ``balanced_time``
    is the same volume spread evenly (``latency + total / G / bandwidth``), so
    ``time / balanced_time`` is what the key skew costs.

    Bandwidths as [nccl-tests] reports them for alltoall (``src/alltoall.cu``,
    ``AlltoAllGetBw``): ``algbw = S / time`` with ``S = count * nranks * typesize``
    the bytes of one rank's send buffer (here the mean over GPUs, local chunk
    included), and ``busbw = algbw * (n - 1) / n``. For a perfectly even exchange
    without latency ``busbw`` equals ``bandwidth``; skew lowers it.

    Parameters
    ----------
    plan : DispatchPlan
        :func:`dispatch` of the step's keys.
    embedding_dim : int
        Width of one vector (and gradient).
    dtype : str or numpy dtype, default ``"f32"``
        Element type of vectors and gradients (:data:`VECTOR_DTYPE_SIZES`).
    bandwidth : float
        Bytes/s of one GPU's link, one direction (e.g. NVLink per GPU).
    latency : float, default 0
        Seconds added to every all-to-all (launch and synchronisation).
    key_itemsize : int, default 8
        Bytes per key on the wire.

    Returns
    -------
    xarray.Dataset
        ``bytes`` (source, destination, phase) (sender -> receiver; phases
        ``keys``, ``vectors``, ``gradients`` as :meth:`DispatchPlan.traffic`);
        ``send_time``, ``receive_time`` (gpu, phase); ``time``, ``balanced_time``,
        ``algbw``, ``busbw``, ``bottleneck_gpu`` (phase).

    Raises
    ------
    ConfigError
        Non-positive bandwidth, negative latency, bad ``embedding_dim`` / dtype.

    Examples
    --------
    The module's example: GPU 1 owns 5 of the 8 keys, so it receives 3 key vectors of
    64 B from GPU 0 and sends them back.

    >>> import numpy as np
    >>> from scwork.sharding import sok
    >>> plan = sok.dispatch([np.array([0, 1, 3, 5]), np.array([4, 5, 6, 7])], num_gpus=2)
    >>> t = sok.all_to_all_time(plan, embedding_dim=16, bandwidth=1e9)
    >>> t["send_time"].sel(phase="vectors").values * 1e9    # ns: GPU 0 sends 2 vectors, GPU 1 sends 3
    array([128., 192.])
    >>> t["time"].sel(phase="vectors").item() * 1e9          # GPU 1 sends (and GPU 0 receives) 192 B
    192.0
    >>> round(t["busbw"].sel(phase="vectors").item() / 1e9, 3)   # (256 B / 192 ns) x 1/2
    0.667
    """
    import xarray as xr

    for name, value, positive in (("bandwidth", bandwidth, True), ("latency", latency, False)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) \
                or value < 0 or (positive and value == 0):
            need = "> 0 (bytes/s per GPU, one direction)" if positive else ">= 0 (seconds)"
            raise ConfigError(f"{name} must be a finite number {need}, got {value!r}")
    _check_plan(plan)
    traffic = plan.traffic(embedding_dim, dtype, key_itemsize=key_itemsize)
    G = plan.num_gpus
    pair = np.stack([traffic["key_bytes"].values, traffic["vector_bytes"].values,
                     traffic["gradient_bytes"].values], axis=-1)                  # (source, destination, phase)
    sent = traffic["sent_bytes"].values.astype(float)                          # (gpu, phase)
    received = traffic["received_bytes"].values.astype(float)
    send_time = sent / bandwidth
    receive_time = received / bandwidth
    per_gpu = np.maximum(send_time, receive_time)
    time = latency + per_gpu.max(axis=0)
    balanced = latency + sent.sum(axis=0) / G / bandwidth
    buffer_bytes = pair.sum(axis=1).mean(axis=0)                               # nccl-tests S, mean over GPUs
    moved = per_gpu.max(axis=0) > 0
    algbw = np.where(moved, buffer_bytes / np.where(time > 0, time, 1.0), 0.0)
    busbw = algbw * (G - 1) / G
    seconds = {"units": "s"}
    return xr.Dataset(
        {
            "bytes": (("source", "destination", "phase"), pair,
                      {"units": "bytes", "long_name": "bytes the source GPU sends to the destination GPU"}),
            "send_time": (("gpu", "phase"), send_time, {**seconds, "long_name": "bytes sent to others / bandwidth"}),
            "receive_time": (("gpu", "phase"), receive_time,
                             {**seconds, "long_name": "bytes received from others / bandwidth"}),
            "time": ("phase", time, {**seconds, "long_name": "all-to-all time: latency + slowest GPU"}),
            "balanced_time": ("phase", balanced,
                              {**seconds, "long_name": "time if the same bytes were spread evenly over GPUs"}),
            "algbw": ("phase", algbw, {"units": "B/s", "long_name": "nccl-tests algbw: send buffer bytes / time"}),
            "busbw": ("phase", busbw, {"units": "B/s", "long_name": "nccl-tests busbw: algbw x (n - 1) / n"}),
            "bottleneck_gpu": ("phase", per_gpu.argmax(axis=0),
                               {"units": "", "long_name": "GPU that takes longest (sending or receiving)"}),
        },
        coords={"source": np.arange(G), "destination": np.arange(G), "gpu": np.arange(G), "phase": list(_PHASES)},
        attrs={"num_gpus": G, "bandwidth": float(bandwidth), "latency": float(latency),
               "model": "time = latency + max over GPUs of max(sent, received) / bandwidth (full duplex)",
               "sources": "HugeCTR SOK all-to-all dispatch; nccl-tests src/alltoall.cu AlltoAllGetBw "
                          "(algbw = count * nranks * typesize / time, busbw = algbw * (n - 1) / n)"},
    )
