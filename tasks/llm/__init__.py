"""The LLM gateway: every teacher, judge, simulated-tool and student call goes through it."""
