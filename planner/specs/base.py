"""What every spec shares: strict frozen models, the plausibility bounds, and plain preset names."""
from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict



# Upper bounds reject absurd values (a typo of a few orders of magnitude), not future hardware.
# Lower bounds reject values no real hardware has, which would make search rank layouts of 1e300 s:
# rates >= MIN_TFLOPS TFLOP/s and MIN_GBPS GB/s, memory >= MIN_GIB GiB, efficiencies and
# power-cap fractions >= MIN_FRACTION, powers >= MIN_W W, a GPU's MTBF >= 1 h.
MIN_TFLOPS = 0.01  # 10 GFLOP/s: below any GPU's tensor or vector peak
MIN_GBPS = 0.01  # 10 MB/s (80 Mb/s): below any NIC, link or memory
MIN_GIB = 0.1
MIN_FRACTION = 0.01
MIN_W = 1.0
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Spec(BaseModel):
    model_config = STRICT


# A shipped name (GPU preset, stack profile): a file name in configs/<kind>/ without `.yaml`, never
# a path, so that `gpu: ../models/x` or `stack: /etc/x` cannot read another file as a preset.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def is_plain_name(name: object) -> bool:
    return isinstance(name, str) and PLAIN_NAME.fullmatch(name) is not None and ".." not in name
