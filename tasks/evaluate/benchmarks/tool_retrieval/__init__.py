"""Tool retrieval: the trained retriever's recall and MRR of the tools each query needs."""
