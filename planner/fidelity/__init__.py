"""How right the predictions are: published measurements replayed, error bands, ranking metrics."""
