"""Unit constants: specs carry their units in field names (GB/s, TFLOP/s, us, GiB); the cost
models work in bytes, seconds and FLOP/s. Conversions use these names, never bare literals."""
from __future__ import annotations

GIB = 2.0**30  # bytes in a GiB (memory sizes)
GB = 1e9  # bytes in a GB (bandwidths are GB/s)
MB = 1e6  # bytes in an MB (NCCL message sizes)
TERA = 1e12  # FLOP/s in a TFLOP/s
US = 1e-6  # seconds in a microsecond
S_PER_H = 3600.0
S_PER_DAY = 86_400.0
J_PER_KWH = 3.6e6
KWH_PER_MWH = 1e3
WH_PER_MWH = 1e6
G_PER_T = 1e6  # grams in a tonne
W_PER_KW = 1e3
