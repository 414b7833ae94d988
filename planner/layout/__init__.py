"""The layout space: the axis registry, the enumeration, and aligned-array records."""
