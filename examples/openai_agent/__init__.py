"""An OpenAI Agents SDK agent, unmodified, trained through swarmrl's OpenAI-compatible shim."""
