"""Helper processes and shared machinery of the fault-injection suite."""
