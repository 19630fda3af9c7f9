"""KAgentBench-format suites: agentune's own held-out benchmark (from an sft_dataset test split)
and a KAgentBench file, answered by every model and scored as the official script scores."""
