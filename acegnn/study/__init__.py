"""Studies: grids of ordinary runs and their reports by the paper's protocol
(:mod:`~acegnn.study.report`)."""
