"""The LLM Coder: plan → code → verify → refine through the Anthropic API, with its prompt, reply parsing,
feedback, judge, key lookup and pricing."""
