"""The train_retriever stage: a contrastively trained tool encoder, published as ``retriever``."""

STAGE = "train_retriever"
