"""kopf handlers (thin): they feed the in-memory state; reconcile loops act on it."""
