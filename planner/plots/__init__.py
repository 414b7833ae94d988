"""Pictures: sweep figures, the time-energy frontier and the pipeline timeline (matplotlib, Agg)."""
