"""Golden per-request results of the simulator (see README.md in this folder)."""
