"""The asyncio driver of a region: its sockets, client connections and the metrics endpoint."""
