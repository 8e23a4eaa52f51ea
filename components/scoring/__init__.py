"""The sandbox that scores untrusted answers outside the pipeline's process."""
