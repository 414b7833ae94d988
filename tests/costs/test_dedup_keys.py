"""Costs computed once per distinct combination of the axes they read (layer_rows, _dp_traffic) and spread back:
a whole space scored at once must give each row what it gets scored alone. Any difference is a dedup key
missing an input (the FSDP/TP-overlap column of layer_rows, ep and etp in ZeRO-3's key: without them 17,172
of llama3-70b's rows on 256 H100s and 33,861 ZeRO-3 rows of qwen3-30b-a3b were priced as another row)."""
from __future__ import annotations

import numpy as np
import pytest

from planner.layout.space import enumerate_layouts
from planner.score import score
from planner.specs.loading import load_cluster, load_model


@pytest.mark.parametrize("name, cluster, gpus", [("llama3-70b", "dgx-h100-1024", 256),
                                                  ("qwen3-30b-a3b", "dgx-h100-1024", 64)])
def test_a_space_scored_at_once_is_each_row_scored_alone(name, cluster, gpus):
    model, c = load_model(name), load_cluster(cluster)
    moe = model.moe
    lay = enumerate_layouts(gpus=gpus, layers=model.layers, heads=model.heads, kv_heads=model.kv_heads,
                            global_batch=model.training.global_batch, seq_len=model.seq_len,
                            experts=moe.experts if moe else 0)
    whole = score(model, c, lay)
    rng = np.random.default_rng(0)
    rows = np.concatenate([rng.choice(np.flatnonzero(lay.zero == z), min(40, int((lay.zero == z).sum())), replace=False)
                           for z in (1, 2, 3) if (lay.zero == z).any()])
    for i in rows:
        alone = score(model, c, lay.take(np.array([i])))
        for part in ("tp_comm", "dp_comm", "compute", "ep_comm"):
            assert float(np.asarray(getattr(whole.time_s, part))[i]) == pytest.approx(
                float(np.asarray(getattr(alone.time_s, part))[0]), rel=1e-12, abs=1e-15), (part, lay.row(int(i)))
