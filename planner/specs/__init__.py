"""Typed, frozen specs of the hardware and the training job.

Every field carries its unit in its name (`memory_gib`, `nvlink_gbps`, `tdp_w`). Specs are validated
once, at load time (`planner.specs.loading`); cost code trusts them. Bandwidths are GB/s (1e9 bytes/s)
per GPU per direction; memory sizes are GiB (2**30 bytes); compute is dense TFLOP/s (1e12).
"""
from __future__ import annotations
from planner.specs.base import MIN_FRACTION, MIN_GBPS, MIN_GIB, MIN_TFLOPS, MIN_W, PLAIN_NAME, Spec, is_plain_name
from planner.specs.hardware import (ClusterSpec, Efficiency, GpuPower, GpuSpec, NetworkSpec, NodeSpec, PeakTflops,
                                     PoolSpec, PowerCap, PowerSpec, PricingSpec, ReliabilitySpec)
from planner.specs.model import MlaSpec, ModelSpec, MoeSpec, TrainingSpec
from planner.specs.stack import StackConstants, StackGpuConstants, StackSpec

__all__ = ["MIN_FRACTION", "MIN_GBPS", "MIN_GIB", "MIN_TFLOPS", "MIN_W", "PLAIN_NAME", "ClusterSpec", "Efficiency",
           "GpuPower", "GpuSpec", "MlaSpec", "ModelSpec", "MoeSpec", "NetworkSpec", "NodeSpec", "PeakTflops",
           "PoolSpec", "PowerCap", "PowerSpec", "PricingSpec", "ReliabilitySpec", "Spec", "StackConstants",
           "StackGpuConstants", "StackSpec", "TrainingSpec", "is_plain_name"]
