"""One job as the cost models see it, resolved once: the model on a cluster's GPU, its stack's
constants for that GPU, its numerics, the layouts scored, the pipeline ranks evaluated and what
several cost models share (the per-rank parameter split, the layer rows, the per-layer times).

`planner/score.py` builds one per power-cap level and layout batch and hands it to the step time
and the memory models; the stage split, the per-stage power caps, the timeline and the calibration
replay build theirs the same way, so that none of them looks up a stack constant, a pipeline rank
or a layer's time in a way of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from planner.costs.layer_times import KindTimes, kind_times, layer_rows
from planner.costs.offload import FIT_HEADROOM
from planner.costs.pipeline_ranks import PipelineRanks, pipeline_ranks, rank_param_split
from planner.layout.arrays import take
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, StackConstants, StackSpec
from planner.specs.precision import Precision


@dataclass(frozen=True)
class JobContext:
    """What every cost model of one scoring reads (arrays over the rows of `layouts`)."""

    model: ModelSpec
    cluster: ClusterSpec  # as the job runs: under its power cap when it has one
    layouts: object  # planner.layout.space.Layouts
    ranks: PipelineRanks  # the ranks evaluated: the bounding first and last, or every rank of a split
    stack: StackConstants  # the stack's constants on this GPU (fitted ones where it was calibrated)
    numerics: Precision  # bytes per value of the training precision
    given_kinds: list[KindTimes] | None = field(default=None, repr=False)  # per-layer times already known
    # GPU memory the job keeps free (the memory constraint's --memory-headroom): what the offloaded layer
    # count fits under (planner/costs/memory.py activation_offload_layers)
    memory_headroom: float = FIT_HEADROOM
    # what one cost model derives for the others, once (planner/costs/memory.py offload_layers_of)
    derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # a replace() starts anew

    @property
    def gpu(self) -> GpuSpec:
        return self.cluster.gpu

    @property
    def profile(self) -> StackSpec:
        """The stack profile itself: what it overlaps and how ZeRO-3 gathers (not per GPU)."""
        return self.model.training.stack

    @cached_property
    def params(self) -> tuple[np.ndarray, np.ndarray]:
        """Unsharded parameters per GPU of each rank evaluated: (split over tp, routed experts);
        the step time's data-parallel traffic and the memory's states both read them."""
        return rank_param_split(self.model, self.layouts, self.ranks)

    @cached_property
    def params_most(self) -> tuple[np.ndarray, np.ndarray]:
        """(dense, routed experts) parameters of the ranks holding the most of each, per row: what
        bounds a step's data-parallel traffic, its optimizer step and a checkpoint's write."""
        dense, experts = (x.max(axis=0) for x in np.broadcast_arrays(*self.params))
        return dense, experts

    @cached_property
    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(first, inverse) of the rows alike in what a layer costs in time and stored activations."""
        return layer_rows(self.layouts, self.model, self.cluster.gpu)

    @cached_property
    def kinds(self) -> list[KindTimes]:
        """Per-layer times of each kind of layer, spread over every row."""
        if self.given_kinds is not None:
            return self.given_kinds
        return kind_times(self.model, self.cluster, self.stack, self.layouts)

    def row(self, i: int) -> JobContext:
        """The context of row `i` alone, with its per-layer times taken from this one's (a search
        computes them for all candidate rows at once)."""
        index = np.array([i])
        return job_context(self.model, self.cluster, self.layouts.take(index),
                           kinds=[take(k, index) for k in self.kinds], memory_headroom=self.memory_headroom)


def job_context(model: ModelSpec, cluster: ClusterSpec, layouts, ranks: PipelineRanks | None = None,
                kinds: list[KindTimes] | None = None, memory_headroom: float = FIT_HEADROOM) -> JobContext:
    """The context of `layouts`; `ranks`: the pipeline ranks to evaluate (None: the bounding
    ranks of the default split, which bound the others; planner/costs/pipeline_ranks.py);
    `memory_headroom`: the fraction of GPU memory the job keeps free (Limits.memory_headroom)."""
    ranks = pipeline_ranks(model, layouts) if ranks is None else ranks
    return JobContext(model, cluster, layouts, ranks, model.training.stack.for_gpu(cluster.gpu.name),
                      model.training.numerics, kinds, memory_headroom)
