"""The mains' library: training launch, evaluation, comparison, reports, the quickstart
pipeline."""
