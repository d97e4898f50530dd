"""The phases of a training step and the resources that run them.

Shared by the timeline, the step model and the trace tools.

Examples
--------
>>> from scwork.pipeline.phases import PHASES, PHASE_RESOURCE
>>> [PHASE_RESOURCE[p] for p in PHASES]
['host', 'sc', 'ici', 'tc', 'tc', 'ici', 'sc']
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PHASES", "PHASE_RESOURCE", "RESOURCE_KINDS", "STAGES"]

#: The phases of one training step, in dependency order.
PHASES: tuple[str, ...] = ("host", "sc_forward", "ici_forward", "tc_forward", "tc_backward",
                           "ici_backward", "sc_backward")
#: Which kind of resource runs each phase.
PHASE_RESOURCE: Mapping[str, str] = {
    "host": "host", "sc_forward": "sc", "ici_forward": "ici", "tc_forward": "tc",
    "tc_backward": "tc", "ici_backward": "ici", "sc_backward": "sc",
}
#: Resource kinds: host CPUs, SparseCores, ICI links (per chip), TensorCores (per chip).
RESOURCE_KINDS: tuple[str, ...] = ("host", "sc", "ici", "tc")
#: Software-pipeline stages of the pipelined schedule.
STAGES: tuple[str, ...] = ("pre-loop", "main", "post-loop")
