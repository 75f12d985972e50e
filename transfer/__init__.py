"""File transfer through the broker: chunks, manifests, the execute machine's cache and URL plugins."""
