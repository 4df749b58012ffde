"""The Anthropic Messages API (/v1/messages) on the shared generation path."""
