"""BFCL (Berkeley Function Calling Leaderboard v4) through bfcl-eval's own scorer: a seeded
subset of each category answered through the gateway, scored by ``bfcl evaluate``."""
