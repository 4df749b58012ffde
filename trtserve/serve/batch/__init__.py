"""The OpenAI Batch API (/v1/files, /v1/batches) over the durable state store."""
