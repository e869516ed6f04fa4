"""Forgetting: selective forget (§8.5) and GDPR erasure (§8.6), §11."""
