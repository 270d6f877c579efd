"""Generated protobuf code (private; do not import)."""
