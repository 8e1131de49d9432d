"""Making and converting nkmpi datasets (dataset v1, see docs/formats.md)."""
