"""Pooling models' front ends (docs/pooling.md): /v1/rerank, /rerank, /v2/rerank, /v1/score, /classify,
/v1/classify and /pooling over a pooling engine, and the decoder embedders behind /v1/embeddings."""
