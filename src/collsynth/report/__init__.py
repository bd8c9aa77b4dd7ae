"""Reports: comparisons across algorithms and sizes, tables and plots."""
