"""From a trace to an analysis: operator categories, shares and the timeline of one run."""
