"""The CP-SAT models, where choices are coupled, and their shared deterministic solve."""
