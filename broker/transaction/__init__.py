"""The transaction coordinator (KIP-98): sans-IO state and transitions (state.py), the `__transaction_state`
records (records.py), the driver that follows the topic's leadership and writes markers (coordinator.py), and
the request handlers (api.py)."""
