"""Making and converting nkmpi datasets (dataset v1, see README)."""
