"""The submit side: submit files, the user commands and their tables (uses the broker)."""
